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
    /**
     * The module's largest limit: a limit above it (`Limit::none()` in a list
     * is PHP_INT_MAX) is sent as this, which no window reaches.
     */
    public const MAX_LIMIT = 1_000_000_000_000_000;

    /** The module's longest period, 3650 days, in ms: longer decays are sent as this. */
    public const MAX_PERIOD_MS = 315_360_000_000;

    protected Limiter $native;
    protected string $algorithm;
    protected bool $ietfHeaders;

    /** The named limiter being applied, if any. */
    protected ?string $limiterName = null;

    /**
     * This request's counters, by Laravel's limit key: how many of its limits
     * hit the key, the requests a window admits, the key's period, the reply.
     *
     * @var array<string, array{hits: int, limit: int, periodMs: int, reply: ?Reply}>
     */
    protected array $counters = [];

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
     * Laravel's loop, `tooManyAttempts` then `hit` for each limit in order,
     * as one THROTTLE command (several limits: one `THROTTLE.ALL`, admitted
     * all or nothing).
     *
     * Limits that name the same key share one counter, as in Laravel, which
     * hits that key once per limit: `[Limit::perMinute(3), Limit::perHour(5)]`
     * (no `by()`) counts 2 per request, and the third request is refused by
     * the first limit, which sees 4. Such a group is one key in the module
     * counting requests: as many per window as Laravel's checks let through
     * (requestsPerWindow()). Laravel 11.29 and later give such limits keys of
     * their own (Limit::fallbackKey()) before the middleware sees them, so
     * there only limits equal in key, maxAttempts and decay still share one.
     *
     * @param  array<object>  $limits  Laravel's: key, maxAttempts, decayMinutes (Laravel 11: decaySeconds), responseCallback
     */
    protected function handleRequest($request, Closure $next, array $limits)
    {
        $limits = array_values($limits);
        if ($limits === []) {
            // As Laravel: a named limiter that returns [] (or null) limits nothing.
            return $next($request);
        }

        $tag = $this->limiterName === null ? '' : '{' . $this->limiterName . '}:';
        $groups = $occurrence = [];
        foreach ($limits as $i => $limit) {
            $occurrence[$i] = count($groups[(string) $limit->key] ?? []);
            $groups[(string) $limit->key][] = $limit;
        }
        $this->counters = $specs = [];
        $impossible = false;
        foreach ($groups as $key => $group) {
            $perWindow = self::requestsPerWindow($group);
            $periodMs = self::periodMs($group[0]);
            $this->counters[$key] = ['hits' => count($group), 'limit' => $perWindow, 'periodMs' => $periodMs, 'reply' => null];
            if ($perWindow === 0) {
                $impossible = true;
                continue;
            }
            $specs[$key] = [$tag . $key, $this->algorithm, $perWindow, $periodMs];
        }

        // A group that can never pass refuses the request without counting:
        // the other limits are only looked at (COST 0).
        [$allowed, $replies] = $this->native->attemptAll(array_values($specs), $impossible ? 0 : 1);
        foreach (array_keys($specs) as $n => $key) {
            $this->counters[$key]['reply'] = $replies[$n];
        }
        foreach ($this->counters as $key => $counter) {
            if ($counter['reply'] === null) {
                $this->counters[$key]['reply'] = new Reply(false, 0, 0, $counter['periodMs'], 0);
            }
        }
        $this->ietfFields = $this->ietfHeaders ? $this->ietfFieldsFor($limits) : [];

        if ($impossible || !$allowed) {
            // As Laravel: the first limit, in order, whose check fails answers.
            foreach ($limits as $i => $limit) {
                if ($this->usedBefore((string) $limit->key) + $occurrence[$i] >= (int) $limit->maxAttempts) {
                    throw $this->buildException($request, $limit->key, $limit->maxAttempts, $limit->responseCallback);
                }
            }
            foreach ($limits as $limit) {
                if (!$this->counters[(string) $limit->key]['reply']->allowed) {
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
     * Requests a window admits for limits that share one key, in Laravel's
     * order: the j-th of k limits (from 0) lets a request through while the
     * key's hits c satisfy c + j < maxAttempts_j, and an admitted request
     * adds k hits. So c + k <= min_j(maxAttempts_j - j) - 1 + k, and with
     * c = k * requests that is floor((min_j(maxAttempts_j - j) - 1 + k) / k)
     * requests. 0: no request ever passes. One limit: its maxAttempts.
     *
     * @param non-empty-list<object> $group
     */
    private static function requestsPerWindow(array $group): int
    {
        $least = PHP_INT_MAX;
        foreach ($group as $j => $limit) {
            $least = min($least, min(self::maxAttempts($limit), self::MAX_LIMIT) - $j);
        }
        return max(0, intdiv($least - 1 + count($group), count($group)));
    }

    /** Laravel's hit count for the key before this request: `hits` per request counted. */
    private function usedBefore(string $key): int
    {
        $counter = $this->counters[$key];
        return $counter['hits'] * max(0, $counter['limit'] - $counter['reply']->remaining);
    }

    /**
     * Seconds until this request, all its limits together, would be
     * admitted: the largest `retry_after` of the limits that refused,
     * rounded up.
     */
    protected function getTimeUntilNextRetry($key)
    {
        $seconds = 0;
        foreach ($this->counters as $counter) {
            if (!$counter['reply']->allowed) {
                $seconds = max($seconds, $counter['reply']->retryAfterSeconds());
            }
        }
        return $seconds;
    }

    /** As Laravel's: maxAttempts less the key's hits, after this request. */
    protected function calculateRemainingAttempts($key, $maxAttempts, $retryAfter = null)
    {
        return $retryAfter === null ? (int) $maxAttempts - $this->usedBefore((string) $key) : 0;
    }

    /** Laravel's headers, plus the IETF fields when `ietf_headers` is on. */
    protected function getHeaders($maxAttempts, $remainingAttempts, $retryAfter = null, ?Response $response = null)
    {
        $headers = parent::getHeaders($maxAttempts, $remainingAttempts, $retryAfter, $response);
        return $headers === [] ? [] : $headers + $this->ietfFields;
    }

    /**
     * `RateLimit-Policy` and `RateLimit` of draft-ietf-httpapi-ratelimit-headers,
     * one item per limit: `q` the limit, `w` its key's period in seconds; `r`
     * what remains, `t` seconds until the key is idle again (on a refused TOKEN
     * or LEAKY limit: until the call can be admitted), rounded up.
     *
     * @param list<object> $limits
     * @return array<string, string>
     */
    protected function ietfFieldsFor(array $limits): array
    {
        $policies = $states = [];
        $base = $this->limiterName ?? 'default';
        $untilAdmitted = in_array($this->algorithm, ['token', 'leaky'], true);
        foreach ($limits as $i => $limit) {
            $name = count($limits) === 1 ? $base : $base . '-' . ($i + 1);
            $name = '"' . addcslashes(preg_replace('/[^\x20-\x7e]/', '_', $name), '"\\') . '"';
            $counter = $this->counters[(string) $limit->key];
            $reply = $counter['reply'];
            $policies[] = sprintf('%s;q=%d;w=%d', $name, $limit->maxAttempts, intdiv($counter['periodMs'] + 999, 1000));
            $states[] = sprintf('%s;r=%d;t=%d', $name,
                max(0, (int) $limit->maxAttempts - $this->usedBefore((string) $limit->key)),
                !$reply->allowed && $untilAdmitted ? $reply->retryAfterSeconds() : $reply->resetAfterSeconds());
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

    /**
     * The limit's decay in milliseconds: Laravel 8-10 give minutes (a route's
     * may be "0.5"), 11 seconds. At most the module's longest period, 3650
     * days.
     */
    private static function periodMs(object $limit): int
    {
        $minutes = isset($limit->decaySeconds) ? $limit->decaySeconds / 60 : $limit->decayMinutes;
        if (!is_numeric($minutes) || $minutes <= 0) {
            throw new InvalidArgumentException(sprintf(
                "throttle.native: decayMinutes must be a positive number; got '%s'", $minutes,
            ));
        }
        return max(1, (int) round(min($minutes * 60_000, self::MAX_PERIOD_MS)));
    }
}
