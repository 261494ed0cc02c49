<?php

/*
 * laravel/framework's DurationLimiterTest waits for its limiter's window to
 * end with sleep(2). Unqualified, that call resolves to this function first
 * (PHP looks in the caller's namespace before the global one), which moves
 * the package's clock instead: Carbon's test now, which the package sends as
 * AT. The test's code is unchanged; the 2 s pass for the limiter at once.
 * ResetsClock clears the test now after each test.
 */

declare(strict_types=1);

namespace Illuminate\Tests\Redis;

use Illuminate\Support\Carbon;

function sleep(int $seconds): int
{
    Carbon::setTestNow(Carbon::now()->addSeconds($seconds));
    return 0;
}
