<?php

declare(strict_types=1);

require __DIR__ . '/Support/autoload.php';

// Before any test runs Laravel's DurationLimiter: see the file.
require __DIR__ . '/Support/laravel_limiter_clock.php';

// The suites from laravel/framework (tests/Framework): their base class, a
// clock for their sleep() and usleep(), and a server of their own named by REDIS_HOST
// and REDIS_PORT. See tests/Support/Framework.
class_alias(RedisThrottle\Laravel\Tests\Support\Framework\TestCase::class, 'Orchestra\Testbench\TestCase');
require __DIR__ . '/Support/Framework/framework_clock.php';
RedisThrottle\Laravel\Tests\Support\Framework\SharedServer::start();

// The one-node cluster of ClusterTest reports ok only 2 s after it starts:
// start it now, while the tests before it run.
RedisThrottle\Laravel\Tests\Support\RedisServer::startCluster();
