<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Redis\Connections\Connection;
use Illuminate\Support\Carbon;

/**
 * Laravel's `Illuminate\Redis\Limiters\DurationLimiter` (what
 * `Redis::throttle()` and ThrottleRequestsWithRedis use) on one THROTTLE
 * command instead of its Lua script: the same constructor, `block()`,
 * `acquire()`, `tooManyAttempts()`, `clear()`, `decaysAt` and `remaining`.
 *
 *     (new DurationLimiter(Redis::connection(), 'mail', 20, 1))->block(5, fn () => $this->send());
 *
 * `block($timeout)` waits on the server (the module's `BLOCK`), in one call,
 * and is woken the moment it is admitted; Laravel polls every 750 ms. A
 * refusal throws ThrottleTimeoutException, a LimiterTimeoutException that
 * carries the reply. Added, after Laravel's arguments: the algorithm, the
 * units a call takes, a prefix for the key (the connection's own prefix
 * applies as for any command), and the penalties each call carries (a ban
 * when it is refused, ...; its reply then has DETAIL's fields). A
 * `block()` on a banned key waits for the ban to end, or its own time-out.
 */
class DurationLimiter
{
    /** Unix time in whole seconds, rounded up, when the key is idle again (FIXED: its window ends). */
    public $decaysAt;

    /** Units still admissible after the last call. */
    public $remaining;

    /** The last call's reply. */
    public ?Reply $reply = null;

    private Limiter $limiter;

    /**
     * @param Connection $redis
     * @param string $name the key, as Laravel's
     * @param int $maxLocks calls (units) admitted per window
     * @param int $decay the window in seconds
     */
    public function __construct(
        private $redis,
        private $name,
        private $maxLocks,
        private $decay,
        private string $algorithm = 'fixed',
        private int $cost = 1,
        private string $keyPrefix = '',
        private ?Penalties $penalties = null,
    ) {
        Limiter::checkAlgorithm($algorithm, 'DurationLimiter algorithm');
        $this->limiter = new Limiter($redis, $keyPrefix);
    }

    /**
     * Waits up to $timeout seconds (0: tries once) for the call to be
     * admitted, then returns $callback() (or true).
     *
     * @param int $timeout
     * @param callable|null $callback
     * @param int $sleep Laravel's polling interval in ms; accepted and ignored, since BLOCK does not poll
     * @return mixed
     *
     * @throws ThrottleTimeoutException a LimiterTimeoutException
     */
    public function block($timeout, $callback = null, $sleep = 750)
    {
        if (!$this->call($this->cost, max(0, (int) $timeout) * 1000)) {
            throw new ThrottleTimeoutException($this->reply);
        }
        return is_callable($callback) ? $callback() : true;
    }

    /** One try: true when the call is admitted. */
    public function acquire()
    {
        return $this->call($this->cost, 0);
    }

    /** Whether no unit is left now; counts nothing (`COST 0`). */
    public function tooManyAttempts()
    {
        $this->call(0, 0);
        return $this->remaining <= 0;
    }

    /** Deletes the key. */
    public function clear()
    {
        $this->redis->del($this->keyPrefix . $this->name);
    }

    private function call(int $cost, int $blockMs): bool
    {
        $this->reply = $this->limiter->attempt(
            (string) $this->name, $this->algorithm, (int) $this->maxLocks, (int) $this->decay * 1000, $cost, $blockMs,
            $this->penalties,
        );
        $this->remaining = max(0, $this->reply->remaining);
        $this->decaysAt = intdiv((int) Carbon::now()->format('Uv') + $this->reply->resetAfterMs + 999, 1000);
        return $this->reply->allowed;
    }
}
