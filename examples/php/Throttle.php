<?php
/**
 * Drop-in replacements, on the throttle module, for Laravel's
 * `Redis::throttle(...)->allow()->every()->block()->then()` and for a
 * rate-limiting HTTP middleware. Plain phpredis (`Redis::rawCommand`), no
 * framework: copy the class into your project.
 */

declare(strict_types=1);

/** Thrown by then() without a failure callback, like Laravel's LimiterTimeoutException. */
final class ThrottleTimeoutException extends RuntimeException
{
    public function __construct(public readonly int $retryAfterMs)
    {
        parent::__construct("rate limit reached; retry in {$retryAfterMs} ms");
    }
}

/**
 * The fluent API of Laravel's DurationLimiterBuilder on one THROTTLE.FIXED
 * call (same semantics: a window of `every` seconds opens at the first
 * admitted call, `allow` calls per window):
 *
 *     (new Throttle($redis, 'asr_create_rec_task'))
 *         ->allow(20)->every(1)->block(0)
 *         ->then(fn () => $client->createRecTask($url), fn () => 'try later');
 *
 * Differences from Laravel: the script, the polling loop (usleep 750 ms) and
 * the hash are gone; block() waits on the server (the module's BLOCK option)
 * and wakes the caller the moment a slot frees; a refused call does not
 * count against the window.
 */
final class Throttle
{
    private int $maxLocks = 1;
    private int $decay = 1;
    /** Seconds to wait for a slot; Laravel's default is 3. */
    private int $timeout = 3;
    private ?int $at = null;

    /** The last reply: [allowed, limit, remaining, retry_after ms, reset_after ms]. */
    public array $reply = [];
    /** Calls left in the window after the last call, like DurationLimiter::$remaining. */
    public int $remaining = 0;

    public function __construct(private \Redis $redis, private string $name)
    {
    }

    /** Calls admitted per window. */
    public function allow(int $maxLocks): static
    {
        $this->maxLocks = $maxLocks;
        return $this;
    }

    /** The window's length in seconds. */
    public function every(int $seconds): static
    {
        $this->decay = $seconds;
        return $this;
    }

    /**
     * Seconds to wait for a slot before giving up; 0 tries once. Mapped to
     * BLOCK in milliseconds. Careful when writing the command by hand: the
     * module's `BLOCK 0` means "no time-out", so 0 here sends no BLOCK.
     */
    public function block(int $seconds): static
    {
        $this->timeout = $seconds;
        return $this;
    }

    /** The call's time in Unix microseconds instead of the server's clock (tests, replays). */
    public function at(int $unixMicros): static
    {
        $this->at = $unixMicros;
        return $this;
    }

    /**
     * Runs $callback when a slot is had (within block() seconds), else
     * $failure($exception), or throws ThrottleTimeoutException when there is
     * no $failure. Returns what the callback returns.
     */
    public function then(callable $callback, ?callable $failure = null): mixed
    {
        $args = ['THROTTLE.FIXED', $this->name, $this->maxLocks, $this->decay];
        if ($this->timeout > 0) {
            array_push($args, 'BLOCK', $this->timeout * 1000);
        }
        if ($this->at !== null) {
            array_push($args, 'AT', $this->at);
        }
        $this->reply = throttle_call($this->redis, $args);
        $this->remaining = $this->reply[2];
        if ($this->reply[0] === 1) {
            return $callback();
        }
        $e = new ThrottleTimeoutException($this->reply[3]);
        if ($failure !== null) {
            return $failure($e);
        }
        throw $e;
    }
}

/**
 * Sends one THROTTLE command and returns its five integers; a Redis error
 * (bad argument, WRONGTYPE) becomes an exception.
 */
function throttle_call(\Redis $redis, array $args): array
{
    $reply = $redis->rawCommand(...$args);
    if (!is_array($reply)) {
        throw new RuntimeException("{$args[0]}: " . ($redis->getLastError() ?? 'unexpected reply'));
    }
    return array_map('intval', $reply);
}

/**
 * Middleware core: counts one request against `$limit` per `$windowSeconds`
 * (THROTTLE.FIXED on `$key`) and answers the status and headers to send:
 * 200 or 429, with the RateLimit-Policy and RateLimit fields of the IETF
 * HTTPAPI draft "RateLimit header fields for HTTP",
 * draft-ietf-httpapi-ratelimit-headers-11 (May 2026, the latest revision;
 * https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/):
 *
 *   RateLimit-Policy: "default";q=20;w=1      section 3: the policy, q units per w seconds
 *   RateLimit: "default";r=0;t=1              section 4: r units left, within the next t seconds
 *   Retry-After: 1                            on 429, seconds (RFC 9110 section 10.2.3)
 *
 * The draft's fields replace the X-RateLimit-* headers of the seed's
 * ThinkPHP middleware. `t` is the window's remaining time, rounded up to
 * whole seconds (the draft has no sub-second precision); section 6 asks that
 * Retry-After not point before the end of that window, and for a fixed
 * window a refused call's retry_after is exactly the window's end.
 *
 * @return array{int, array<string, string>} [status, headers]
 */
function rate_limit(\Redis $redis, string $key, int $limit, int $windowSeconds, string $policy = 'default', ?int $at = null): array
{
    if (!preg_match('/^[A-Za-z0-9_.:-]+$/', $policy)) {
        throw new InvalidArgumentException("policy name '$policy' needs quoting rules this example does not implement");
    }
    $args = ['THROTTLE.FIXED', $key, $limit, $windowSeconds];
    if ($at !== null) {
        array_push($args, 'AT', $at);
    }
    [$allowed, , $remaining, $retryAfterMs, $resetAfterMs] = throttle_call($redis, $args);
    $headers = [
        'RateLimit-Policy' => sprintf('"%s";q=%d;w=%d', $policy, $limit, $windowSeconds),
        'RateLimit' => sprintf('"%s";r=%d;t=%d', $policy, $remaining, intdiv($resetAfterMs + 999, 1000)),
    ];
    if ($allowed === 1) {
        return [200, $headers];
    }
    $headers['Retry-After'] = (string) intdiv($retryAfterMs + 999, 1000);
    return [429, $headers];
}
