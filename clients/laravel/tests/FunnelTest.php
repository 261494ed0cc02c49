<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Carbon\CarbonInterval;
use Illuminate\Contracts\Redis\LimiterTimeoutException;
use Illuminate\Redis\Events\CommandExecuted;
use Illuminate\Redis\Limiters\ConcurrencyLimiter as LaravelConcurrencyLimiter;
use Illuminate\Redis\Limiters\ConcurrencyLimiterBuilder;
use Illuminate\Support\Carbon;
use Illuminate\Support\Facades\Redis;
use InvalidArgumentException;
use RedisThrottle\Laravel\ConcurrencyLimiter;
use RedisThrottle\Laravel\FunnelBuilder;
use RedisThrottle\Laravel\Tests\Support\TestCase;
use RedisThrottle\Laravel\ThrottleTimeoutException;
use ReflectionClass;
use ReflectionMethod;
use RuntimeException;

/**
 * `Redis::funnelNative('key')`, the stand-in for `Redis::funnel('key')`, and
 * the ConcurrencyLimiter under it: slots held as the module's leases.
 * Time is Carbon's test now (sent as AT) except where a call waits on the
 * server (BLOCK), where the server's events end the wait: a release, or
 * the test's own worker processes taking their turns.
 */
final class FunnelTest extends TestCase
{
    private const WORKER = __DIR__ . '/Support/funnel_worker.php';

    /**
     * Three nested callbacks hold two slots and the third is refused, the
     * same on Laravel's funnel and the package's; each slot is released
     * after its callback, and then() returns the callback's value.
     *
     * @dataProvider clients
     */
    public function testSameOutcomesAsLaravelsFunnel(string $client): void
    {
        $this->app($client);
        $outcomes = [];
        foreach (['funnel' => 'laravel', 'funnelNative' => 'native'] as $method => $side) {
            $funnel = fn () => Redis::$method("jobs-$side")->limit(2)->releaseAfter(60)->block(0);
            $outcomes[$side] = $funnel()->then(fn () => $funnel()->then(
                fn () => $funnel()->then(fn () => 'third ran', fn (LimiterTimeoutException $e) => 'third refused'),
            ));
            $outcomes[$side] .= ', then ' . $funnel()->then(fn () => $funnel()->then(fn () => 'two ran again'));
        }
        $this->assertSame(['laravel' => 'third refused, then two ran again', 'native' => 'third refused, then two ran again'], $outcomes);
        $this->assertSame(0, $this->server->client()->exists('throttle:jobs-native'), 'every lease was released');
    }

    /**
     * One THROTTLE.ACQUIRE with BLOCK (Laravel's default of 3 s), then one
     * THROTTLE.RELEASE with the lease's token; nothing else.
     *
     * @dataProvider clients
     */
    public function testOneBlockingAcquireAndOneReleasePerCall(string $client): void
    {
        $this->app($client);
        Redis::enableEvents();
        $sent = [];
        $this->app['events']->listen(CommandExecuted::class, function (CommandExecuted $event) use (&$sent) {
            $sent[] = array_merge(...array_map(fn ($p) => (array) $p, $event->parameters));
        });
        $builder = Redis::funnelNative('vendor')->limit(3);
        $inside = $builder->then(fn () => [$builder->reply->allowed, $builder->reply->remaining, $this->server->type('throttle:vendor')]);

        $this->assertSame([true, 2, 'thr-lease'], $inside);
        $this->assertMatchesRegularExpression('/^[0-9a-f]{32}$/', $builder->reply->token);
        $this->assertSame([
            ['THROTTLE.ACQUIRE', 'throttle:vendor', 3, '60000ms', 'BLOCK', 3000],
            ['THROTTLE.RELEASE', 'throttle:vendor', $builder->reply->token],
        ], $sent);
        $this->assertTrue($builder->released);
        $this->assertSame(0, $this->server->client()->exists('throttle:vendor'));
    }

    /** @dataProvider clients */
    public function testARefusalGoesToFailureOrThrowsLaravelsException(string $client): void
    {
        $this->app($client);
        $this->setClock(0);
        $builder = Redis::funnelNative('vendor')->limit(1)->releaseAfter(60)->block(0);
        $refusal = $builder->then(fn () => $builder->then(fn () => 'ran', fn (ThrottleTimeoutException $e) => $e));

        $this->assertInstanceOf(LimiterTimeoutException::class, $refusal);
        $this->assertSame('concurrency limit reached: all 1 slots are held; one frees in 60000 ms unless released sooner', $refusal->getMessage());
        $this->assertSame([false, 1, 0, 60_000, null], [
            $refusal->reply->allowed, $refusal->reply->limit, $refusal->reply->remaining, $refusal->reply->retryAfterMs, $refusal->reply->token,
        ]);

        $this->expectException(ThrottleTimeoutException::class);
        $builder->then(fn () => $builder->then(fn () => 'ran'));
    }

