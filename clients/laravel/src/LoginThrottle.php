<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use DateInterval;
use Illuminate\Container\Container;
use Illuminate\Redis\Connections\Connection;
use InvalidArgumentException;

/**
 * Login throttling that counts failed logins only, with the methods of
 * Laravel's `RateLimiter` that `ThrottlesLogins` (laravel/ui) and Breeze's
 * `LoginRequest` call: look before the attempt (`tooManyAttempts`), count a
 * failure (`hit`), forget the key after a success (`clear`), and say how
 * long the lockout lasts (`availableIn`). Each is one THROTTLE command on
 * one key (a fixed window, as Laravel's); no Lua, no second key.
 *
 *     $throttle = new LoginThrottle(maxAttempts: 5, decaySeconds: 60, lockoutSeconds: 15 * 60);
 *     if ($throttle->tooManyAttempts($key)) {
 *         return response("try again in {$throttle->availableIn($key)} s", 429);
 *     }
 *     Auth::attempt($credentials) ? $throttle->clear($key) : $throttle->hit($key);
 *
 * Without a lockout it counts as Laravel's RateLimiter does: after
 * `maxAttempts` failures within `decaySeconds` of the first, the key is
 * locked until that window ends. With `lockoutSeconds` the
 * `maxAttempts`-th failure in the window bans the key for that long from
 * that failure ("block for 15 minutes after 5 failed logins"), however
 * often it is retried meanwhile; then it starts afresh. In the module's
 * terms: a peek (`COST 0`) before, a forced unit (`FORCE`, so every failure
 * counts) against `maxAttempts - 1` with `BAN` after a failure, and `DEL`
 * after a success. With `maxAttempts` 1 each failure bans the key at once
 * (`BAN ... NOW`), from that failure.
 *
 * The second arguments of Laravel's methods are taken too, so that the
 * class stands in for the `RateLimiter` that ThrottlesLogins' `limiter()`
 * returns: `tooManyAttempts($key, $maxAttempts)` checks the count against
 * that number, `hit($key, $decaySeconds)` opens a new window of that length;
 * the lockout starts at the throttle's own `maxAttempts`. Give the throttle
 * the controller's numbers (see the package README).
 *
 * Time is the server's clock, or Carbon's test now sent as `AT`, as for
 * the rest of the package. `reply` holds the last command's reply, with
 * DETAIL's hits and ban.
 */
class LoginThrottle
{
    /** The last command's reply (with DETAIL: hits, bannedMs, nextFreeMs). */
    public ?Reply $reply = null;

    /** The window failures count in, in ms. */
    public int $decayMs;

    /** How long the maxAttempts-th failure bans the key for, in ms; null: no ban, Laravel's lockout. */
    public ?int $lockoutMs = null;

    private Connection $connection;
    private string $keyPrefix;
    private Limiter $limiter;

    /**
     * @param int $maxAttempts failures allowed in a window; the next login is refused
     * @param int|DateInterval $decaySeconds the window: seconds, or an interval
     * @param int|DateInterval|null $lockoutSeconds the ban the maxAttempts-th failure starts; null: none
     * @param Connection|null $connection null: the package config's `connection`
     * @param string|null $keyPrefix before each key, after the connection's prefix; null: the config's
     *        `prefix` (`throttle:`) then `login:`
     */
    public function __construct(
        public int $maxAttempts = 5,
        $decaySeconds = 60,
        $lockoutSeconds = null,
        ?Connection $connection = null,
        ?string $keyPrefix = null,
    ) {
        if ($maxAttempts < 1) {
            throw new InvalidArgumentException("LoginThrottle: maxAttempts must be at least 1; got $maxAttempts");
        }
        $this->decayMs = Penalties::lengthMs($decaySeconds, 'LoginThrottle: decaySeconds');
        if ($lockoutSeconds !== null) {
            $this->lockoutMs = Penalties::lengthMs($lockoutSeconds, 'LoginThrottle: lockoutSeconds');
        }
        if ($connection === null || $keyPrefix === null) {
            $app = Container::getInstance();
            $config = $app->bound('config') ? $app['config'] : null;
            $connection ??= $app['redis']->connection($config?->get('throttle-native.connection'));
            $keyPrefix ??= (string) ($config?->get('throttle-native.prefix', 'throttle:') ?? 'throttle:') . 'login:';
        }
        $this->connection = $connection;
        $this->keyPrefix = $keyPrefix;
        $this->limiter = new Limiter($connection, $keyPrefix);
    }

    /**
     * Whether a login for $key must not be tried now: the key is banned, or
     * counts $maxAttempts failures (default: the throttle's) in its window.
     * Counts nothing.
     */
    public function tooManyAttempts(string $key, ?int $maxAttempts = null): bool
    {
        $maxAttempts = $this->checkedMax($maxAttempts, 'tooManyAttempts');
        $reply = $this->peek($key);
        return $reply->banned() || (int) $reply->hits >= $maxAttempts;
    }

