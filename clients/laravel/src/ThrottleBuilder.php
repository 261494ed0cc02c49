<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Contracts\Redis\LimiterTimeoutException;
use Illuminate\Redis\Connections\Connection;
use Illuminate\Support\InteractsWithTime;
use InvalidArgumentException;

/**
 * `Redis::throttleNative('key')`: the API of Laravel's `Redis::throttle()`
 * (DurationLimiterBuilder) on one THROTTLE command:
 *
 *     Redis::throttleNative('mail')->allow(20)->every(1)->block(5)
 *         ->then(fn () => $this->send(), fn ($e) => $this->release(10));
 *
 * `block($seconds)` waits on the server (the module's `BLOCK`), in one call,
 * and the caller is woken the moment it is admitted: no polling. Added:
 * `using('sliding')` picks the algorithm, `cost($n)` the units a call takes,
 * and the penalties, each the module's option of the same name:
 *
 *     Redis::throttleNative('api:' . $key)->allow(100)->every(60)->ban(600)->renewBan()
 *         ->then(fn () => $next($request), fn ($e) => abort(429, "banned for {$e->reply->bannedSeconds()} s"));
 *
 * `ban($seconds)`: a refused call bans the key for that long (every call is
 * refused until it ends, then the key is fresh); `renewBan()`: each refused
 * call restarts it; `backoff($maxSeconds)`: each refused call doubles it, up
 * to that; `tally($cap)`: refused calls count against the limit all the
 * same. With any of them the reply (`->reply`, `$e->reply`) carries DETAIL's
 * `hits`, `bannedMs` and `nextFreeMs`. `block()` on a banned key waits for
 * the ban to end, or its own time-out.
 */
class ThrottleBuilder
{
    use InteractsWithTime;

    public ?int $maxLocks = null;
    public ?int $decay = null;
    /** Seconds to wait for a slot; 0 tries once. Laravel's default is 3. */
    public int $timeout = 3;
    public int $cost = 1;
    /** ban(): ms a refused call bans the key for. */
    public ?int $banMs = null;
    /** renewBan(): each refused call restarts the ban. */
    public bool $renewBan = false;
    /** backoff(): each refused call doubles the ban, up to this many ms. */
    public ?int $backoffMaxMs = null;
    /** tally(): refused calls count, until the key counts this many units. */
    public ?int $tallyCap = null;
    /**
     * The last call's reply, set before the callback runs (and so readable
     * inside it); with penalties it has DETAIL's hits, bannedMs, nextFreeMs.
     */
    public ?Reply $reply = null;

    public function __construct(
        public Connection $connection,
        public string $name,
        public string $algorithm = 'fixed',
        private string $keyPrefix = '',
    ) {
        Limiter::checkAlgorithm($algorithm, 'throttle-native.algorithm');
    }

    /** Calls (units) admitted per window. */
    public function allow(int $maxLocks): static
    {
        if ($maxLocks < 1) {
            throw new InvalidArgumentException("throttleNative('{$this->name}')->allow(): maxLocks must be at least 1; got $maxLocks");
        }
        $this->maxLocks = $maxLocks;
        return $this;
    }

    /** The window: seconds, or a DateInterval / DateTimeInterface as in Laravel. */
    public function every($decay): static
    {
        $seconds = $this->secondsUntil($decay);
        if ($seconds < 1) {
            throw new InvalidArgumentException("throttleNative('{$this->name}')->every(): decay must be at least 1 second; got $seconds");
        }
        $this->decay = $seconds;
        return $this;
    }

    /**
     * Seconds to wait for a slot before giving up; 0 tries once. Sent as
     * `BLOCK` in milliseconds: keep it below the connection's read timeout.
     */
    public function block(int $timeout): static
    {
        if ($timeout < 0) {
            throw new InvalidArgumentException("throttleNative('{$this->name}')->block(): timeout must be 0 or more seconds; got $timeout");
        }
        $this->timeout = $timeout;
        return $this;
    }

    /** Laravel's polling interval; accepted and ignored, since BLOCK does not poll. */
    public function sleep(int $sleep): static
    {
        return $this;
    }

    /** The algorithm: fixed (Laravel's), sliding, sliding-exact, token or leaky. */
    public function using(string $algorithm): static
    {
        Limiter::checkAlgorithm($algorithm, "throttleNative('{$this->name}')->using()");
        $this->algorithm = $algorithm;
        return $this;
    }

