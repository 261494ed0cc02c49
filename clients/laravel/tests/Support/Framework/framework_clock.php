<?php

/*
 * laravel/framework's DurationLimiterTest waits for its limiter's window to
 * end with sleep(2), and its ConcurrentLimiterTest for a lease to end with
 * usleep(1.2 * 1000000). Unqualified, those calls resolve to these
 * functions first (PHP looks in the caller's namespace before the global
 * one), which move the package's clock instead: Carbon's test now, which
 * the package sends as AT. The tests' code is unchanged; the time passes
 * for the limiter at once. ResetsClock clears the test now after each test.
 */

declare(strict_types=1);

namespace Illuminate\Tests\Redis;

use Illuminate\Support\Carbon;

function sleep(int $seconds): int
{
    Carbon::setTestNow(Carbon::now()->addSeconds($seconds));
    return 0;
}

function usleep(int $microseconds): void
{
    Carbon::setTestNow(Carbon::now()->addMicroseconds($microseconds));
}
