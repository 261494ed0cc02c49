<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Contracts\Redis\LimiterTimeoutException;
use Illuminate\Redis\Events\CommandExecuted;
use Illuminate\Redis\Limiters\DurationLimiterBuilder;
use Illuminate\Support\Facades\Redis;
use InvalidArgumentException;
use RedisThrottle\Laravel\ThrottleBuilder;
use RedisThrottle\Laravel\ThrottleTimeoutException;
use RedisThrottle\Laravel\Tests\Support\TestCase;
use ReflectionClass;
use ReflectionMethod;

/** `Redis::throttleNative('key')`, the stand-in for `Redis::throttle('key')`. */
final class BuilderTest extends TestCase
{
    /** @dataProvider clients */
    public function testAllowEveryThenAsRedisThrottle(string $client): void
    {
        $this->app($client);
        $outcomes = [];
        foreach ([0, 1, 2, 3] as $second) {
            $this->setClock($second);
            $outcomes[] = Redis::throttleNative('asr')->allow(3)->every(60)->block(0)->then(
                fn () => 'ran',
                fn (LimiterTimeoutException $e) => "limited, retry in {$e->reply->retryAfterMs} ms",
            );
        }
        $this->assertSame(['ran', 'ran', 'ran', 'limited, retry in 57000 ms'], $outcomes);
        $this->assertSame('thr-fixed', $this->server->type('throttle:asr'));
    }

    /** @dataProvider clients */
    public function testWithoutAFailureCallbackARefusalThrowsLaravelsException(string $client): void
    {
        $this->app($client);
        $this->setClock(0);
        $builder = Redis::connection()->throttleNative('job')->allow(1)->every(10)->block(0);
        $this->assertSame('first', $builder->then(fn () => 'first'));
        try {
            $builder->then(fn () => 'second');
            $this->fail('no exception');
        } catch (LimiterTimeoutException $e) {
            $this->assertInstanceOf(ThrottleTimeoutException::class, $e);
            $this->assertSame('rate limit reached; retry in 10000 ms', $e->getMessage());
            $this->assertSame([false, 1, 0], [$builder->reply->allowed, $builder->reply->limit, $builder->reply->remaining]);
        }
    }

    /** @dataProvider clients */
    public function testConnectionPrefixUsingAndCost(string $client): void
    {
        $this->app($client, ['prefix' => 'rl:'], ['options' => ['prefix' => 'app_']]);
        $this->setClock(0);
        // A token bucket of 10 a second: 4 calls of 3 tokens, the last one waits 200 ms.
        $refusedAfter = null;
        foreach ([1, 2, 3, 4] as $call) {
            Redis::throttleNative('export')->using('token')->cost(3)->allow(10)->every(1)->block(0)
                ->then(fn () => null, function (ThrottleTimeoutException $e) use (&$refusedAfter) {
                    $refusedAfter = $e->reply->retryAfterMs;
                });
        }
        $this->assertSame(200, $refusedAfter);
        $this->assertSame('thr-token', $this->server->type('app_rl:export'));
    }

    /**
     * block(): the caller waits on the server (BLOCK) until another client
     * gives the window's only unit back; it is admitted then, in the same call.
     *
     * @dataProvider clients
     */
    public function testBlockWaitsOnTheServerUntilASlotFrees(string $client): void
    {
        $this->app($client);
        Redis::throttleNative('mail')->allow(1)->every(60)->then(fn () => null);

        // Another process waits until our call is parked on the server, then refunds the unit.
        $releaser = proc_open([PHP_BINARY, '-r', sprintf(<<<'PHP'
            $redis = new Redis();
            $redis->connect('127.0.0.1', %d);
            $deadline = microtime(true) + 10;
            while (!str_contains($redis->rawCommand('INFO', 'throttle'), 'throttle_waiting_clients:1')) {
                if (microtime(true) > $deadline) { exit(1); }
                usleep(2000);
            }
            exit($redis->rawCommand('THROTTLE.FIXED', 'throttle:mail', 1, '60s', 'COST', -1)[0] === 1 ? 0 : 2);
            PHP, $this->server->port)], [], $pipes);

        $result = Redis::throttleNative('mail')->allow(1)->every(60)->block(10)->then(fn () => 'sent', fn () => 'gave up');
        $this->assertSame(0, proc_close($releaser), 'the releasing process saw a waiter and refunded');
        $this->assertSame('sent', $result);
    }

