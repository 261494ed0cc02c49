<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support;

use Illuminate\Config\Repository;
use Illuminate\Contracts\Debug\ExceptionHandler;
use Illuminate\Contracts\Http\Kernel as HttpKernelContract;
use Illuminate\Foundation\Application;
use Illuminate\Foundation\Exceptions\Handler;
use Monolog\Handler\NullHandler;
use RedisThrottle\Laravel\Tests\Support\App\HttpKernel;
use RuntimeException;

/**
 * A Laravel application as bootstrap/app.php makes one: the HTTP kernel and
 * Laravel's exception handler bound as singletons, the config given as an
 * instance (what config/*.php would hold), on a base path with what Laravel's
 * bootstrappers read there: bootstrap/cache for their manifests and
 * vendor/composer/installed.json naming this package with the `extra` of its
 * composer.json, so that Laravel's package discovery registers its provider
 * as it does in an application.
 */
final class LaravelApp
{
    private static ?string $basePath = null;

    /**
     * @param array<string, mixed> $config settings over the defaults below, merged recursively
     */
    public static function make(int $redisPort, string $kernel = HttpKernel::class, array $config = []): Application
    {
        $app = new Application(self::basePath());
        $app->instance('config', new Repository(array_replace_recursive([
            'app' => [
                'name' => 'throttle-test',
                'env' => 'testing',
                'debug' => false,
                'providers' => [
                    \Illuminate\Auth\AuthServiceProvider::class,
                    \Illuminate\Cache\CacheServiceProvider::class,
                    \Illuminate\Filesystem\FilesystemServiceProvider::class,
                    \Illuminate\Redis\RedisServiceProvider::class,
                    App\AuthServiceProvider::class,
                    App\RouteServiceProvider::class,
                ],
                'aliases' => [],
            ],
            'auth' => [
                'defaults' => ['guard' => 'web'],
                'guards' => ['web' => ['driver' => 'no-session'], 'api' => ['driver' => 'bearer-name']],
                // The login routes' users (App\MemoryUserProvider): e-mail => bcrypt hash.
                'providers' => ['users' => ['driver' => 'memory', 'users' => [
                    'alice@example.com' => self::hash('alice-secret'),
                    'bob@example.com' => self::hash('bob-secret'),
                ]]],
            ],
            // Laravel's own limiter counts in the cache: Redis, so that its
            // counts outlive each request's application as in production.
            'cache' => [
                'default' => 'redis',
                'prefix' => 'cache_',
                'stores' => ['redis' => ['driver' => 'redis', 'connection' => 'default'], 'array' => ['driver' => 'array']],
            ],
            'database' => ['redis' => [
                'client' => 'phpredis',
                'options' => [],
                'default' => ['host' => '127.0.0.1', 'port' => $redisPort, 'database' => 0, 'read_timeout' => 30],
            ]],
            'logging' => ['default' => 'null', 'channels' => ['null' => ['driver' => 'monolog', 'handler' => NullHandler::class]]],
        ], $config)));
        $app->singleton(HttpKernelContract::class, $kernel);
        $app->singleton(ExceptionHandler::class, Handler::class);
        return $app;
    }

    /** A bcrypt hash at the lowest cost, made once per password and run. */
    private static function hash(string $password): string
    {
        static $hashes = [];
        return $hashes[$password] ??= password_hash($password, PASSWORD_BCRYPT, ['cost' => 4]);
    }

    /** Created once per run, removed when PHP exits. */
    public static function basePath(): string
    {
        if (self::$basePath !== null) {
            return self::$basePath;
        }
        $dir = sys_get_temp_dir() . '/throttle-laravel-app-' . bin2hex(random_bytes(6));
        foreach (['/bootstrap/cache', '/vendor/composer'] as $sub) {
            if (!mkdir($dir . $sub, 0777, true)) {
                throw new RuntimeException("cannot create $dir$sub");
            }
        }
        $composer = json_decode((string) file_get_contents(__DIR__ . '/../../composer.json'), true, 512, JSON_THROW_ON_ERROR);
        $installed = ['packages' => [['name' => $composer['name'], 'version' => 'dev-main', 'extra' => $composer['extra'] ?? []]]];
        file_put_contents($dir . '/vendor/composer/installed.json', json_encode($installed, JSON_PRETTY_PRINT));
        register_shutdown_function(static function () use ($dir): void {
            foreach (['/bootstrap/cache/*', '/vendor/composer/*'] as $pattern) {
                array_map('unlink', glob($dir . $pattern) ?: []);
            }
            foreach (['/bootstrap/cache', '/bootstrap', '/vendor/composer', '/vendor', ''] as $sub) {
                @rmdir($dir . $sub);
            }
        });
        return self::$basePath = $dir;
    }
}
