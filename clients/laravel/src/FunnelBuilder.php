<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use DateInterval;
use DateTimeInterface;
use Illuminate\Contracts\Redis\LimiterTimeoutException;
use Illuminate\Redis\Connections\Connection;
use Illuminate\Support\InteractsWithTime;
use InvalidArgumentException;

/**
 * `Redis::funnelNative('key')`: the API of Laravel's `Redis::funnel()`
 * (ConcurrencyLimiterBuilder) on the module's leases:
 *
 *     Redis::funnelNative('vendor-api')->limit(3)->releaseAfter(60)->block(10)
 *         ->then(fn () => $this->callVendor(), fn ($e) => $this->release(10));
 *
 * At most `limit()` callbacks of one key run at once. `block($seconds)` is
 * one `THROTTLE.ACQUIRE ... BLOCK` call: a caller that finds every slot
 * held waits on the server, in arrival order, and is let in the moment a
 * slot frees; no polling. After the callback, returned or thrown, its lease
 * is released with its own token; a worker that dies loses its slot when
 * the lease ends (`releaseAfter()`), and a long callback keeps it with
 * `renew()`.
 */
class FunnelBuilder
{
    use InteractsWithTime;

    /** The most callbacks that run at once (limit()). */
    public ?int $maxLocks = null;
    /** Seconds a slot is held unless released first (releaseAfter()); Laravel's default is 60. */
    public int $releaseAfter = 60;
    /** Seconds to wait for a slot; 0 tries once. Laravel's default is 3. */
    public int $timeout = 3;
    /** Laravel's polling interval in ms (sleep()); kept for its API, never used. */
    public int $sleep = 250;
    /** The last acquisition's reply, set before the callback runs; admitted, `->token` names the lease. */
    public ?Reply $reply = null;
    /**
     * After then() ran its callback: true when the lease was still held at
     * the release, false when it had ended first (the callback outlived
     * releaseAfter(), and the slot may have gone to another caller).
     */
    public ?bool $released = null;

    /** releaseAfter() as given when it was a DateInterval, kept to the ms. */
    private ?DateInterval $releaseAfterInterval = null;

    /** The limiter whose block() runs then()'s callback, while it runs. */
    private ?ConcurrencyLimiter $running = null;

    public function __construct(
        public Connection $connection,
        public string $name,
        private string $keyPrefix = '',
    ) {
    }

    /** The most callbacks of this key that run at once, 1 to 100000. */
    public function limit(int $maxLocks): static
    {
        if ($maxLocks < 1 || $maxLocks > ConcurrencyLimiter::MAX_LOCKS) {
            throw new InvalidArgumentException(sprintf(
                "funnelNative('%s')->limit(): maxLocks must be from 1 to %d; got %d", $this->name, ConcurrencyLimiter::MAX_LOCKS, $maxLocks,
            ));
        }
        $this->maxLocks = $maxLocks;
        return $this;
    }

    /**
     * How long a slot is held unless released first: seconds (1 to
     * 315360000, 3650 days), a DateInterval (to the ms), or a
     * DateTimeInterface (until then), as Laravel's. A worker that dies
     * frees its slot when this ends.
     *
     * @param int|DateInterval|DateTimeInterface $releaseAfter
     */
    public function releaseAfter($releaseAfter): static
    {
        $who = "funnelNative('{$this->name}')->releaseAfter()";
        if ($releaseAfter instanceof DateTimeInterface) {
            $releaseAfter = $this->secondsUntil($releaseAfter);
        }
        $ms = Penalties::lengthMs($releaseAfter, $who);
        $this->releaseAfterInterval = $releaseAfter instanceof DateInterval ? $releaseAfter : null;
        $this->releaseAfter = intdiv($ms + 999, 1000);
        return $this;
    }

    /**
     * Seconds to wait for a slot before giving up; 0 tries once. Sent as
     * `BLOCK` in milliseconds: keep it below the connection's read timeout.
     */
    public function block(int $timeout): static
    {
        if ($timeout < 0) {
            throw new InvalidArgumentException("funnelNative('{$this->name}')->block(): timeout must be 0 or more seconds; got $timeout");
        }
        $this->timeout = $timeout;
        return $this;
    }

    /** Laravel's polling interval (9.x and later); accepted and ignored, since BLOCK does not poll. */
    public function sleep(int $sleep): static
    {
        $this->sleep = $sleep;
        return $this;
    }

    /**
     * From inside then()'s callback: its lease now ends $releaseAfter
     * (seconds or a DateInterval; default releaseAfter()'s) from now, a
     * heartbeat for a job that may outlast its lease. True when the lease
     * was still held; false when it had ended and the slot may be someone
     * else's.
     *
     * @param int|DateInterval|null $releaseAfter
     *
     * @throws \LogicException outside then()'s callback
     */
    public function renew($releaseAfter = null): bool
    {
        if ($this->running === null) {
            throw new \LogicException("funnelNative('{$this->name}')->renew() renews the lease of then()'s callback while it runs");
        }
        if ($releaseAfter !== null) {
            Penalties::lengthMs($releaseAfter, "funnelNative('{$this->name}')->renew()");
        }
        return $this->running->renew($releaseAfter);
    }

    /**
     * Runs $callback once a slot is held (within block() seconds), releases
     * the slot after it (also when it throws) and returns its result; else
     * returns $failure($exception), or throws ThrottleTimeoutException, a
     * LimiterTimeoutException, when there is no $failure. As in Laravel, a
     * LimiterTimeoutException that $callback throws goes to $failure too.
     *
     * @throws \Illuminate\Contracts\Redis\LimiterTimeoutException
     */
    public function then(callable $callback, ?callable $failure = null): mixed
    {
        if ($this->maxLocks === null) {
            throw new InvalidArgumentException("funnelNative('{$this->name}'): call limit() before then()");
        }
        $limiter = new ConcurrencyLimiter(
            $this->connection, $this->name, $this->maxLocks, $this->releaseAfterInterval ?? $this->releaseAfter, $this->keyPrefix,
        );
        $this->released = null;
        try {
            return $limiter->block($this->timeout, function () use ($limiter, $callback) {
                $this->reply = $limiter->reply;
                $this->running = $limiter;
                try {
                    return $callback();
                } finally {
                    $this->running = null;
                }
            });
        } catch (LimiterTimeoutException $e) {
            if ($failure !== null) {
                return $failure($e);
            }
            throw $e;
        } finally {
            $this->reply = $limiter->reply;
            $this->released = $limiter->released;
        }
    }
}