    /**
     * A callback that throws gives its slot back all the same, and its
     * exception reaches the caller as it was (not the failure callback).
     *
     * @dataProvider clients
     */
    public function testTheSlotIsReleasedWhenTheCallbackThrows(string $client): void
    {
        $this->app($client);
        $this->setClock(0);
        $thrown = new RuntimeException('the vendor answered 500');
        $builder = Redis::funnelNative('vendor')->limit(1)->releaseAfter(3600)->block(0);
        try {
            $builder->then(fn () => throw $thrown, fn () => $this->fail('the failure callback ran'));
            $this->fail('no exception');
        } catch (RuntimeException $e) {
            $this->assertSame($thrown, $e);
        }
        $this->assertTrue($builder->released);
        $this->assertSame(0, $this->server->client()->exists('throttle:vendor'));
        $this->assertStringContainsString('throttle_release:calls=1,admitted=1,', $this->server->client()->rawCommand('INFO', 'throttle'));
        // Laravel's funnel would have waited an hour (laravel#25795, before 8.x): the next job runs now.
        $this->assertSame('next ran', $builder->then(fn () => 'next ran'));
    }

    /**
     * laravel#27224: a job that outlives its lease must not free the slot
     * another job took since. Its release answers 0 and changes nothing;
     * `released` tells the job.
     *
     * @dataProvider clients
     */
    public function testALateReleaseFreesNoOtherHoldersSlot(string $client): void
    {
        $this->app($client);
        $this->setClock(0);
        $late = Redis::funnelNative('vendor')->limit(1)->releaseAfter(10)->block(0);
        $other = new ConcurrencyLimiter(Redis::connection(), 'vendor', 1, 60, 'throttle:');
        $late->then(function () use ($other) {
            $this->setClock(11); // the lease ended at 10 s
            $this->assertTrue($other->block(0)); // no callback: the other job keeps its slot
        });

        $this->assertFalse($late->released);
        $info = $this->server->command('THROTTLE.INFO', 'throttle:vendor', 'AT', (string) ((self::T0 + 12) * 1_000_000));
        $this->assertSame([1, [[$other->reply->token, (self::T0 + 71) * 1_000_000, 59_000]]], [$info[5], $info[13]]);
        $this->assertSame('refused', Redis::funnelNative('vendor')->limit(1)->block(0)->then(fn () => 'ran', fn () => 'refused'));
    }

    /**
     * Laravel's protected acquire($id) and release($key, $id), as a
     * subclass calls them: one try with the lease named by $id (the same
     * $id again renews it, taking no second slot), and a release by it.
     *
     * @dataProvider clients
     */
    public function testAcquireAndReleaseForSubclasses(string $client): void
    {
        $this->app($client);
        $this->setClock(0);
        $limiter = new class (Redis::connection(), 'workers', 1, 60, 'throttle:') extends ConcurrencyLimiter {
            public function tryOnce(string $id): string|false
            {
                return $this->acquire($id);
            }

            public function give(string $id): bool
            {
                return $this->release($this->name, $id);
            }
        };
        $this->assertSame(['worker-7', 'worker-7', false, true, false, 'worker-8'], [
            $limiter->tryOnce('worker-7'), $limiter->tryOnce('worker-7'), $limiter->tryOnce('worker-8'),
            $limiter->give('worker-7'), $limiter->give('worker-7'), $limiter->tryOnce('worker-8'),
        ]);
    }

    /**
     * renew() inside the callback: a heartbeat that keeps the slot past
     * releaseAfter(), until the lease has ended anyway.
     *
     * @dataProvider clients
     */
    public function testRenewKeepsTheSlotWhileTheCallbackRuns(string $client): void
    {
        $this->app($client);
        $this->setClock(0);
        $builder = Redis::funnelNative('report')->limit(1)->releaseAfter(10)->block(0);
        $other = fn () => Redis::funnelNative('report')->limit(1)->block(0)
            ->then(fn () => 'other ran', fn ($e) => "other refused for {$e->reply->retryAfterMs} ms");
        $steps = $builder->then(function () use ($builder, $other) {
            $steps = [];
            $this->setClock(8);
            $steps[] = $builder->renew(); // ends at 18 s
            $this->setClock(17.999);
            $steps[] = $other();
            $steps[] = $builder->renew(CarbonInterval::milliseconds(1500)); // ends at 19.499 s
            $this->setClock(19.499);
            $steps[] = $builder->renew(); // too late
            $steps[] = $other();
            return $steps;
        });
        $this->assertSame([true, 'other refused for 1 ms', true, false, 'other ran'], $steps);
        $this->assertFalse($builder->released);

        foreach ([fn () => $builder->renew(), fn () => $builder->then(fn () => $builder->renew(0))] as $call) {
            try {
                $call();
                $this->fail('no exception');
            } catch (\LogicException | InvalidArgumentException $e) {
                $messages[] = $e->getMessage();
            }
        }
        $this->assertSame([
            "funnelNative('report')->renew() renews the lease of then()'s callback while it runs",
            "funnelNative('report')->renew() must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 0",
        ], $messages);
    }

