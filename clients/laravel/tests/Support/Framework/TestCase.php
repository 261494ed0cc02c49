<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\Framework;

use Illuminate\Foundation\Bootstrap\BootProviders;
use Illuminate\Foundation\Bootstrap\RegisterFacades;
use Illuminate\Foundation\Bootstrap\RegisterProviders;
use Illuminate\Foundation\Bootstrap\SetRequestForConsole;
use RedisThrottle\Laravel\Tests\Support\LaravelApp;

/**
 * What Orchestra Testbench's TestCase gives laravel/framework's integration
 * tests, as far as the suites in tests/Framework use it: Laravel's own
 * Foundation TestCase (get(), withoutExceptionHandling(), ...) on an
 * application booted before the test, with getEnvironmentSetUp($app) called
 * between registering and booting the providers, as Testbench calls it,
 * and the request a console kernel sets (for url()).
 * The application is tests/Support/LaravelApp's, its Redis the shared
 * server, flushed before each test. tests/bootstrap.php makes this class
 * Orchestra\Testbench\TestCase.
 */
abstract class TestCase extends \Illuminate\Foundation\Testing\TestCase
{
    protected function setUp(): void
    {
        SharedServer::start()->client()->flushAll();
        parent::setUp();
    }

    public function createApplication()
    {
        $app = LaravelApp::make(SharedServer::start()->port);
        $app->bootstrapWith([RegisterFacades::class, SetRequestForConsole::class, RegisterProviders::class]);
        $this->getEnvironmentSetUp($app);
        $app->bootstrapWith([BootProviders::class]);
        return $app;
    }

    /** @param \Illuminate\Foundation\Application $app */
    protected function getEnvironmentSetUp($app)
    {
    }
}
