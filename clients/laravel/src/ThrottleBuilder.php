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
 * `using('sliding')` picks the algorithm, `cost($n)` the units a call takes.
 */
class ThrottleBuilder
{
    use InteractsWithTime;

    public ?int $maxLocks = null;
    public ?int $decay = null;
    /** Seconds to wait for a slot; 0 tries once. Laravel's default is 3. */
    public int $timeout = 3;
    public int $cost = 1;
    /** The last call's reply. */
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
     * Runs $callback when the call is admitted (within block() seconds) and
     * returns its result; else returns $failure($exception), or throws
     * ThrottleTimeoutException, a LimiterTimeoutException, when there is no
     * $failure. As in Laravel, a LimiterTimeoutException that $callback
     * throws goes to $failure too.
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
        );
        try {
            return $limiter->block($this->timeout, $callback);
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