    /**
     * Waiters get their slots in arrival order. A test holds the only
     * slot; five worker processes (tests/Support/funnel_worker.php, each its
     * own Laravel connection) call block(10) one after another, each
     * started once the one before it waits on the server. Then the test
     * releases its slot: each worker's callback appends its number to a
     * list and its then() releases the slot to the next. The list is the
     * order of admission; no clock is read.
     *
     * @dataProvider clients
     */
    public function testBlockedCallersAreAdmittedInArrivalOrder(string $client): void
    {
        $this->app($client);
        $redis = $this->server->client();
        $this->assertSame(1, $redis->rawCommand('THROTTLE.ACQUIRE', 'throttle:fifo', '1', '60s', 'ID', 'test')[0]);

        $workers = [];
        foreach (range(1, 5) as $id) {
            $workers[$id] = $this->startWorker(['client' => $client, 'key' => 'fifo', 'id' => $id, 'mode' => 'wait']);
            $this->waitForWaiters($id);
        }
        $this->assertSame(1, $redis->rawCommand('THROTTLE.RELEASE', 'throttle:fifo', 'test'));

        foreach ($workers as $id => $worker) {
            [$code, $errors] = $this->finish($worker);
            $this->assertSame(0, $code, "worker $id ran its callback: $errors");
        }
        $this->assertSame(['1', '2', '3', '4', '5'], $redis->lRange('admitted', 0, -1));
        $this->assertSame(0, $redis->exists('throttle:fifo'), 'the last worker released its slot');
        $this->assertStringContainsString('throttle_acquire:calls=6,admitted=6,limited=0,blocked=5,timed_out=0', $redis->rawCommand('INFO', 'throttle'));
    }

    /**
     * A worker that dies holding a slot (killed in its callback, so it
     * never releases) loses it when its lease ends: refused 1 ms before,
     * admitted at the end. Time is AT: the worker's and then the test's.
     *
     * @dataProvider clients
     */
    public function testACrashedHoldersSlotFreesWhenItsLeaseEnds(string $client): void
    {
        $this->app($client);
        $worker = $this->startWorker(['client' => $client, 'key' => 'crash', 'mode' => 'crash', 'at' => self::T0 * 1_000_000]);
        $line = fgets($worker['stdout']);
        $this->assertIsString($line, 'the worker took the slot: ' . file_get_contents($worker['stderr']));
        $this->assertMatchesRegularExpression('/^holding [0-9a-f]{32}$/', trim($line));
        proc_terminate($worker['process'], 9);
        $this->finish($worker);

        $info = $this->server->command('THROTTLE.INFO', 'throttle:crash', 'AT', (string) ((self::T0 + 30) * 1_000_000));
        $this->assertSame([1, [[substr(trim($line), 8), (self::T0 + 60) * 1_000_000, 30_000]]], [$info[5], $info[13]]);

        $funnel = fn () => Redis::funnelNative('crash')->limit(1)->releaseAfter(60)->block(0)
            ->then(fn () => 'ran', fn (ThrottleTimeoutException $e) => "refused, one frees in {$e->reply->retryAfterMs} ms");
        $this->setClock(59.999);
        $this->assertSame('refused, one frees in 1 ms', $funnel());
        $this->setClock(60);
        $this->assertSame('ran', $funnel());
    }

    /** releaseAfter() takes seconds, a DateInterval to the ms, or a time, as Laravel's. */
    public function testReleaseAfterTakesSecondsIntervalsAndTimes(): void
    {
        $this->app();
        $this->setClock(0);
        $lease = function ($releaseAfter) {
            $builder = Redis::funnelNative('lease')->limit(1)->releaseAfter($releaseAfter)->block(0);
            return [$builder->releaseAfter, $builder->then(fn () => $this->server->client()->rawCommand('THROTTLE.INFO', 'throttle:lease', 'AT', (string) (self::T0 * 1_000_000))[11])];
        };
        $this->assertSame([
            [90, 90_000],
            [2, 1_500],
            [120, 120_000],
        ], [$lease(90), $lease(CarbonInterval::milliseconds(1500)), $lease(Carbon::now()->addMinutes(2))]);
    }

