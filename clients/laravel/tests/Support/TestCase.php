<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support;

use Illuminate\Cache\CacheServiceProvider;
use Illuminate\Config\Repository;
use Illuminate\Contracts\Debug\ExceptionHandler;
use Illuminate\Foundation\Application;
use Illuminate\Foundation\Exceptions\Handler;
use Illuminate\Http\Request;
use Illuminate\Redis\RedisServiceProvider;
use Illuminate\Support\Carbon;
use Illuminate\Support\Facades\Facade;
use Monolog\Handler\NullHandler;
use RedisThrottle\Laravel\ThrottleServiceProvider;
use Symfony\Component\HttpFoundation\Response;
use Throwable;

/**
 * Each test gets its own redis-server with the module, and builds a Laravel
 * application on it: the Redis manager (phpredis or Predis), the cache's
 * RateLimiter (for named limiters), the package's provider, the router and
 * Laravel's own exception handler, which renders what the middleware throws.
 */
abstract class TestCase extends \PHPUnit\Framework\TestCase
{
    /** A Unix time in whole seconds that tests start their clocks at. */
    protected const T0 = 1_700_000_000;

    protected RedisServer $server;
    protected Application $app;

    /** The last exception Laravel's handler rendered for a request. */
    protected ?Throwable $rendered = null;

    protected function setUp(): void
    {
        $this->server = $this->startServer();
    }

    protected function startServer(): RedisServer
    {
        return new RedisServer();
    }

    protected function tearDown(): void
    {
        Carbon::setTestNow();
        Facade::clearResolvedInstances();
        $this->stopServer();
    }

    protected function stopServer(): void
    {
        $this->server->stop();
    }

    /** phpredis and Predis, for tests that run on both. */
    public static function clients(): array
    {
        return ['phpredis' => ['phpredis'], 'predis' => ['predis']];
    }

    /**
     * @param array<string, mixed> $throttle the `throttle-native` settings over the package's defaults
     * @param array<string, mixed> $redis   `database.redis` settings over a default connection to this test's server
     */
    protected function app(string $client = 'phpredis', array $throttle = [], array $redis = []): Application
    {
        $app = new Application(sys_get_temp_dir());
        $app->instance('config', new Repository([
            'app' => ['debug' => false],
            'cache' => ['default' => 'array', 'stores' => ['array' => ['driver' => 'array']]],
            'database' => ['redis' => array_replace_recursive([
                'client' => $client,
                'options' => [],
                'default' => ['host' => '127.0.0.1', 'port' => $this->server->port, 'database' => 0, 'read_timeout' => 30],
            ], $redis)],
            'throttle-native' => $throttle,
            // Laravel's handler reports the 500s of the bad-input tests: to nowhere.
            'logging' => ['default' => 'null', 'channels' => ['null' => ['driver' => 'monolog', 'handler' => NullHandler::class]]],
        ]));
        $app->register(RedisServiceProvider::class);
        $app->register(CacheServiceProvider::class);
        $app->register(ThrottleServiceProvider::class);
        $app->singleton(ExceptionHandler::class, function ($app) {
            $handler = new Handler($app);
            $handler->renderable(function (Throwable $e) {
                $this->rendered = $e;
                return null; // and let Laravel render it
            });
            return $handler;
        });
        $app->boot();
        Facade::clearResolvedInstances();
        Facade::setFacadeApplication($app);
        return $this->app = $app;
    }

    /** A JSON GET through the router, as from $ip, signed in as $user when given. */
    protected function get(string $uri, string $ip = '127.0.0.1', $user = null): Response
    {
        $request = Request::create($uri, 'GET', [], [], [], ['REMOTE_ADDR' => $ip, 'HTTP_ACCEPT' => 'application/json']);
        if ($user !== null) {
            $request->setUserResolver(fn () => $user);
        }
        $this->rendered = null;
        return $this->app['router']->dispatch($request);
    }

    /** Sets Carbon's test now (and so the module's AT) to T0 + $seconds. */
    protected function setClock(float $seconds): void
    {
        $micros = self::T0 * 1_000_000 + (int) round($seconds * 1_000_000);
        Carbon::setTestNow(Carbon::createFromFormat('U.u', sprintf('%d.%06d', intdiv($micros, 1_000_000), $micros % 1_000_000)));
    }

    /** The X-RateLimit-*, Retry-After and RateLimit* headers of a response, by name. */
    protected static function limitHeaders(Response $response): array
    {
        $headers = [];
        foreach (['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'Retry-After', 'X-RateLimit-Reset', 'RateLimit-Policy', 'RateLimit'] as $name) {
            if ($response->headers->has($name)) {
                $headers[$name] = $response->headers->get($name);
            }
        }
        return $headers;
    }
}
