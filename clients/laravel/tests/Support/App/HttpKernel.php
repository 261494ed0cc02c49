<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\App;

use Illuminate\Foundation\Http\Kernel;

/**
 * laravel/laravel 8.x's App\Http\Kernel (tag v8.6.12) as far as the test
 * app needs it: the `api` group (`throttle:api`, SubstituteBindings), the
 * `auth` and `throttle` route middleware, and Laravel's own
 * `$middlewarePriority` (inherited, untouched). `throttle` is the package's
 * middleware, as its README tells users to set it; StockHttpKernel keeps
 * Laravel's.
 *
 * The bootstrappers are Laravel's, less the ones that read files and
 * environment (.env, config/*.php) and install PHP error handlers: the test
 * gives the config as an instance. Providers are registered from
 * `app.providers` and Composer's installed.json (package discovery), then
 * booted, at the first handle() unless the app was bootstrapped before.
 */
class HttpKernel extends Kernel
{
    /** What the kernel runs before its first request; what a test's createApplication() runs before. */
    public const BOOTSTRAPPERS = [
        \Illuminate\Foundation\Bootstrap\RegisterFacades::class,
        \Illuminate\Foundation\Bootstrap\RegisterProviders::class,
        \Illuminate\Foundation\Bootstrap\BootProviders::class,
    ];

    protected $bootstrappers = self::BOOTSTRAPPERS;

    protected $middleware = [];

    protected $middlewareGroups = [
        'api' => [
            'throttle:api',
            \Illuminate\Routing\Middleware\SubstituteBindings::class,
        ],
    ];

    protected $routeMiddleware = [
        'auth' => \Illuminate\Auth\Middleware\Authenticate::class,
        'throttle' => \RedisThrottle\Laravel\ThrottleRequests::class,
    ];
}