    public function testHasEveryPublicMethodOfLaravelsBuilderAndLimiter(): void
    {
        $names = fn (string $class) => array_map(
            fn (ReflectionMethod $m) => $m->getName(),
            (new ReflectionClass($class))->getMethods(ReflectionMethod::IS_PUBLIC),
        );
        $this->assertSame([], array_values(array_diff($names(ConcurrencyLimiterBuilder::class), $names(FunnelBuilder::class))));
        $this->assertSame([], array_values(array_diff($names(LaravelConcurrencyLimiter::class), $names(ConcurrencyLimiter::class))));
        // Laravel's protected acquire($id) and release($key, $id), which subclasses override, keep their form.
        foreach (['block', 'acquire', 'release'] as $method) {
            $form = fn (string $class) => array_map(
                fn (\ReflectionParameter $p) => [$p->getName(), $p->isOptional()],
                array_slice((new ReflectionMethod($class, $method))->getParameters(), 0, $method === 'block' ? 2 : null),
            );
            $this->assertSame($form(LaravelConcurrencyLimiter::class), $form(ConcurrencyLimiter::class), $method);
            $this->assertSame((new ReflectionMethod(LaravelConcurrencyLimiter::class, $method))->isPublic(), (new ReflectionMethod(ConcurrencyLimiter::class, $method))->isPublic(), $method);
        }
    }

    public static function badCalls(): array
    {
        return [
            'limit(0)' => [fn ($c) => Redis::funnelNative('k')->limit(0), "funnelNative('k')->limit(): maxLocks must be from 1 to 100000; got 0"],
            'limit(100001)' => [fn ($c) => Redis::funnelNative('k')->limit(100_001), "funnelNative('k')->limit(): maxLocks must be from 1 to 100000; got 100001"],
            'releaseAfter(0)' => [fn ($c) => Redis::funnelNative('k')->releaseAfter(0), "funnelNative('k')->releaseAfter() must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 0"],
            'releaseAfter(a past time)' => [fn ($c) => Redis::funnelNative('k')->releaseAfter(Carbon::now()->subMinute()), "funnelNative('k')->releaseAfter() must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 0"],
            'block(-1)' => [fn ($c) => Redis::funnelNative('k')->block(-1), "funnelNative('k')->block(): timeout must be 0 or more seconds; got -1"],
            'then() without limit()' => [fn ($c) => Redis::funnelNative('k')->then(fn () => null), "funnelNative('k'): call limit() before then()"],
            'ConcurrencyLimiter maxLocks' => [fn ($c) => new ConcurrencyLimiter($c, 'k', 0, 60), 'ConcurrencyLimiter maxLocks must be from 1 to 100000; got 0'],
            'ConcurrencyLimiter releaseAfter' => [fn ($c) => new ConcurrencyLimiter($c, 'k', 1, 'soon'), "ConcurrencyLimiter releaseAfter must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 'soon'"],
        ];
    }

    /** @dataProvider badCalls */
    public function testBadArgumentsGetAnErrorNamingThem(callable $call, string $message): void
    {
        $this->app();
        $this->setClock(0);
        try {
            $call(Redis::connection());
            $this->fail('no exception');
        } catch (InvalidArgumentException $e) {
            $this->assertSame($message, $e->getMessage());
        }
        $this->assertSame(0, $this->server->client()->dbSize());
    }

    /**
     * @param array<string, mixed> $job funnel_worker.php's job, without the port
     * @return array{process: resource, stdout: resource, stderr: string}
     */
    private function startWorker(array $job): array
    {
        $stderr = tempnam(sys_get_temp_dir(), 'funnel-worker-');
        $process = proc_open(
            [PHP_BINARY, self::WORKER, json_encode(['port' => $this->server->port] + $job, JSON_THROW_ON_ERROR)],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['file', $stderr, 'w']],
            $pipes,
        );
        $this->assertIsResource($process);
        return ['process' => $process, 'stdout' => $pipes[1], 'stderr' => $stderr];
    }

    /**
     * Waits for the worker to exit.
     *
     * @return array{0: int, 1: string} its exit code and what it wrote to stderr
     */
    private function finish(array $worker): array
    {
        fclose($worker['stdout']);
        $code = proc_close($worker['process']);
        $errors = (string) file_get_contents($worker['stderr']);
        unlink($worker['stderr']);
        return [$code, $errors];
    }

    /** Returns once $count clients wait in BLOCK on the server (at most 10 s). */
    private function waitForWaiters(int $count): void
    {
        $redis = $this->server->client();
        $deadline = microtime(true) + 10;
        while (!str_contains($redis->rawCommand('INFO', 'throttle'), "throttle_waiting_clients:$count\r")) {
            if (microtime(true) > $deadline) {
                $this->fail("$count workers never waited on the server");
            }
            usleep(2_000);
        }
    }
}
