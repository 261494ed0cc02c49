<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Closure;
use Illuminate\Cache\RateLimiter;
use Illuminate\Contracts\Config\Repository as Config;
use Illuminate\Contracts\Redis\Factory as Redis;
use Illuminate\Routing\Middleware\ThrottleRequests as LaravelThrottleRequests;
use InvalidArgumentException;
use Symfony\Component\HttpFoundation\Response;

/**
 * Laravel's `throttle` middleware on the module: `throttle.native:60,1`
 * (attempts, decay minutes, optional key prefix) or `throttle.native:api`
 * for a limiter defined with `RateLimiter::for('api', ...)`.
 *
 * Everything but the counting is Laravel's own, inherited: the request
 * signature (user, else route domain and IP), named limiters with several
 * limits and `->response(...)`, the `X-RateLimit-*` headers, and the
 * `ThrottleRequestsException` (429, `Retry-After`, `X-RateLimit-Reset`)
 * that the application's exception handler renders. The counting is one
 * THROTTLE command per request; several limits go in one `THROTTLE.ALL`,
 * admitted all or nothing.
 *
 * Keys: the connection's prefix, the config's `prefix`, then Laravel's key;
 * a named limiter's keys carry the hash tag `{name}` so that its limits share
 * a Redis Cluster slot.
 */
class ThrottleRequests extends LaravelThrottleRequests
{
    protected Limiter $native;
    protected string $algorithm;
    protected bool $ietfHeaders;

    /** The named limiter being applied, if any. */
    protected ?string $limiterName = null;

    /** @var array<string, Reply> this request's reply for each limit key */
    protected array $replies = [];

    /** @var array<string, string> this request's RateLimit-Policy and RateLimit fields, when enabled */
    protected array $ietfFields = [];

    public function __construct(RateLimiter $limiter, Redis $redis, Config $config)
    {
        parent::__construct($limiter);
        $settings = (array) $config->get('throttle-native', []);
        $this->algorithm = (string) ($settings['algorithm'] ?? 'fixed');
        Limiter::checkAlgorithm($this->algorithm, 'throttle-native.algorithm');
        $this->ietfHeaders = (bool) ($settings['ietf_headers'] ?? false);
        $this->native = new Limiter(
            $redis->connection($settings['connection'] ?? null),
            (string) ($settings['prefix'] ?? ''),
        );
    }

    protected function handleRequestUsingNamedLimiter($request, Closure $next, $limiterName, Closure $limiter)
    {
        $this->limiterName = $limiterName;
        try {
            return parent::handleRequestUsingNamedLimiter($request, $next, $limiterName, $limiter);
        } finally {
            $this->limiterName = null;
        }
    }

    /**
     * @param  array<object>  $limits  Laravel's: key, maxAttempts, decayMinutes (Laravel 11: decaySeconds), responseCallback
     */
    protected function handleRequest($request, Closure $next, array $limits)
    {
        $tag = $this->limiterName === null ? '' : '{' . $this->limiterName . '}:';
        $specs = [];
        foreach ($limits as $limit) {
            $specs[] = [$tag . $limit->key, $this->algorithm, self::maxAttempts($limit), self::periodMs($limit)];
        }
        [$allowed, $replies] = $this->native->attemptAll($specs);

        $this->replies = [];
        foreach ($limits as $i => $limit) {
            $this->replies[$limit->key] = $replies[$i];
        }
        $this->ietfFields = $this->ietfHeaders ? $this->ietfFieldsFor($specs, $replies) : [];

        if (!$allowed) {
            // As Laravel: the first limit, in order, that refused answers.
            foreach ($limits as $i => $limit) {
                if (!$replies[$i]->allowed) {
                    throw $this->buildException($request, $limit->key, $limit->maxAttempts, $limit->responseCallback);
                }
            }
        }

        $response = $next($request);
        foreach ($limits as $limit) {
            $response = $this->addHeaders(
                $response,
                $limit->maxAttempts,
                $this->calculateRemainingAttempts($limit->key, $limit->maxAttempts),
            );
        }
        return $response;
    }

    /**
     * Seconds until this request, all its limits together, would be
     * admitted: the largest `retry_after` of the limits that refused,
     * rounded up.
     */
    protected function getTimeUntilNextRetry($key)
    {
        $seconds = 0;
        foreach ($this->replies as $reply) {
            if (!$reply->allowed) {
                $seconds = max($seconds, $reply->retryAfterSeconds());
            }
        }
        return $seconds;
    }

    protected function calculateRemainingAttempts($key, $maxAttempts, $retryAfter = null)
    {
        return $retryAfter === null ? $this->replies[$key]->remaining : 0;
    }

    /** Laravel's headers, plus the IETF fields when `ietf_headers` is on. */
    protected function getHeaders($maxAttempts, $remainingAttempts, $retryAfter = null, ?Response $response = null)
    {
        $headers = parent::getHeaders($maxAttempts, $remainingAttempts, $retryAfter, $response);
        return $headers === [] ? [] : $headers + $this->ietfFields;
    }

    /**
     * `RateLimit-Policy` and `RateLimit` of draft-ietf-httpapi-ratelimit-headers,
     * one item per limit: `q` the limit, `w` the period in seconds; `r` what
     * remains, `t` seconds until the key is idle again (on a refused TOKEN or
     * LEAKY limit: until the call can be admitted), rounded up.
     *
     * @param list<array{0: string, 1: string, 2: int, 3: int}> $specs
     * @param list<Reply> $replies
     * @return array<string, string>
     */
    protected function ietfFieldsFor(array $specs, array $replies): array
    {
        $policies = $states = [];
        $base = $this->limiterName ?? 'default';
        foreach ($specs as $i => [, $algorithm, $limit, $periodMs]) {
            $name = count($specs) === 1 ? $base : $base . '-' . ($i + 1);
            $name = '"' . addcslashes(preg_replace('/[^\x20-\x7e]/', '_', $name), '"\\') . '"';
            $reply = $replies[$i];
            $untilAdmitted = !$reply->allowed && in_array($algorithm, ['token', 'leaky'], true);
            $policies[] = sprintf('%s;q=%d;w=%d', $name, $limit, intdiv($periodMs + 999, 1000));
            $states[] = sprintf('%s;r=%d;t=%d', $name, $reply->remaining,
                $untilAdmitted ? $reply->retryAfterSeconds() : $reply->resetAfterSeconds());
        }
        return ['RateLimit-Policy' => implode(', ', $policies), 'RateLimit' => implode(', ', $states)];
    }

    private static function maxAttempts(object $limit): int
    {
        if ((int) $limit->maxAttempts < 1) {
            throw new InvalidArgumentException(sprintf(
                "throttle.native: maxAttempts must be a positive integer; got '%s' (a named limiter that is not defined reads as 0)",
                $limit->maxAttempts,
            ));
        }
        return (int) $limit->maxAttempts;
    }

    /** The limit's decay in milliseconds: Laravel 8-10 give minutes (a route's may be "0.5"), 11 seconds. */
    private static function periodMs(object $limit): int
    {
        $minutes = isset($limit->decaySeconds) ? $limit->decaySeconds / 60 : $limit->decayMinutes;
        if (!is_numeric($minutes) || $minutes <= 0) {
            throw new InvalidArgumentException(sprintf(
                "throttle.native: decayMinutes must be a positive number; got '%s'", $minutes,
            ));
        }
        return max(1, (int) round($minutes * 60_000));
    }
}
