<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\Framework;

use Illuminate\Support\Carbon;
use PHPUnit\Runner\AfterTestHook;

/**
 * Clears Carbon's test now after every test (phpunit.xml): laravel/framework's
 * DurationLimiterTest moves it through sleep() (framework_clock.php) and has
 * no tearDown that clears it.
 */
final class ResetsClock implements AfterTestHook
{
    public function executeAfterTest(string $test, float $time): void
    {
        Carbon::setTestNow();
    }
}
