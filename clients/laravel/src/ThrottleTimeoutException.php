<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Contracts\Redis\LimiterTimeoutException;

/**
 * A refused `throttleNative()` or `funnelNative()` call: a
 * LimiterTimeoutException, as Laravel's `Redis::throttle()` and
 * `Redis::funnel()` throw, that also carries the module's reply (with
 * penalties: the key's hits and what is left of its ban; a funnel's: its
 * limit and when its first lease ends).
 */
class ThrottleTimeoutException extends LimiterTimeoutException
{
    public function __construct(public Reply $reply, ?string $message = null)
    {
        parent::__construct($message ?? match (true) {
            $reply->retryAfterMs < 0 => 'rate limit: the call costs more than the limit admits at once',
            $reply->banned() => "rate limit: the key is banned for another {$reply->bannedMs} ms",
            default => "rate limit reached; retry in {$reply->retryAfterMs} ms",
        });
    }

    /** A funnel's refusal: every slot is held (THROTTLE.ACQUIRE's refused reply). */
    public static function forLease(Reply $reply): self
    {
        return new self($reply, sprintf(
            'concurrency limit reached: all %d slots are held; one frees in %d ms unless released sooner',
            $reply->limit, $reply->retryAfterMs,
        ));
    }
}
