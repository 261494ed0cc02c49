<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Auth\GenericUser;
use Illuminate\Cache\RateLimiting\Limit;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\RateLimiter;
use Illuminate\Support\Facades\Redis;
use RedisThrottle\Laravel\Limiter;
use RedisThrottle\Laravel\LoginThrottle;
use RedisThrottle\Laravel\Tests\Support\RedisServer;
use RedisThrottle\Laravel\Tests\Support\TestCase;
use RuntimeException;

/**
 * Laravel's Redis Cluster connections (phpredis RedisCluster, Predis with
 * `cluster => redis`) on a one-node cluster, which enforces CROSSSLOT like
 * any cluster. One node serves the whole run: a cluster takes ~2 s to start.
 */
final class ClusterTest extends TestCase
{
    private static RedisServer $cluster;

    public static function setUpBeforeClass(): void
    {
        self::$cluster = RedisServer::singleNodeCluster();
    }

    protected function startServer(): RedisServer
    {
        self::$cluster->client()->flushAll();
        return self::$cluster;
    }

    protected function stopServer(): void
    {
    }

    private function clusterApp(string $client): void
    {
        $this->app($client, [], [
            'options' => ['cluster' => 'redis', 'prefix' => 'app_'],
            'default' => null,
            'clusters' => ['default' => [['host' => '127.0.0.1', 'port' => $this->server->port, 'read_timeout' => 30]]],
        ]);
    }

    /** @dataProvider clients */
    public function testMiddlewareAndBuilder(string $client): void
    {
        $this->clusterApp($client);
        $this->app['router']->get('/x', fn () => 'ok')->middleware('throttle.native:2,1');
        $this->setClock(0);
        $this->assertSame([200, 200, 429], [$this->get('/x')->getStatusCode(), $this->get('/x')->getStatusCode(), $this->get('/x')->getStatusCode()]);
        $this->assertSame('thr-fixed', $this->server->type('app_throttle:' . sha1('|127.0.0.1')));

        $this->assertSame(['ran', 'limited'], [
            Redis::throttleNative('job')->allow(1)->every(5)->block(0)->then(fn () => 'ran', fn () => 'limited'),
            Redis::throttleNative('job')->allow(1)->every(5)->block(0)->then(fn () => 'ran', fn () => 'limited'),
        ]);
    }

    /**
     * Penalties and LoginThrottle route by their one key: a ban through the
     * builder, a lockout, and clear()'s DEL.
     *
     * @dataProvider clients
     */
    public function testBansAndLoginThrottle(string $client): void
    {
        $this->clusterApp($client);
        $this->setClock(0);
        $call = fn () => Redis::throttleNative('job')->allow(1)->every(5)->ban(60)->block(0)
            ->then(fn () => 'ran', fn ($e) => $e->reply->bannedMs);
        $this->assertSame(['ran', 60_000], [$call(), $call()]);

        $throttle = new LoginThrottle(2, 60, 600);
        $throttle->hit('alice|10.0.0.1');
        $throttle->hit('alice|10.0.0.1');
        $this->assertSame([true, 600], [$throttle->tooManyAttempts('alice|10.0.0.1'), $throttle->availableIn('alice|10.0.0.1')]);
        $this->assertSame('thr-fixed', $this->server->type('app_throttle:login:alice|10.0.0.1'));
        $throttle->clear('alice|10.0.0.1');
        $this->assertSame([false, 0], [$throttle->tooManyAttempts('alice|10.0.0.1'), $throttle->attempts('alice|10.0.0.1')]);
    }

    /**
     * The funnel's THROTTLE.ACQUIRE and THROTTLE.RELEASE route by their one
     * key: two nested slots of two, the third refused, all released after.
     *
     * @dataProvider clients
     */
    public function testFunnel(string $client): void
    {
        $this->clusterApp($client);
        $this->setClock(0);
        $funnel = fn () => Redis::funnelNative('vendor')->limit(2)->releaseAfter(60)->block(0);
        $outcome = $funnel()->then(fn () => $funnel()->then(fn () => [
            $this->server->type('app_throttle:vendor'),
            $funnel()->then(fn () => 'third ran', fn ($e) => $e->reply->retryAfterMs),
        ]));
        $this->assertSame(['thr-lease', 60_000], $outcome);
        $this->assertSame(0, $this->server->client()->exists('app_throttle:vendor'), 'both leases were released');
    }

    /**
     * A named limiter's keys share the hash tag {name}, so its several
     * limits go in one THROTTLE.ALL on one slot.
     *
     * @dataProvider clients
     */
    public function testSeveralLimitsShareASlot(string $client): void
    {
        $this->clusterApp($client);
        $this->app['router']->get('/x', fn () => 'ok')->middleware('throttle.native:api');
        RateLimiter::for('api', fn (Request $request) => [Limit::perMinute(3), Limit::perMinute(1)->by($request->user()->id)]);
        $this->setClock(0);
        $statuses = [];
        foreach ([1, 1, 2, 3, 4] as $id) {
            $statuses[] = $this->get('/x', '127.0.0.1', new GenericUser(['id' => $id]))->getStatusCode();
        }
        $this->assertSame([200, 429, 200, 200, 429], $statuses);
    }

    /**
     * Without a shared tag the cluster refuses THROTTLE.ALL; the error comes through.
     *
     * @dataProvider clients
     */
    public function testKeysOfDifferentSlotsAreRefused(string $client): void
    {
        $this->clusterApp($client);
        $limiter = new Limiter(Redis::connection());
        $this->expectException(RuntimeException::class);
        $this->expectExceptionMessage("THROTTLE.ALL failed: CROSSSLOT Keys in request don't hash to the same slot");
        $limiter->attemptAll([['a', 'fixed', 1, 1000], ['b', 'fixed', 1, 1000]]);
    }
}
