<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\App;

/** The kernel with Laravel's `throttle` left alone and the package's `throttle.native:api` in the `api` group. */
class NativeAliasHttpKernel extends StockHttpKernel
{
    protected $middlewareGroups = [
        'api' => [
            'throttle.native:api',
            \Illuminate\Routing\Middleware\SubstituteBindings::class,
        ],
    ];
}
