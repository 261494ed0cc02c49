<?php

// The suite runs on the Laravel the machine has: a Composer install of this
// package (vendor/autoload.php, any Laravel the constraints allow) or, without
// one, Debian's packages php-laravel-framework and php-nrk-predis on PHP's
// include path.

declare(strict_types=1);

if (is_file(__DIR__ . '/../vendor/autoload.php')) {
    require __DIR__ . '/../vendor/autoload.php';
} else {
    require 'Illuminate/autoload.php';
    require 'Predis/autoload.php';
    spl_autoload_register(function (string $class): void {
        foreach (['RedisThrottle\\Laravel\\Tests\\' => __DIR__ . '/', 'RedisThrottle\\Laravel\\' => __DIR__ . '/../src/'] as $namespace => $dir) {
            if (str_starts_with($class, $namespace)) {
                $file = $dir . str_replace('\\', '/', substr($class, strlen($namespace))) . '.php';
                if (is_file($file)) {
                    require $file;
                }
                return;
            }
        }
    });
}

// Before any test runs Laravel's DurationLimiter: see the file.
require __DIR__ . '/Support/laravel_limiter_clock.php';

// The suites from laravel/framework (tests/Framework): their base class, a
// clock for their sleep(), and a server of their own named by REDIS_HOST
// and REDIS_PORT. See tests/Support/Framework.
class_alias(RedisThrottle\Laravel\Tests\Support\Framework\TestCase::class, 'Orchestra\Testbench\TestCase');
require __DIR__ . '/Support/Framework/framework_clock.php';
RedisThrottle\Laravel\Tests\Support\Framework\SharedServer::start();

// The one-node cluster of ClusterTest reports ok only 2 s after it starts:
// start it now, while the tests before it run.
RedisThrottle\Laravel\Tests\Support\RedisServer::startCluster();
