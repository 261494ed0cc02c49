<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Contracts\Redis\LimiterTimeoutException;

/**
 * A refused `throttleNative()` call: a LimiterTimeoutException, as Laravel's
 * `Redis::throttle()` throws, that also carries the module's reply.
 */
class ThrottleTimeoutException extends LimiterTimeoutException
{
    public function __construct(public Reply $reply)
    {
        parent::__construct(
            $reply->retryAfterMs < 0
                ? 'rate limit: the call costs more than the limit admits at once'
                : "rate limit reached; retry in {$reply->retryAfterMs} ms"
        );
    }
}
