<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Contracts\Http\Kernel as HttpKernelContract;
use Illuminate\Foundation\Application;
use Illuminate\Http\Request;
use Illuminate\Routing\Middleware\ThrottleRequests as LaravelThrottleRequests;
use RedisThrottle\Laravel\Tests\Support\App\HttpKernel;
use RedisThrottle\Laravel\Tests\Support\App\NativeAliasHttpKernel;
use RedisThrottle\Laravel\Tests\Support\App\StockHttpKernel;
use RedisThrottle\Laravel\Tests\Support\LaravelApp;
use RedisThrottle\Laravel\Tests\Support\TestCase;
use RedisThrottle\Laravel\ThrottleRequests;
use RedisThrottle\Laravel\ThrottleServiceProvider;
use Symfony\Component\HttpFoundation\Response;

/**
 * laravel/laravel 8.x's own layout (tests/Support/App): `throttle:api` in
 * the `api` group, the route behind `auth:api`, and the `api` limiter keyed
 * by the user's id, else the IP, at 2 a minute. Laravel sorts the route's
 * middleware by the kernel's `$middlewarePriority`, so its throttle runs
 * after `auth` and sees the user. The package's middleware must too, however
 * the application is booted. Each request gets a fresh application, as each
 * request in production does.
 */
final class MiddlewarePriorityTest extends TestCase
{
    public static function kernels(): array
    {
        $boots = [
            // public/index.php: the kernel is made, then its first handle()
            // registers and boots the providers
            'kernel before providers' => 'index.php',
            // laravel/laravel's tests: createApplication() bootstraps the
            // app, and the HTTP kernel is made at the first request
            'kernel at first request' => 'tests',
        ];
        $kernels = [
            "Laravel's throttle" => StockHttpKernel::class,
            "the package's, as throttle" => HttpKernel::class,
            "the package's, as throttle.native" => NativeAliasHttpKernel::class,
        ];
        $cases = [];
        foreach ($boots as $bootName => $boot) {
            foreach ($kernels as $kernelName => $kernel) {
                $cases["$kernelName, $bootName"] = [$boot, $kernel];
            }
        }
        return $cases;
    }

    /** @dataProvider kernels */
    public function testPerUserLimitsCountPerUserFromOneIp(string $boot, string $kernel): void
    {
        $this->setClock(0);
        $seen = [];
        foreach (['alice', 'alice', 'bob', 'alice'] as $user) {
            $response = $this->request($boot, $kernel, $user);
            $seen[] = [$response->getStatusCode(), $response->getStatusCode() === 200 ? $response->getContent() : ''];
        }
        $this->assertSame([[200, 'alice'], [200, 'alice'], [200, 'bob'], [429, '']], $seen);

        if ($kernel !== StockHttpKernel::class) {
            // Keys for each user, none for the IP.
            $keys = $this->server->client()->keys('throttle:*');
            sort($keys);
            $expected = ['throttle:{api}:' . md5('apialice'), 'throttle:{api}:' . md5('apibob')];
            sort($expected);
            $this->assertSame($expected, $keys);
        }
    }

    /**
     * The package's place in the kernel's list outlives the kernel copying
     * its list to the router again (prependToMiddlewarePriority does).
     *
     * @dataProvider kernels
     */
    public function testThePlaceIsRightAfterLaravelsThrottle(string $boot, string $kernel): void
    {
        $app = $this->boot($boot, $kernel);
        $kernel = $app->make(HttpKernelContract::class);
        $kernel->bootstrap();
        $priority = $kernel->getMiddlewarePriority();
        $at = array_search(LaravelThrottleRequests::class, $priority, true);
        $this->assertSame(ThrottleRequests::class, $priority[$at + 1]);
        $this->assertSame(1, count(array_keys($priority, ThrottleRequests::class, true)));

        $kernel->prependToMiddlewarePriority('Some\\Middleware');
        $this->assertSame($kernel->getMiddlewarePriority(), $app['router']->middlewarePriority);
        $this->assertContains(ThrottleRequests::class, $app['router']->middlewarePriority);
    }

    /** Once, right after Laravel's throttle; a list without it is left as Laravel would leave it. */
    public function testPlaceInPriority(): void
    {
        $auth = \Illuminate\Contracts\Auth\Middleware\AuthenticatesRequests::class;
        $this->assertSame(
            [$auth, LaravelThrottleRequests::class, ThrottleRequests::class, 'B'],
            ThrottleServiceProvider::placeInPriority([$auth, LaravelThrottleRequests::class, 'B']),
        );
        $placed = [$auth, LaravelThrottleRequests::class, ThrottleRequests::class];
        $this->assertSame($placed, ThrottleServiceProvider::placeInPriority($placed));
        $this->assertSame([$auth, 'B'], ThrottleServiceProvider::placeInPriority([$auth, 'B']));
        $this->assertSame([], ThrottleServiceProvider::placeInPriority([]));
    }

    private function boot(string $boot, string $kernel): Application
    {
        $app = LaravelApp::make($this->server->port, $kernel);
        if ($boot === 'index.php') {
            $app->make(HttpKernelContract::class);
        } else {
            $app->bootstrapWith(HttpKernel::BOOTSTRAPPERS);
        }
        return $app;
    }

    private function request(string $boot, string $kernel, string $user): Response
    {
        $app = $this->boot($boot, $kernel);
        $request = Request::create('/api/user', 'GET', [], [], [], [
            'REMOTE_ADDR' => '10.0.0.1',
            'HTTP_ACCEPT' => 'application/json',
            'HTTP_AUTHORIZATION' => "Bearer $user",
        ]);
        $kernel = $app->make(HttpKernelContract::class);
        $response = $kernel->handle($request);
        $kernel->terminate($request, $response);
        return $response;
    }
}