    /**
     * block($seconds) sends BLOCK in ms; a waiter that is not admitted gets
     * the limited reply as it stands, which goes to the failure callback.
     * The module's time-out answers that way; here another process ends the
     * wait with CLIENT UNBLOCK ... TIMEOUT, which answers the same way, so
     * no test waits for a clock.
     *
     * @dataProvider clients
     */
    public function testBlockGivesUpWithTheLimitedReply(string $client): void
    {
        $this->app($client);
        Redis::enableEvents();
        $sent = [];
        $this->app['events']->listen(CommandExecuted::class, function (CommandExecuted $event) use (&$sent) {
            $sent[] = array_merge(...array_map(fn ($p) => (array) $p, $event->parameters));
        });
        // On the server's clock: a call with AT (Carbon's test now) does not wait.
        Redis::throttleNative('mail')->allow(1)->every(60)->then(fn () => null);

        $unblocker = proc_open([PHP_BINARY, '-r', sprintf(<<<'PHP'
            $redis = new Redis();
            $redis->connect('127.0.0.1', %d);
            $deadline = microtime(true) + 10;
            while (!str_contains($redis->rawCommand('INFO', 'throttle'), 'throttle_waiting_clients:1')) {
                if (microtime(true) > $deadline) { exit(1); }
                usleep(2000);
            }
            preg_match('/^id=(\d+) .*flags=\w*b/m', $redis->rawCommand('CLIENT', 'LIST'), $waiter) || exit(2);
            exit($redis->rawCommand('CLIENT', 'UNBLOCK', $waiter[1], 'TIMEOUT') === 1 ? 0 : 3);
            PHP, $this->server->port)], [], $pipes);

        $result = Redis::throttleNative('mail')->allow(1)->every(60)->block(5)
            ->then(fn () => 'sent', fn (ThrottleTimeoutException $e) => $e->reply);
        $this->assertSame(0, proc_close($unblocker), 'the other process saw a waiter and unblocked it');
        $this->assertSame(['THROTTLE.FIXED', 'throttle:mail', 1, '60000ms', 'BLOCK', 5000], $sent[1]);
        $this->assertFalse($result->allowed);
        $this->assertGreaterThan(0, $result->retryAfterMs);
        $this->assertLessThanOrEqual(60_000, $result->retryAfterMs);
    }

    /** As Laravel's builder: a LimiterTimeoutException from the callback goes to the failure callback. */
    public function testALimiterTimeoutFromTheCallbackGoesToFailureAsInLaravel(): void
    {
        $this->app();
        $this->setClock(0);
        $inner = fn () => throw new LimiterTimeoutException('inner');
        $outcomes = [
            'laravel' => Redis::throttle('outer-l')->allow(5)->every(60)->block(0)->then($inner, fn ($e) => $e->getMessage()),
            'native' => Redis::throttleNative('outer-n')->allow(5)->every(60)->block(0)->then($inner, fn ($e) => $e->getMessage()),
        ];
        $this->assertSame(['laravel' => 'inner', 'native' => 'inner'], $outcomes);
    }

    public function testHasEveryPublicMethodOfLaravelsBuilder(): void
    {
        $names = fn (string $class) => array_map(
            fn (ReflectionMethod $m) => $m->getName(),
            (new ReflectionClass($class))->getMethods(ReflectionMethod::IS_PUBLIC),
        );
        $this->assertSame([], array_values(array_diff($names(DurationLimiterBuilder::class), $names(ThrottleBuilder::class))));
    }

    public static function badCalls(): array
    {
        return [
            'allow(0)' => [fn ($b) => $b->allow(0), "throttleNative('k')->allow(): maxLocks must be at least 1; got 0"],
            'every(0)' => [fn ($b) => $b->every(0), "throttleNative('k')->every(): decay must be at least 1 second; got 0"],
            'block(-1)' => [fn ($b) => $b->block(-1), "throttleNative('k')->block(): timeout must be 0 or more seconds; got -1"],
            'cost(-2)' => [fn ($b) => $b->cost(-2), "throttleNative('k')->cost(): cost must be 0 or more; got -2"],
            "using('gcra')" => [fn ($b) => $b->using('gcra'), "throttleNative('k')->using() must be one of fixed, sliding, sliding-exact, token, leaky; got 'gcra'"],
            'then() without allow()' => [fn ($b) => $b->every(1)->then(fn () => null), "throttleNative('k'): call allow() and every() before then()"],
        ];
    }

    /** @dataProvider badCalls */
    public function testBadArgumentsGetAnErrorNamingThem(callable $call, string $message): void
    {
        $this->app();
        try {
            $call(Redis::throttleNative('k'));
            $this->fail('no exception');
        } catch (InvalidArgumentException $e) {
            $this->assertSame($message, $e->getMessage());
        }
        $this->assertSame(0, $this->server->client()->dbSize());
    }
}