    /**
     * Counts one failed login and returns the failures the key counts now.
     * The throttle's maxAttempts-th failure in the window starts the
     * lockout, when there is one. $decaySeconds (seconds or an interval)
     * is the length of a window this failure opens; default the throttle's.
     *
     * @param int|DateInterval|null $decaySeconds
     */
    public function hit(string $key, $decaySeconds = null): int
    {
        $decayMs = $decaySeconds === null ? $this->decayMs : Penalties::lengthMs($decaySeconds, 'LoginThrottle->hit(): decaySeconds');
        if ($this->lockoutMs === null) {
            // Laravel's count: every failure counts, past the limit too.
            $this->call($key, $this->maxAttempts, $decayMs, 1, new Penalties(force: true));
        } elseif ($this->maxAttempts === 1) {
            // No limit lets 0 failures through: every failure bans at once.
            $this->call($key, 1, $decayMs, 0, new Penalties(banMs: $this->lockoutMs, now: true));
        } else {
            // maxAttempts - 1 failures fit; the next pushes the key over and bans it.
            $this->call($key, $this->maxAttempts - 1, $decayMs, 1, new Penalties(banMs: $this->lockoutMs, force: true));
        }
        return $this->countOf($this->reply);
    }

    /**
     * Failed logins the key counts now; in a lockout, those that led to it
     * and any counted since (a lockout set by lockout() keeps the count it
     * found).
     */
    public function attempts(string $key): int
    {
        return $this->countOf($this->peek($key));
    }

    /** Failures left before the lockout: 0 while it holds. */
    public function remaining(string $key, ?int $maxAttempts = null): int
    {
        $maxAttempts = $this->checkedMax($maxAttempts, 'remaining');
        $reply = $this->peek($key);
        return $reply->banned() ? 0 : max(0, $maxAttempts - (int) $reply->hits);
    }

    /** Laravel's other name for remaining(). */
    public function retriesLeft(string $key, ?int $maxAttempts = null): int
    {
        return $this->remaining($key, $maxAttempts);
    }

    /**
     * Seconds, rounded up, until the key is free again: what is left of its
     * ban, else of its window (as Laravel's availableIn, which counts to the
     * window's end); 0 for a key with no failures.
     */
    public function availableIn(string $key): int
    {
        $reply = $this->peek($key);
        return $reply->banned() ? $reply->bannedSeconds() : $reply->resetAfterSeconds();
    }

    /** Forgets the key's failures and lifts its lockout (after a successful login). */
    public function clear(string $key): void
    {
        $this->connection->command('del', [$this->keyPrefix . $key]);
    }

    /** Laravel's name for clearing the count: the same as clear(). */
    public function resetAttempts(string $key): int
    {
        $this->clear($key);
        return 0;
    }

    /**
     * Locks the key out now, for $lockoutSeconds (default the throttle's
     * lockout), whatever it counts: an account an administrator locks, or
     * a ban from elsewhere (the module's `BAN d NOW`).
     *
     * @param int|DateInterval|null $lockoutSeconds
     */
    public function lockout(string $key, $lockoutSeconds = null): void
    {
        $lockoutMs = $lockoutSeconds === null ? $this->lockoutMs : Penalties::lengthMs($lockoutSeconds, 'LoginThrottle->lockout(): lockoutSeconds');
        if ($lockoutMs === null) {
            throw new InvalidArgumentException('LoginThrottle->lockout(): lockoutSeconds is needed, since the throttle has no lockout of its own');
        }
        $this->call($key, $this->limit(), $this->decayMs, 0, new Penalties(banMs: $lockoutMs, now: true));
    }

    /** The key as it stands, changing nothing (`COST 0 DETAIL`). */
    private function peek(string $key): Reply
    {
        return $this->call($key, $this->limit(), $this->decayMs, 0, null);
    }

    /** The limit the failures are counted against: maxAttempts - 1 under a lockout (see hit()). */
    private function limit(): int
    {
        return $this->lockoutMs === null || $this->maxAttempts === 1 ? $this->maxAttempts : $this->maxAttempts - 1;
    }

    private function call(string $key, int $limit, int $periodMs, int $cost, ?Penalties $penalties): Reply
    {
        return $this->reply = $this->limiter->attempt($key, 'fixed', $limit, $periodMs, $cost, 0, $penalties, true);
    }

    /**
     * The failures a reply shows. With maxAttempts 1 a failure bans with
     * NOW, which counts no unit: a lockout there shows at least the one.
     */
    private function countOf(Reply $reply): int
    {
        return $reply->banned() && $this->maxAttempts === 1 ? max((int) $reply->hits, 1) : (int) $reply->hits;
    }

    private function checkedMax(?int $maxAttempts, string $method): int
    {
        if ($maxAttempts !== null && $maxAttempts < 1) {
            throw new InvalidArgumentException("LoginThrottle->$method(): maxAttempts must be at least 1; got $maxAttempts");
        }
        return $maxAttempts ?? $this->maxAttempts;
    }
}
