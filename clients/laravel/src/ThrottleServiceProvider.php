<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Contracts\Http\Kernel as HttpKernelContract;
use Illuminate\Foundation\Http\Kernel as HttpKernel;
use Illuminate\Redis\Connections\Connection;
use Illuminate\Support\ServiceProvider;

/**
 * Registers the `throttle.native` route middleware, the `throttle-native`
 * config, and `throttleNative($name)` and `funnelNative($name)` on Laravel's
 * Redis connections (`Redis::throttleNative('key')`,
 * `Redis::connection('x')->funnelNative('key')`).
 * Found by Laravel's package discovery.
 *
 * It also gives the middleware its parent's place in the HTTP kernel's
 * `$middlewarePriority`, so that Laravel runs it after `auth` as it runs its
 * own throttle: see placeInPriority().
 */
class ThrottleServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->mergeConfigFrom(__DIR__ . '/../config/throttle-native.php', 'throttle-native');

        // The HTTP kernel copies its priority list to the router when it is
        // made: before the providers boot (public/index.php) or at the first
        // request (laravel/laravel's tests), so both cases are handled.
        $this->app->afterResolving(HttpKernelContract::class, function ($kernel): void {
            self::placeInKernel($kernel);
        });
        if ($this->app->resolved(HttpKernelContract::class)) {
            self::placeInKernel($this->app->make(HttpKernelContract::class));
        }
    }

    public function boot(): void
    {
        $this->publishes([
            __DIR__ . '/../config/throttle-native.php' => $this->app->configPath('throttle-native.php'),
        ], 'throttle-native-config');

        $router = $this->app['router'];
        $router->aliasMiddleware('throttle.native', ThrottleRequests::class);
        // An application that sets the router's list without a kernel.
        $router->middlewarePriority = self::placeInPriority($router->middlewarePriority);

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
        $funnel = function (string $name) use ($config): FunnelBuilder {
            /** @var Connection $this */
            return new FunnelBuilder($this, $name, (string) $config->get('throttle-native.prefix', ''));
        };
        // PhpRedisConnection lower-cases a method's name before it looks for a macro.
        foreach (['throttleNative' => $macro, 'throttlenative' => $macro, 'funnelNative' => $funnel, 'funnelnative' => $funnel] as $name => $builder) {
            Connection::macro($name, $builder);
        }
    }

    /**
     * The priority list with the middleware right after the nearest of its
     * parents that the list names (Laravel's ThrottleRequests in the default
     * list); unchanged when it is already there or no parent is.
     *
     * Laravel sorts route middleware by this list, but before 10.10 (except
     * 8.72) it matches a class by its own name and interfaces only, never its
     * parents: without this the middleware keeps its place in the route's
     * list, so `throttle:api` in the `api` group runs before the route's
     * `auth:...`, `$request->user()` is still null, and per-user limits
     * become per-IP limits. From 10.10 Laravel finds the parent itself, with
     * the same result.
     *
     * @param array<int, string> $priority
     * @return array<int, string>
     */
    public static function placeInPriority(array $priority): array
    {
        if (in_array(ThrottleRequests::class, $priority, true)) {
            return $priority;
        }
        foreach (class_parents(ThrottleRequests::class) as $parent) {
            $at = array_search($parent, $priority, true);
            if ($at !== false) {
                array_splice($priority, (int) $at + 1, 0, [ThrottleRequests::class]);
                return $priority;
            }
        }
        return $priority;
    }

    /**
     * Places the middleware in the kernel's own list, which the kernel copies
     * to the router again whenever it changes (prependToMiddlewarePriority,
     * ...), and in the router's copy. Laravel 8 and 9 have no public setter
     * for the kernel's list, hence the bound closure. The kernel's groups and
     * aliases are left alone: re-syncing them would drop what other
     * providers added to the router's groups.
     */
    private static function placeInKernel(object $kernel): void
    {
        if (!$kernel instanceof HttpKernel) {
            return;
        }
        \Closure::bind(function (): void {
            /** @var HttpKernel $this */
            $this->middlewarePriority = ThrottleServiceProvider::placeInPriority($this->middlewarePriority);
            $this->router->middlewarePriority = ThrottleServiceProvider::placeInPriority($this->router->middlewarePriority);
        }, $kernel, HttpKernel::class)();
    }
}
