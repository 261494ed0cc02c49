<?php

/*
 * Laravel's own Redis limiter (DurationLimiter, used by Redis::throttle() and
 * the ThrottleRequestsWithRedis middleware) reads PHP's clock, time() and
 * microtime(true), where the rest of Laravel reads Carbon. To run it side by
 * side with the module on the same instants, these two functions stand in
 * for PHP's inside the limiter's namespace (PHP resolves an unqualified call
 * in a namespace there first; Symfony's ClockMock works the same way). They
 * answer Carbon's test "now" when one is set, and PHP's clock otherwise. The
 * limiter's code and its Lua script run unchanged, on the real Redis.
 */

declare(strict_types=1);

namespace Illuminate\Redis\Limiters;

use Illuminate\Support\Carbon;

function time(): int
{
    return Carbon::hasTestNow() ? Carbon::now()->getTimestamp() : \time();
}

function microtime(bool $asFloat = false): string|float
{
    if (!Carbon::hasTestNow()) {
        return \microtime($asFloat);
    }
    $now = Carbon::now();
    return $asFloat ? (float) $now->format('U.u') : $now->format('0.u00 U');
}
