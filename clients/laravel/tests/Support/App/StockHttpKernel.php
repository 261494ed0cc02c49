<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\App;

/** The same kernel with Laravel's own `throttle`, as laravel/laravel ships it. */
class StockHttpKernel extends HttpKernel
{
    protected $routeMiddleware = [
        'auth' => \Illuminate\Auth\Middleware\Authenticate::class,
        'throttle' => \Illuminate\Routing\Middleware\ThrottleRequests::class,
    ];
}
