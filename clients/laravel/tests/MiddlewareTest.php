<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Auth\GenericUser;
use Illuminate\Http\Exceptions\ThrottleRequestsException;
use InvalidArgumentException;
use RedisThrottle\Laravel\Tests\Support\TestCase;

/** `throttle.native:attempts,minutes[,prefix]` on a route, through Laravel's router. */
final class MiddlewareTest extends TestCase
{
    /** @dataProvider clients */
    public function testRequestsUpToTheLimitThen429WithLaravelsHeaders(string $client): void
    {
        $this->app($client)['router']->get('/reports', fn () => 'ok')->middleware('throttle.native:3,1');

        $this->setClock(0);
        foreach ([2, 1, 0] as $remaining) {
            $response = $this->get('/reports');
            $this->assertSame(200, $response->getStatusCode());
            $this->assertSame('ok', $response->getContent());
            $this->assertSame(['X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => (string) $remaining], self::limitHeaders($response));
        }

        // 10.5 s into the 60 s window: refused until it ends, 49.5 s later.
        $this->setClock(10.5);
        $response = $this->get('/reports');
        $this->assertInstanceOf(ThrottleRequestsException::class, $this->rendered);
        $this->assertSame(429, $response->getStatusCode());
        $this->assertSame('Too Many Attempts.', json_decode($response->getContent(), true)['message']);
        $this->assertSame([
            'X-RateLimit-Limit' => '3',
            'X-RateLimit-Remaining' => '0',
            'Retry-After' => '50',
            'X-RateLimit-Reset' => (string) (self::T0 + 60),
        ], self::limitHeaders($response));

        // Refused calls count for nothing: the same answer a moment later.
        $this->setClock(59.999);
        $this->assertSame(['429', '1'], [(string) $this->get('/reports')->getStatusCode(), $this->get('/reports')->headers->get('Retry-After')]);

        // The window opened at 0 s exactly and ends at 60 s.
        $this->setClock(60);
        $response = $this->get('/reports');
        $this->assertSame(200, $response->getStatusCode());
        $this->assertSame('2', $response->headers->get('X-RateLimit-Remaining'));
    }

    /** @dataProvider clients */
    public function testEachIpAndEachUserHasItsOwnLimitAsInLaravel(string $client): void
    {
        $this->app($client)['router']->get('/a', fn () => 'a')->middleware('throttle.native:1,1');
        $this->app['router']->get('/b', fn () => 'b')->middleware('throttle.native:1,1');
        $this->setClock(0);

        $this->assertSame(200, $this->get('/a', '127.0.0.1')->getStatusCode());
        // Laravel's signature is the route's domain and the IP, not the path.
        $this->assertSame(429, $this->get('/b', '127.0.0.1')->getStatusCode());
        $this->assertSame(200, $this->get('/a', '127.0.0.2')->getStatusCode());
        // A signed-in user is limited by their id, whatever the IP.
        $alice = new GenericUser(['id' => 7]);
        $this->assertSame(200, $this->get('/a', '127.0.0.1', $alice)->getStatusCode());
        $this->assertSame(429, $this->get('/a', '127.0.0.3', $alice)->getStatusCode());

        $keys = $this->server->client()->keys('*');
        sort($keys);
        $expected = ['throttle:' . sha1('7'), 'throttle:' . sha1('|127.0.0.1'), 'throttle:' . sha1('|127.0.0.2')];
        sort($expected);
        $this->assertSame($expected, $keys);
    }

    /** @dataProvider clients */
    public function testPrefixArgumentAndConnectionPrefixAreInTheKey(string $client): void
    {
        $this->app($client, [], ['options' => ['prefix' => 'shop_']])['router']
            ->get('/login', fn () => 'ok')->middleware('throttle.native:1,1,login');
        $this->app['router']->get('/search', fn () => 'ok')->middleware('throttle.native:1,1');
        $this->setClock(0);

        $this->assertSame(200, $this->get('/login')->getStatusCode());
        $this->assertSame(200, $this->get('/search')->getStatusCode());
        $this->assertSame(429, $this->get('/login')->getStatusCode());

        $redis = $this->server->client();
        $this->assertSame('thr-fixed', $this->server->type('shop_throttle:login' . sha1('|127.0.0.1')));
        $this->assertSame('thr-fixed', $this->server->type('shop_throttle:' . sha1('|127.0.0.1')));
        $this->assertSame(2, $redis->dbSize());
    }

    public function testAFractionOfAMinute(): void
    {
        $this->app()['router']->get('/ping', fn () => 'ok')->middleware('throttle.native:1,0.5');
        $this->setClock(0);
        $this->get('/ping');
        $this->setClock(29.999);
        $this->assertSame('1', $this->get('/ping')->headers->get('Retry-After'));
        $this->setClock(30);
        $this->assertSame(200, $this->get('/ping')->getStatusCode());
    }

    public static function algorithms(): array
    {
        return [
            // algorithm, key type, X-RateLimit-Remaining after 3 requests at 0 s and one at 30 s
            'fixed' => ['fixed', 'thr-fixed', ['2', '1', '0', '429']],
            'sliding' => ['sliding', 'thr-slide', ['2', '1', '0', '429']],
            'sliding-exact' => ['sliding-exact', 'thr-exact', ['2', '1', '0', '429']],
            // refills 3 a minute: one token back after 20 s
            'token' => ['token', 'thr-token', ['2', '1', '0', '0']],
            // drains 3 a minute: one unit out after 20 s
            'leaky' => ['leaky', 'thr-leaky', ['2', '1', '0', '0']],
        ];
    }

    /** @dataProvider algorithms */
    public function testTheConfiguredAlgorithm(string $algorithm, string $type, array $expected): void
    {
        $this->app('phpredis', ['algorithm' => $algorithm])['router']
            ->get('/x', fn () => 'ok')->middleware('throttle.native:3,1');
        $seen = [];
        foreach ([0, 0, 0, 30] as $seconds) {
            $this->setClock($seconds);
            $response = $this->get('/x');
            $seen[] = $response->getStatusCode() === 429 ? '429' : $response->headers->get('X-RateLimit-Remaining');
        }
        $this->assertSame($expected, $seen);
        $this->assertSame($type, $this->server->type('throttle:' . sha1('|127.0.0.1')));
    }

    public function testIetfRateLimitFieldsWhenEnabled(): void
    {
        $this->app('phpredis', ['ietf_headers' => true])['router']
            ->get('/api', fn () => 'ok')->middleware('throttle.native:2,1');
        $this->setClock(0);
        $this->assertSame([
            'X-RateLimit-Limit' => '2',
            'X-RateLimit-Remaining' => '1',
            'RateLimit-Policy' => '"default";q=2;w=60',
            'RateLimit' => '"default";r=1;t=60',
        ], self::limitHeaders($this->get('/api')));
        $this->get('/api');
        $this->setClock(45.2);
        $this->assertSame([
            'X-RateLimit-Limit' => '2',
            'X-RateLimit-Remaining' => '0',
            'Retry-After' => '15',
            'X-RateLimit-Reset' => (string) (self::T0 + 60),
            'RateLimit-Policy' => '"default";q=2;w=60',
            'RateLimit' => '"default";r=0;t=15',
        ], self::limitHeaders($this->get('/api')));
    }

    public function testNoIetfFieldsByDefault(): void
    {
        $this->app()['router']->get('/api', fn () => 'ok')->middleware('throttle.native:2,1');
        $this->assertFalse($this->get('/api')->headers->has('RateLimit'));
    }

    public static function badArguments(): array
    {
        return [
            'zero attempts' => ['throttle.native:0,1', [], "maxAttempts must be a positive integer; got '0'"],
            'an undefined limiter' => ['throttle.native:nope', [], "maxAttempts must be a positive integer; got '0'"],
            'zero minutes' => ['throttle.native:5,0', [], "decayMinutes must be a positive number; got '0'"],
            'minutes not a number' => ['throttle.native:5,soon', [], "decayMinutes must be a positive number; got 'soon'"],
            'an unknown algorithm' => ['throttle.native:5,1', ['algorithm' => 'gcra'], "throttle-native.algorithm must be one of fixed, sliding, sliding-exact, token, leaky; got 'gcra'"],
        ];
    }

    /** @dataProvider badArguments */
    public function testBadArgumentsGetAnErrorNamingThem(string $middleware, array $config, string $message): void
    {
        $this->app('phpredis', $config)['router']->get('/x', fn () => 'ok')->middleware($middleware);
        $this->assertSame(500, $this->get('/x')->getStatusCode());
        $this->assertInstanceOf(InvalidArgumentException::class, $this->rendered);
        $this->assertStringContainsString($message, $this->rendered->getMessage());
        $this->assertSame(0, $this->server->client()->dbSize());
    }
}
