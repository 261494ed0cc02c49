<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Auth\GenericUser;
use Illuminate\Cache\RateLimiting\Limit;
use Illuminate\Http\Request;
use Illuminate\Routing\Middleware\ThrottleRequestsWithRedis;
use Illuminate\Support\Facades\RateLimiter;
use Illuminate\Support\Facades\Redis;
use RedisThrottle\Laravel\Tests\Support\TestCase;

/**
 * Laravel's own Redis limiter (Redis::throttle(), ThrottleRequestsWithRedis:
 * DurationLimiter and its Lua script, unchanged) and the package, on the same
 * calls at the same instants, against the same server. Both read Carbon's
 * test now: the package sends it as AT, Laravel's limiter reads it through
 * tests/Support/laravel_limiter_clock.php. They agree except where the
 * README's table of differences says they differ; each difference is
 * asserted with its numbers.
 */
final class SideBySideTest extends TestCase
{
    /** Calls at T0 + $second for each of $seconds; which ones each limiter admitted. */
    private function builders(array $seconds, int $allow, int $every): array
    {
        $admitted = ['laravel' => 0, 'native' => 0];
        foreach ($seconds as $second) {
            $this->setClock($second);
            Redis::throttle('asr')->allow($allow)->every($every)->block(0)
                ->then(function () use (&$admitted) { $admitted['laravel']++; }, fn () => null);
            Redis::throttleNative('asr')->allow($allow)->every($every)->block(0)
                ->then(function () use (&$admitted) { $admitted['native']++; }, fn () => null);
        }
        return $admitted;
    }

    /**
     * Laravel opens its window at the whole second of the first call
     * (time()): a window of 1 s opened at 0.95 s ends at 1.0 s, and the next
     * one admits another `allow` at once. 20 a second lets 40 through in
     * 100 ms; the module's window opens at 0.95 s exactly and admits 20.
     */
    public function testWindowOpensAtTheWholeSecond(): void
    {
        $this->app();
        $burst = [];
        for ($i = 0; $i < 20; $i++) {
            $burst[] = 0.95 + $i * 0.002;   // 0.950 .. 0.988 s
            $burst[] = 1.01 + $i * 0.002;   // 1.010 .. 1.048 s
        }
        sort($burst);
        $this->assertSame(['laravel' => 40, 'native' => 20], $this->builders($burst, 20, 1));

        // The module admits again when its window ends, 1 s after 0.95 s.
        $this->assertSame(['laravel' => 0, 'native' => 0], $this->builders([1.949], 20, 1));
        $this->assertSame(['laravel' => 0, 'native' => 1], $this->builders([1.95], 20, 1));
    }

    /** Laravel counts refused calls in its hash; the module changes nothing on a refusal. */
    public function testRefusedCallsAreCountedOnlyByLaravel(): void
    {
        $this->app();
        // 20 calls at 0.5 s, 5 more at 0.7 s.
        $calls = array_merge(array_fill(0, 20, 0.5), array_fill(0, 5, 0.7));
        $this->assertSame(['laravel' => 20, 'native' => 20], $this->builders($calls, 20, 1));
        $redis = $this->server->client();
        $this->assertSame('25', $redis->hGet('asr', 'count'));
        // The module's window opened with the first call, at 0.5 s.
        $pairs = $this->server->command('THROTTLE.INFO', 'throttle:asr', 'AT', (string) (self::T0 * 1_000_000 + 700_000));
        $info = [];
        for ($i = 0; $i < count($pairs); $i += 2) {
            $info[$pairs[$i]] = $pairs[$i + 1];
        }
        // A fixed window keeps the units it admitted (20 of 20: none left).
        $this->assertSame([20, self::T0 * 1_000_000 + 500_000], [$info['used'], $info['window_start']]);
    }

    /**
     * Laravel's key lives 2 x every; the module's exactly to its window's
     * end: its reset_after, which is its PTTL, is 60 s from the window's
     * start (a look with COST 0 at that instant).
     */
    public function testKeyLifetime(): void
    {
        $this->app();
        $this->builders([0.95], 20, 60);
        $redis = $this->server->client();
        // More than one window, at most two: only a stall of a minute here would fail it.
        $this->assertGreaterThan(60, $redis->ttl('asr'));
        $this->assertLessThanOrEqual(120, $redis->ttl('asr'));
        $at = (string) (self::T0 * 1_000_000 + 950_000);
        $this->assertSame(['1', '20', '19', '0', '60000'], array_map('strval', $this->server->command('THROTTLE.FIXED', 'throttle:asr', '20', '60', 'COST', '0', 'AT', $at)));
        $this->assertLessThanOrEqual(60_000, $redis->pttl('throttle:asr'));
    }

