<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Contracts\Redis\LimiterTimeoutException;

/**
 * A refused `throttleNative()` call: a LimiterTimeoutException, as Laravel's
 * `Redis::throttle()` throws, that also carries the module's reply (with
 * penalties: the key's hits and what is left of its ban).
 */
class ThrottleTimeoutException extends LimiterTimeoutException
{
    public function __construct(public Reply $reply)
    {
        parent::__construct(match (true) {
            $reply->retryAfterMs < 0 => 'rate limit: the call costs more than the limit admits at once',
            $reply->banned() => "rate limit: the key is banned for another {$reply->bannedMs} ms",
            default => "rate limit reached; retry in {$reply->retryAfterMs} ms",
        });
    }
}
