<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Auth\GenericUser;
use Illuminate\Cache\RateLimiting\Limit;
use Illuminate\Http\Exceptions\ThrottleRequestsException;
use Illuminate\Http\Request;
use Illuminate\Http\Response;
use Illuminate\Support\Facades\RateLimiter;
use RedisThrottle\Laravel\Tests\Support\TestCase;

/** `throttle.native:name` with limiters defined by `RateLimiter::for()`. */
final class NamedLimiterTest extends TestCase
{
    /** @dataProvider clients */
    public function testPerUserLimit(string $client): void
    {
        $this->app($client)['router']->get('/api', fn () => 'ok')->middleware('throttle.native:api');
        RateLimiter::for('api', fn (Request $request) => Limit::perMinute(2)->by($request->user()->id));
        [$alice, $bob] = [new GenericUser(['id' => 1]), new GenericUser(['id' => 2])];

        $this->setClock(0);
        $this->assertSame(['X-RateLimit-Limit' => '2', 'X-RateLimit-Remaining' => '1'], self::limitHeaders($this->get('/api', '127.0.0.1', $alice)));
        $this->assertSame('0', $this->get('/api', '127.0.0.1', $alice)->headers->get('X-RateLimit-Remaining'));
        $this->setClock(20);
        $response = $this->get('/api', '127.0.0.1', $alice);
        $this->assertSame(429, $response->getStatusCode());
        $this->assertInstanceOf(ThrottleRequestsException::class, $this->rendered);
        $this->assertSame('40', $response->headers->get('Retry-After'));
        $this->assertSame(200, $this->get('/api', '127.0.0.1', $bob)->getStatusCode());

        // Laravel's key for a named limit, md5(name . by), behind the hash tag {name}.
        $this->assertSame('thr-fixed', $this->server->type('throttle:{api}:' . md5('api1')));
        $this->assertSame('thr-fixed', $this->server->type('throttle:{api}:' . md5('api2')));
    }

    /**
     * Several limits in one THROTTLE.ALL: a request is admitted only if every
     * limit admits it, and a refused request consumes none of them.
     *
     * @dataProvider clients
     */
    public function testSeveralLimitsAllOrNothing(string $client): void
    {
        $this->app($client)['router']->get('/upload', fn () => 'ok')->middleware('throttle.native:uploads');
        RateLimiter::for('uploads', fn (Request $request) => [
            Limit::perMinute(3),                              // everyone together
            Limit::perMinute(2)->by($request->user()->id),    // each user
        ]);
        [$alice, $bob] = [new GenericUser(['id' => 1]), new GenericUser(['id' => 2])];

        $this->setClock(0);
        $statuses = [];
        foreach ([$alice, $alice, $alice, $alice, $bob, $bob] as $user) {
            $statuses[] = $this->get('/upload', '127.0.0.1', $user)->getStatusCode();
        }
        // Alice's refused requests take nothing from the shared limit, so Bob
        // still gets its third unit.
        $this->assertSame([200, 200, 429, 429, 200, 429], $statuses);
        // One THROTTLE.ALL per request, no other THROTTLE command.
        $stats = $this->server->client()->rawCommand('INFO', 'throttle');
        $this->assertStringContainsString('throttle_all:calls=6,admitted=3,limited=3', $stats);
        $this->assertStringContainsString('throttle_fixed:calls=0,', $stats);
        $this->assertSame(0, $this->server->client()->rawCommand('THROTTLE.FIXED', 'throttle:{uploads}:' . md5('uploads'), 3, 60, 'COST', 0, 'AT', self::T0 * 1_000_000)[2]);

        // The headers show the tighter limit; a 429 names the first limit that refused.
        $this->setClock(30);
        $this->assertSame([
            'X-RateLimit-Limit' => '3',
            'X-RateLimit-Remaining' => '0',
            'Retry-After' => '30',
            'X-RateLimit-Reset' => (string) (self::T0 + 60),
        ], self::limitHeaders($this->get('/upload', '127.0.0.1', new GenericUser(['id' => 3]))));

        $this->setClock(60);
        $response = $this->get('/upload', '127.0.0.1', $alice);
        $this->assertSame(['X-RateLimit-Limit' => '2', 'X-RateLimit-Remaining' => '1'], self::limitHeaders($response));
    }

    public function testRetryAfterIsWhenEveryLimitAdmits(): void
    {
        $this->app()['router']->get('/report', fn () => 'ok')->middleware('throttle.native:reports');
        RateLimiter::for('reports', fn () => [Limit::perMinute(1)->by('m'), Limit::perHour(1)->by('h')]);
        $this->setClock(0);
        $this->get('/report');
        $this->setClock(30);
        // The minute admits again at 60 s, the hour at 3600 s: the request as
        // a whole at 3600 s. X-RateLimit-Limit is the first refusing limit's.
        $response = $this->get('/report');
        $this->assertSame(429, $response->getStatusCode());
        $this->assertSame(['1', '3570'], [$response->headers->get('X-RateLimit-Limit'), $response->headers->get('Retry-After')]);
    }

    public function testCustomResponseGetsTheHeaders(): void
    {
        $this->app()['router']->get('/login', fn () => 'ok')->middleware('throttle.native:login');
        RateLimiter::for('login', fn (Request $request) => Limit::perMinute(1)->by($request->ip())
            ->response(fn (Request $request, array $headers) => new Response('Slow down', 429, $headers + ['X-Custom' => 'yes'])));
        $this->setClock(0);
        $this->get('/login');
        $this->setClock(1);
        $response = $this->get('/login');
        $this->assertSame([429, 'Slow down', 'yes', '59'], [
            $response->getStatusCode(), $response->getContent(),
            $response->headers->get('X-Custom'), $response->headers->get('Retry-After'),
        ]);
    }

    public function testUnlimitedAndResponseLimitersAreLaravels(): void
    {
        $this->app()['router']->get('/free', fn () => 'ok')->middleware('throttle.native:free');
        $this->app['router']->get('/closed', fn () => 'ok')->middleware('throttle.native:closed');
        RateLimiter::for('free', fn () => Limit::none());
        RateLimiter::for('closed', fn () => new Response('closed', 503));
        foreach (range(1, 3) as $i) {
            $this->assertSame(200, $this->get('/free')->getStatusCode());
        }
        $this->assertSame(503, $this->get('/closed')->getStatusCode());
        $this->assertSame(0, $this->server->client()->dbSize());
    }

    public function testIetfFieldsNameEachLimit(): void
    {
        $this->app('phpredis', ['ietf_headers' => true])['router']->get('/x', fn () => 'ok')->middleware('throttle.native:api');
        RateLimiter::for('api', fn () => [Limit::perMinute(10), Limit::perHour(100)->by('h')]);
        $this->setClock(0);
        $response = $this->get('/x');
        $this->assertSame('"api-1";q=10;w=60, "api-2";q=100;w=3600', $response->headers->get('RateLimit-Policy'));
        $this->assertSame('"api-1";r=9;t=60, "api-2";r=99;t=3600', $response->headers->get('RateLimit'));
    }
}
