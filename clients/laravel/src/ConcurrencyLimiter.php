<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use DateInterval;
use Illuminate\Redis\Connections\Connection;
use InvalidArgumentException;

/**
 * Laravel's `Illuminate\Redis\Limiters\ConcurrencyLimiter` (what
 * `Redis::funnel()` uses) on the module's leases: at most `$maxLocks`
 * callbacks of one name run at once, each holding a slot for at most
 * `$releaseAfter` seconds. The same constructor and `block()`; the same
 * protected `acquire($id)` and `release($key, $id)` for subclasses.
 *
 *     (new ConcurrencyLimiter(Redis::connection(), 'vendor-api', 3, 60))
 *         ->block(10, fn () => $this->callVendor());   // waits on the server, up to 10 s
 *
 * `block($timeout)` is one `THROTTLE.ACQUIRE ... BLOCK` call: a caller that
 * finds every slot held waits on the server, in arrival order, and is let
 * in the moment a slot frees (a release, a lease's end). Laravel's limiter
 * retries every 250 ms (`$sleep`, accepted here and ignored). After the
 * callback, returned or thrown, the lease is released with its own token,
 * so a late release never frees another holder's slot; a holder that dies
 * loses its slot when its lease ends; a long callback can renew() its
 * lease as it goes. A refusal throws
 * ThrottleTimeoutException, a LimiterTimeoutException that carries the
 * reply.
 *
 * The key is one module key (type `thr-lease`) under the connection's
 * prefix and then `$keyPrefix`. While Carbon has a test now each call
 * carries it as `AT`, and a call with `AT` does not wait: `block()` then
 * answers at once.
 */
class ConcurrencyLimiter
{
    /** The most slots the module takes (`THROTTLE.ACQUIRE`'s limit). */
    public const MAX_LOCKS = 100_000;

    /** @var Connection */
    protected $redis;

    /** @var string */
    protected $name;

    /** @var int the most callbacks that run at once */
    protected $maxLocks;

    /** @var int|DateInterval seconds (or an interval, to the ms) a slot is held unless released first */
    protected $releaseAfter;

    /** The last acquisition's reply; admitted, its `token` names the lease. */
    public ?Reply $reply = null;

    /**
     * Whether the last block() with a callback found its lease still held
     * when it released it: false when the lease had ended first (the
     * callback ran longer than releaseAfter, and its slot may have gone to
     * another caller meanwhile). Null before any release.
     */
    public ?bool $released = null;

    private Limiter $limiter;
    private int $leaseMs;
    /** The token of the lease block()'s callback holds, while it runs. */
    private ?string $holding = null;

    /**
     * @param Connection $redis
     * @param string $name the key
     * @param int $maxLocks the most callbacks that run at once, 1 to 100000
     * @param int|DateInterval $releaseAfter seconds a slot is held at most, 1 to 315360000 (3650 days), or a DateInterval down to 1 ms
     * @param string $keyPrefix put before the key, after the connection's prefix
     */
    public function __construct($redis, $name, $maxLocks, $releaseAfter, string $keyPrefix = '')
    {
        // Digits from a config file count as the number they spell.
        [$maxLocks, $releaseAfter] = array_map(
            fn ($value) => is_string($value) && ctype_digit($value) ? (int) $value : $value,
            [$maxLocks, $releaseAfter],
        );
        if (!is_int($maxLocks) || $maxLocks < 1 || $maxLocks > self::MAX_LOCKS) {
            throw new InvalidArgumentException(sprintf(
                'ConcurrencyLimiter maxLocks must be from 1 to %d; got %s',
                self::MAX_LOCKS, is_scalar($maxLocks) ? var_export($maxLocks, true) : get_debug_type($maxLocks),
            ));
        }
        $this->leaseMs = Penalties::lengthMs($releaseAfter, 'ConcurrencyLimiter releaseAfter');
        $this->redis = $redis;
        $this->name = (string) $name;
        $this->maxLocks = $maxLocks;
        $this->releaseAfter = $releaseAfter;
        $this->limiter = new Limiter($redis, $keyPrefix);
    }

    /**
     * Waits up to $timeout seconds (0: tries once) for a slot, runs
     * $callback, releases the slot (also when $callback throws) and returns
     * what $callback returned. Without a callback it returns true and keeps
     * the slot until its lease ends (as Laravel's; `->reply->token` names it).
     *
     * @param int $timeout seconds, sent as `BLOCK` in ms: keep it below the connection's read timeout
     * @param callable|null $callback
     * @param int $sleep Laravel's polling interval in ms; accepted and ignored, since BLOCK does not poll
     * @return mixed
     *
     * @throws ThrottleTimeoutException a LimiterTimeoutException, when no slot freed in time
     * @throws \Throwable what $callback throws, after the release
     */
    public function block($timeout, $callback = null, $sleep = 250)
    {
        $token = $this->take(null, max(0, (int) $timeout) * 1000);
        if ($token === false) {
            throw ThrottleTimeoutException::forLease($this->reply);
        }
        if (!is_callable($callback)) {
            return true;
        }
        [$outer, $this->holding] = [$this->holding, $token];
        try {
            return $callback();
        } finally {
            $this->holding = $outer; // a block() nested in the callback on the same limiter
            $released = $this->release($this->name, $token);
            $this->released = $released === null ? null : (bool) $released;
        }
    }

    /**
     * From inside block()'s callback: the lease it holds now ends
     * $releaseAfter (seconds or a DateInterval; default the constructor's)
     * from now, a heartbeat for work that may outlast it (the module's
     * `THROTTLE.RENEW`). True when the lease was still held; false when it
     * had ended, and the slot may be someone else's: stop, or acquire again.
     *
     * @param int|DateInterval|null $releaseAfter
     *
     * @throws \LogicException outside a callback of block()
     */
    public function renew($releaseAfter = null): bool
    {
        if ($this->holding === null) {
            throw new \LogicException("ConcurrencyLimiter('{$this->name}')->renew() renews the lease of block()'s callback while it runs");
        }
        $ms = $releaseAfter === null ? $this->leaseMs : Penalties::lengthMs($releaseAfter, "ConcurrencyLimiter('{$this->name}')->renew()");
        return $this->limiter->renew($this->name, $this->holding, $ms);
    }

    /**
     * One try, without waiting: the lease's token when a slot was free,
     * else false. $id names the lease (`ID`); one that already holds a
     * lease renews it. block() does not go through this method: it waits
     * in one call.
     *
     * @param string|null $id
     * @return string|false
     */
    protected function acquire($id)
    {
        return $this->take($id === null ? null : (string) $id, 0);
    }

    /**
     * Releases the lease named $id on the limiter's key (`$key`, the name
     * block() passes). True when it was still held; false when it had ended
     * (or was released): then nothing changes, and no other holder's slot
     * is freed.
     *
     * @param string $key the limiter's name
     * @param string $id the lease's token
     * @return bool
     */
    protected function release($key, $id)
    {
        return $this->limiter->release((string) $key, (string) $id);
    }

    /** @return string|false the token when admitted */
    private function take(?string $id, int $blockMs)
    {
        $this->reply = $this->limiter->acquire($this->name, $this->maxLocks, $this->leaseMs, $id, $blockMs);
        return $this->reply->allowed && $this->reply->token !== null ? $this->reply->token : false;
    }
}