    /**
     * The same requests through Laravel's ThrottleRequestsWithRedis
     * (`throttle.redis:3,1`) and `throttle.native:3,1`. Status and
     * X-RateLimit-Limit/Remaining agree while both windows are open; the
     * window start makes Retry-After and X-RateLimit-Reset differ by the
     * 0.95 s Laravel drops, and at 60.5 s Laravel has opened a new window
     * that the module opens only at 60.95 s.
     */
    public function testMiddlewareOnTheSameRequests(): void
    {
        $router = $this->app()['router'];
        $router->aliasMiddleware('throttle.redis', ThrottleRequestsWithRedis::class);
        $router->get('/laravel', fn () => 'ok')->middleware('throttle.redis:3,1');
        $router->get('/native', fn () => 'ok')->middleware('throttle.native:3,1');

        $ok = fn (int $remaining) => [200, ['X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => (string) $remaining]];
        $limited = fn (int $retryAfter, int $reset) => [429, [
            'X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => '0',
            'Retry-After' => (string) $retryAfter, 'X-RateLimit-Reset' => (string) (self::T0 + $reset),
        ]];
        // [second, Laravel's answer, the module's answer]
        $steps = [
            [0.95, $ok(2), $ok(2)],
            [0.95, $ok(1), $ok(1)],
            [0.95, $ok(0), $ok(0)],
            [30.4, $limited(30, 60), $limited(31, 61)],
            [59.99, $limited(1, 60), $limited(1, 60)],
            [60.5, $ok(2), $limited(1, 61)],
            [60.95, $ok(1), $ok(2)],
        ];
        foreach ($steps as [$second, $laravel, $native]) {
            $this->setClock($second);
            $laravelResponse = $this->get('/laravel');
            $nativeResponse = $this->get('/native');
            $this->assertSame(
                ['laravel' => $laravel, 'native' => $native],
                [
                    'laravel' => [$laravelResponse->getStatusCode(), self::limitHeaders($laravelResponse)],
                    'native' => [$nativeResponse->getStatusCode(), self::limitHeaders($nativeResponse)],
                ],
                "at {$second} s",
            );
        }
    }

    /**
     * Several limits: Laravel acquires them one after another, so a request
     * refused by the second limit has already counted against the first. The
     * module's THROTTLE.ALL counts a refused request against none.
     */
    public function testSeveralLimitsLaravelConsumesBeforeItRefuses(): void
    {
        $router = $this->app()['router'];
        $router->aliasMiddleware('throttle.redis', ThrottleRequestsWithRedis::class);
        $router->get('/laravel', fn () => 'ok')->middleware('throttle.redis:uploads');
        $router->get('/native', fn () => 'ok')->middleware('throttle.native:uploads');
        RateLimiter::for('uploads', fn (Request $request) => [
            Limit::perMinute(3),
            Limit::perMinute(1)->by($request->user()->id),
        ]);
        $this->setClock(0);
        $statuses = ['laravel' => [], 'native' => []];
        foreach ([1, 1, 1, 2] as $id) {
            foreach (['laravel', 'native'] as $route) {
                $statuses[$route][] = $this->get("/$route", '127.0.0.1', new GenericUser(['id' => $id]))->getStatusCode();
            }
        }
        // User 1's two refused requests used up Laravel's shared limit of 3.
        $this->assertSame(['laravel' => [200, 429, 429, 429], 'native' => [200, 429, 429, 200]], $statuses);
    }

    /**
     * Retry-After with several limits: Laravel gives the first refusing
     * limit's; the package when every limit admits again.
     */
    public function testRetryAfterWithSeveralLimits(): void
    {
        $router = $this->app()['router'];
        $router->aliasMiddleware('throttle.redis', ThrottleRequestsWithRedis::class);
        $router->get('/laravel', fn () => 'ok')->middleware('throttle.redis:reports');
        $router->get('/native', fn () => 'ok')->middleware('throttle.native:reports');
        RateLimiter::for('reports', fn () => [Limit::perMinute(1)->by('minute'), Limit::perHour(1)->by('hour')]);
        $this->setClock(0);
        $this->get('/laravel');
        $this->get('/native');
        $this->setClock(30);
        $this->assertSame(
            ['laravel' => [429, '1', '30'], 'native' => [429, '1', '3570']],
            array_map(fn ($response) => [$response->getStatusCode(), $response->headers->get('X-RateLimit-Limit'), $response->headers->get('Retry-After')],
                ['laravel' => $this->get('/laravel'), 'native' => $this->get('/native')]),
        );
    }

    /**
     * On the real clock, with no test now: the same four requests agree on
     * status, X-RateLimit-Limit and X-RateLimit-Remaining. Retry-After is
     * not a fixed number here (it depends on when the requests ran), so each
     * side's is checked against its own stored window: Laravel's
     * X-RateLimit-Reset is its hash's `end`, the module's Retry-After is
     * at least the key's PTTL read afterwards, rounded up, and at most the
     * window.
     */
    public function testOnTheRealClock(): void
    {
        $router = $this->app()['router'];
        $router->aliasMiddleware('throttle.redis', ThrottleRequestsWithRedis::class);
        $router->get('/laravel', fn () => 'ok')->middleware('throttle.redis:3,1');
        $router->get('/native', fn () => 'ok')->middleware('throttle.native:3,1');
        $seen = ['laravel' => [], 'native' => []];
        $last = [];
        foreach (range(1, 4) as $i) {
            foreach (['laravel', 'native'] as $route) {
                $response = $this->get("/$route");
                $headers = self::limitHeaders($response);
                $last[$route] = $headers;
                unset($headers['Retry-After'], $headers['X-RateLimit-Reset']);
                $seen[$route][] = [$response->getStatusCode(), $headers];
            }
        }
        $this->assertSame($seen['laravel'], $seen['native']);
        $this->assertSame([200, 200, 200, 429], array_column($seen['native'], 0));

        $redis = $this->server->client();
        $key = sha1('|127.0.0.1');
        $this->assertSame($redis->hGet($key, 'end'), $last['laravel']['X-RateLimit-Reset']);
        $this->assertLessThanOrEqual(60, (int) $last['laravel']['Retry-After']);
        $retryAfter = (int) $last['native']['Retry-After'];
        $this->assertGreaterThanOrEqual(intdiv($redis->pttl('throttle:' . $key) + 999, 1000), $retryAfter);
        $this->assertLessThanOrEqual(60, $retryAfter);
    }
}
