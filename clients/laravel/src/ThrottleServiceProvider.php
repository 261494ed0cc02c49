<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Redis\Connections\Connection;
use Illuminate\Support\ServiceProvider;

/**
 * Registers the `throttle.native` route middleware, the `throttle-native`
 * config, and `throttleNative($name)` on Laravel's Redis connections
 * (`Redis::throttleNative('key')`, `Redis::connection('x')->throttleNative('key')`).
 * Found by Laravel's package discovery.
 */
class ThrottleServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->mergeConfigFrom(__DIR__ . '/../config/throttle-native.php', 'throttle-native');
    }

    public function boot(): void
    {
        $this->publishes([
            __DIR__ . '/../config/throttle-native.php' => $this->app->configPath('throttle-native.php'),
        ], 'throttle-native-config');

        $this->app['router']->aliasMiddleware('throttle.native', ThrottleRequests::class);

        $config = $this->app['config'];
        $macro = function (string $name) use ($config): ThrottleBuilder {
            /** @var Connection $this */
            return new ThrottleBuilder(
                $this,
                $name,
                (string) $config->get('throttle-native.algorithm', 'fixed'),
                (string) $config->get('throttle-native.prefix', ''),
            );
        };
        Connection::macro('throttleNative', $macro);
        // PhpRedisConnection lower-cases a method's name before it looks for a macro.
        Connection::macro('throttlenative', $macro);
    }
}
