<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\Framework;

use RedisThrottle\Laravel\Tests\Support\RedisServer;

/**
 * One server with the module for the suites taken from laravel/framework
 * (tests/Framework), which find Redis through REDIS_HOST and REDIS_PORT
 * (Laravel's InteractsWithRedis) and flush it around each test. Started by
 * tests/bootstrap.php, which points those two variables at it, so that
 * these suites never reach another Redis (their tearDown flushes database
 * 5). Stopped when PHP exits.
 */
final class SharedServer
{
    private static ?RedisServer $server = null;

    public static function start(): RedisServer
    {
        if (self::$server === null) {
            self::$server = new RedisServer();
            foreach (['REDIS_HOST' => '127.0.0.1', 'REDIS_PORT' => (string) self::$server->port] as $name => $value) {
                putenv("$name=$value");
                $_ENV[$name] = $_SERVER[$name] = $value;
            }
            register_shutdown_function(static fn () => self::$server?->stop());
        }
        return self::$server;
    }
}
