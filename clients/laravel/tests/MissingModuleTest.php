<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Support\Facades\Redis;
use RedisThrottle\Laravel\LoginThrottle;
use RedisThrottle\Laravel\Tests\Support\RedisServer;
use RedisThrottle\Laravel\Tests\Support\TestCase;
use RedisThrottle\Laravel\ThrottleModuleMissingException;

/** A server without the module: the first call fails and says how to load it. */
final class MissingModuleTest extends TestCase
{
    protected function startServer(): RedisServer
    {
        return new RedisServer([], false);
    }

    private const HOW = 'the THROTTLE commands are missing because the redis-throttle module is not loaded. Load it with the line `loadmodule /path/to/libredis_throttle.so` in redis.conf';

    /** @dataProvider clients */
    public function testTheMiddlewareSaysHowToLoadTheModule(string $client): void
    {
        $this->app($client)['router']->get('/x', fn () => 'ok')->middleware('throttle.native:2,1');
        $this->assertSame(500, $this->get('/x')->getStatusCode());
        $this->assertInstanceOf(ThrottleModuleMissingException::class, $this->rendered);
        $this->assertStringStartsWith('the Redis server has no THROTTLE.FIXED command: ' . self::HOW, $this->rendered->getMessage());
        $this->assertStringContainsStringIgnoringCase("unknown command 'THROTTLE.FIXED'", $this->rendered->getMessage());
    }

    /** @dataProvider clients */
    public function testTheBuilderSaysHowToLoadTheModule(string $client): void
    {
        $this->app($client);
        $this->expectException(ThrottleModuleMissingException::class);
        $this->expectExceptionMessage('the Redis server has no THROTTLE.FIXED command: ' . self::HOW);
        Redis::throttleNative('k')->allow(1)->every(1)->then(fn () => null);
    }

    /** @dataProvider clients */
    public function testTheFunnelSaysHowToLoadTheModule(string $client): void
    {
        $this->app($client);
        try {
            Redis::funnelNative('k')->limit(3)->then(fn () => $this->fail('the callback ran'), fn () => $this->fail('the failure callback ran'));
            $this->fail('no exception');
        } catch (ThrottleModuleMissingException $e) {
            $this->assertStringStartsWith('the Redis server has no THROTTLE.ACQUIRE command: ' . self::HOW, $e->getMessage());
            $this->assertStringContainsStringIgnoringCase("unknown command 'THROTTLE.ACQUIRE'", $e->getMessage());
        }
    }

    /** @dataProvider clients */
    public function testLoginThrottleSaysHowToLoadTheModule(string $client): void
    {
        $this->app($client);
        $this->expectException(ThrottleModuleMissingException::class);
        $this->expectExceptionMessage('the Redis server has no THROTTLE.FIXED command: ' . self::HOW);
        (new LoginThrottle(5, 60, 900))->tooManyAttempts('alice|10.0.0.1');
    }
}