    /** Units this call takes, default 1; 0 only looks. */
    public function cost(int $cost): static
    {
        if ($cost < 0) {
            throw new InvalidArgumentException("throttleNative('{$this->name}')->cost(): cost must be 0 or more; got $cost");
        }
        $this->cost = $cost;
        return $this;
    }

    /**
     * A refused call bans the key for $length: whole seconds, or a
     * DateInterval (`CarbonInterval::minutes(15)`), from 1 s (1 ms) to 3650
     * days. While banned every call is refused, with `retry_after` what is
     * left of the ban; then the key is idle. Refusals during the ban leave
     * it as it is, unless renewBan() or backoff().
     *
     * @param int|\DateInterval $length
     */
    public function ban($length): static
    {
        $this->banMs = Penalties::lengthMs($length, "throttleNative('{$this->name}')->ban()");
        return $this;
    }

    /** With ban(): each refused call during the ban restarts it (the module's RENEW). */
    public function renewBan(): static
    {
        $this->renewBan = true;
        return $this;
    }

    /**
     * With ban(): each refused call during the ban doubles it, from that
     * call, never past $max (seconds or a DateInterval; at least the ban's
     * length): the module's BACKOFF.
     *
     * @param int|\DateInterval $max
     */
    public function backoff($max): static
    {
        $this->backoffMaxMs = Penalties::lengthMs($max, "throttleNative('{$this->name}')->backoff()");
        return $this;
    }

    /**
     * Refused calls count against the limit all the same (their units are
     * taken), until the key counts $cap units (1 to 10^15; the default is
     * the most): the module's TALLY. `->reply->hits` reports the count.
     */
    public function tally(int $cap = Penalties::MAX_TALLY): static
    {
        $this->tallyCap = Penalties::tallyCap($cap, "throttleNative('{$this->name}')->tally()");
        return $this;
    }

    /**
     * The penalties the calls carry, checked together: renewBan() and
     * backoff() shape a ban, so they need ban(), and exclude each other; the
     * longest ban is no shorter than the first.
     */
    public function penalties(): Penalties
    {
        $who = "throttleNative('{$this->name}')";
        if ($this->banMs === null) {
            foreach (['renewBan()' => $this->renewBan, 'backoff()' => $this->backoffMaxMs !== null] as $method => $given) {
                if ($given) {
                    throw new InvalidArgumentException("$who->$method needs ban()");
                }
            }
        }
        if ($this->renewBan && $this->backoffMaxMs !== null) {
            throw new InvalidArgumentException("$who: renewBan() and backoff() exclude each other");
        }
        if ($this->backoffMaxMs !== null && $this->backoffMaxMs < $this->banMs) {
            throw new InvalidArgumentException(sprintf(
                '%s->backoff(): the longest ban, %s, is shorter than ban(), %s',
                $who, Penalties::describe($this->backoffMaxMs), Penalties::describe((int) $this->banMs),
            ));
        }
        return new Penalties($this->banMs, $this->renewBan, $this->backoffMaxMs, $this->tallyCap);
    }

    /**
     * Runs $callback when the call is admitted (within block() seconds) and
     * returns its result; else returns $failure($exception), or throws
     * ThrottleTimeoutException, a LimiterTimeoutException, when there is no
     * $failure. As in Laravel, a LimiterTimeoutException that $callback
     * throws goes to $failure too. The reply is in `->reply` before $callback
     * runs, and in the exception's `reply`.
     *
     * @throws \Illuminate\Contracts\Redis\LimiterTimeoutException
     */
    public function then(callable $callback, ?callable $failure = null): mixed
    {
        if ($this->maxLocks === null || $this->decay === null) {
            throw new InvalidArgumentException("throttleNative('{$this->name}'): call allow() and every() before then()");
        }
        $limiter = new DurationLimiter(
            $this->connection, $this->name, $this->maxLocks, $this->decay, $this->algorithm, $this->cost, $this->keyPrefix,
            $this->penalties(),
        );
        try {
            return $limiter->block($this->timeout, function () use ($limiter, $callback) {
                $this->reply = $limiter->reply;
                return $callback();
            });
        } catch (LimiterTimeoutException $e) {
            if ($failure !== null) {
                return $failure($e);
            }
            throw $e;
        } finally {
            $this->reply = $limiter->reply;
        }
    }
}
