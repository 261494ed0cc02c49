<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Auth\Events\Lockout;
use Illuminate\Cache\RateLimiter;
use Illuminate\Contracts\Http\Kernel as HttpKernelContract;
use Illuminate\Foundation\Application;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\Redis;
use InvalidArgumentException;
use RedisThrottle\Laravel\LoginThrottle;
use RedisThrottle\Laravel\Tests\Support\LaravelApp;
use RedisThrottle\Laravel\Tests\Support\TestCase;
use Symfony\Component\HttpFoundation\Response;

/**
 * LoginThrottle: failed logins only, Laravel's RateLimiter methods, and the
 * lockout "15 minutes after 5 failed logins" (docs/penalties.md's recipe),
 * on its own and through the test app's login route (LoginController, as
 * ThrottlesLogins runs one). Time is Carbon's test now, sent as AT.
 */
final class LoginThrottleTest extends TestCase
{
    /**
     * Without a lockout it answers as Laravel's RateLimiter, method for
     * method, at the same instants: 5 failures lock the key until the
     * window that the first opened ends.
     *
     * @dataProvider clients
     */
    public function testWithoutALockoutTheSameAnswersAsLaravelsRateLimiter(string $client): void
    {
        $this->app($client);
        $limiters = ['laravel' => $this->app->make(RateLimiter::class), 'native' => new LoginThrottle(5, 60)];
        $steps = [
            [0, 'hit'], [1, 'hit'], [2, 'tooManyAttempts'], [2, 'hit'], [3, 'hit'], [4, 'tooManyAttempts'], [4, 'hit'],
            [5, 'tooManyAttempts'], [5, 'attempts'], [5, 'remaining'], [5, 'availableIn'],
            // A failure counted while locked (the caller did not look first) counts, and changes no time.
            [6, 'hit'], [6, 'attempts'],
            [30, 'tooManyAttempts'], [30, 'availableIn'], [59, 'tooManyAttempts'], [59, 'availableIn'],
            // (Laravel's array cache keeps its items through their last second: not compared at 60.)
            [61, 'tooManyAttempts'], [61, 'attempts'], [61, 'remaining'],
            [62, 'hit'], [63, 'hit'], [63, 'attempts'], [64, 'clear'], [64, 'attempts'], [64, 'tooManyAttempts'],
        ];
        $seen = ['laravel' => [], 'native' => []];
        foreach ($steps as [$second, $method]) {
            $this->setClock($second);
            foreach ($limiters as $name => $limiter) {
                $result = match ($method) {
                    'tooManyAttempts', 'remaining' => $limiter->$method('alice|10.0.0.1', 5),
                    'hit' => $limiter->hit('alice|10.0.0.1', 60),
                    default => $limiter->$method('alice|10.0.0.1'),
                };
                $seen[$name][] = [$second, $method, is_numeric($result) ? (int) $result : $result];
            }
        }
        $this->assertSame($seen['laravel'], $seen['native']);
        $this->assertSame([
            [5, 'tooManyAttempts', true], [5, 'attempts', 5], [5, 'remaining', 0], [5, 'availableIn', 55],
        ], array_slice($seen['native'], 7, 4));
    }

    /**
     * With a lockout: the fifth failure in 15 minutes locks the key for 15
     * minutes from that failure; a failure counted during it does not
     * extend it; then the key is fresh.
     *
     * @dataProvider clients
     */
    public function testTheFifthFailureLocksTheKeyOutFor15Minutes(string $client): void
    {
        $this->app($client);
        $throttle = new LoginThrottle(maxAttempts: 5, decaySeconds: 15 * 60, lockoutSeconds: 15 * 60);
        $key = 'alice@example.com|10.0.0.1';
        $seen = [];
        foreach ([0, 1, 2, 3, 4] as $second) {
            $this->setClock($second);
            $seen[] = [$throttle->tooManyAttempts($key), $throttle->hit($key), $throttle->remaining($key)];
        }
        $this->assertSame([[false, 1, 4], [false, 2, 3], [false, 3, 2], [false, 4, 1], [false, 5, 0]], $seen);

        $this->setClock(5);
        $this->assertSame([true, 5, 0, 899], [$throttle->tooManyAttempts($key), $throttle->attempts($key), $throttle->remaining($key), $throttle->availableIn($key)]);
        $this->assertSame([899_000, 5], [$throttle->reply->bannedMs, $throttle->reply->hits]);
        $this->setClock(100);
        $this->assertSame(6, $throttle->hit($key), 'a failure during the lockout counts');
        $this->assertSame(804, $throttle->availableIn($key), 'and leaves the lockout as it is');
        $this->setClock(903.5);
        $this->assertSame([true, 1], [$throttle->tooManyAttempts($key), $throttle->availableIn($key)]);
        $this->setClock(904);
        $this->assertSame([false, 0, 5, 0], [$throttle->tooManyAttempts($key), $throttle->attempts($key), $throttle->remaining($key), $throttle->availableIn($key)]);
        $this->assertSame(1, $throttle->hit($key));
        $this->assertSame('thr-fixed', $this->server->type("throttle:login:$key"));
    }

    /** Failures further apart than the window never lock the key: the count starts again. */
    public function testFailuresSpreadOverMoreThanTheWindowDoNotLock(): void
    {
        $this->app();
        $throttle = new LoginThrottle(5, 15 * 60, 15 * 60);
        foreach ([0, 1, 2, 3, 900, 901, 902, 903] as $second) {
            $this->setClock($second);
            $this->assertFalse($throttle->tooManyAttempts('k'), "at $second s");
            $throttle->hit('k');
        }
        $this->assertSame([4, false], [$throttle->attempts('k'), $throttle->tooManyAttempts('k')]);
    }

    /** maxAttempts 1: each failure locks the key at once, from that failure. */
    public function testOneAttemptLocksAtTheFirstFailure(): void
    {
        $this->app();
        $throttle = new LoginThrottle(1, 60, 300);
        $this->setClock(0);
        $this->assertFalse($throttle->tooManyAttempts('k'));
        $this->assertSame(1, $throttle->hit('k'));
        $this->setClock(10);
        $this->assertSame([true, 1, 290], [$throttle->tooManyAttempts('k'), $throttle->attempts('k'), $throttle->availableIn('k')]);
        $this->setClock(300);
        $this->assertFalse($throttle->tooManyAttempts('k'));
    }

    /** lockout(): a key locked now, whatever it counts; clear() lifts it. */
    public function testLockoutNowAndClear(): void
    {
        $this->app();
        $throttle = new LoginThrottle(5, 60);
        $this->setClock(0);
        $throttle->lockout('mallory', 3600);
        $this->assertSame([true, 3600, 0], [$throttle->tooManyAttempts('mallory'), $throttle->availableIn('mallory'), $throttle->remaining('mallory')]);
        $throttle->clear('mallory');
        $this->assertSame([false, 0], [$throttle->tooManyAttempts('mallory'), $this->server->client()->dbSize()]);
    }

    /** Keys: the connection's prefix, the config's prefix, `login:`, the key; clear() deletes that key. */
    public function testKeysCarryTheConnectionAndPackagePrefixes(): void
    {
        $this->app('predis', ['prefix' => 'rl:'], ['options' => ['prefix' => 'app_']]);
        $this->setClock(0);
        $throttle = new LoginThrottle(5, 60, 60);
        $throttle->hit('bob|10.0.0.2');
        $this->assertSame(['app_rl:login:bob|10.0.0.2'], $this->server->client()->keys('*'));
        $throttle->clear('bob|10.0.0.2');
        $this->assertSame(0, $this->server->client()->dbSize());
        $other = new LoginThrottle(5, 60, null, Redis::connection(), 'failed:');
        $other->hit('x');
        $this->assertSame(['app_failed:x'], $this->server->client()->keys('*'));
    }

    public static function badArguments(): array
    {
        return [
            'maxAttempts 0' => [fn () => new LoginThrottle(0), 'LoginThrottle: maxAttempts must be at least 1; got 0'],
            'decaySeconds 0' => [fn () => new LoginThrottle(5, 0), 'LoginThrottle: decaySeconds must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 0'],
            'lockoutSeconds -1' => [fn () => new LoginThrottle(5, 60, -1), 'LoginThrottle: lockoutSeconds must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got -1'],
            'tooManyAttempts(k, 0)' => [fn () => (new LoginThrottle())->tooManyAttempts('k', 0), 'LoginThrottle->tooManyAttempts(): maxAttempts must be at least 1; got 0'],
            'hit(k, 0)' => [fn () => (new LoginThrottle())->hit('k', 0), 'LoginThrottle->hit(): decaySeconds must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 0'],
            'lockout(k) without a length' => [fn () => (new LoginThrottle())->lockout('k'), 'LoginThrottle->lockout(): lockoutSeconds is needed, since the throttle has no lockout of its own'],
        ];
    }

    /** @dataProvider badArguments */
    public function testBadArgumentsGetAnErrorNamingThem(callable $make, string $message): void
    {
        $this->app();
        try {
            $make();
            $this->fail('no exception');
        } catch (InvalidArgumentException $e) {
            $this->assertSame($message, $e->getMessage());
        }
        $this->assertSame(0, $this->server->client()->dbSize());
    }

    /**
     * The login route (LoginController): four failures answer 422, the
     * fifth too and locks alice out from this IP for 15 minutes: even her
     * right password answers 429 with Retry-After and Laravel's Lockout
     * event, and a retry does not extend it. Bob, and alice from another
     * address, log in meanwhile. When the lockout ends she logs in, and the
     * success forgets her key.
     */
    public function testTheLoginRouteLocksOutAfterFiveFailures(): void
    {
        $app = $this->loginApp();
        $lockouts = 0;
        $app['events']->listen(Lockout::class, function () use (&$lockouts) {
            $lockouts++;
        });
        $seen = [];
        foreach ([0, 1, 2, 3, 4] as $second) {
            $this->setClock($second);
            $seen[] = $this->login($app, 'alice@example.com', 'wrong')->getStatusCode();
        }
        $this->assertSame([422, 422, 422, 422, 422], $seen);

        $this->setClock(5);
        $locked = $this->login($app, 'alice@example.com', 'alice-secret');
        $this->assertSame([429, '899'], [$locked->getStatusCode(), $locked->headers->get('Retry-After')]);
        $this->assertSame('Too many login attempts. Please try again in 899 seconds.', json_decode((string) $locked->getContent(), true)['message']);
        $this->assertSame(1, $lockouts);
        $this->assertSame(200, $this->login($app, 'bob@example.com', 'bob-secret')->getStatusCode());
        $this->assertSame(200, $this->login($app, 'alice@example.com', 'alice-secret', '10.0.0.2')->getStatusCode());

        $this->setClock(600);
        $retried = $this->login($app, 'alice@example.com', 'wrong');
        $this->assertSame([429, '304'], [$retried->getStatusCode(), $retried->headers->get('Retry-After')], 'not tried, and the lockout unchanged');
        $this->setClock(903);
        $this->assertSame('1', $this->login($app, 'alice@example.com', 'alice-secret')->headers->get('Retry-After'));
        $this->setClock(904);
        $in = $this->login($app, 'alice@example.com', 'alice-secret');
        $this->assertSame([200, '{"user":"alice@example.com"}'], [$in->getStatusCode(), $in->getContent()]);
        $this->assertSame(0, $this->server->client()->dbSize(), 'a success forgets the key');
        $this->assertSame(3, $lockouts);
    }

    /** A success between failures starts the count again: 4 + 4 failures never lock. */
    public function testASuccessForgetsTheFailures(): void
    {
        $app = $this->loginApp();
        $seen = [];
        foreach ([[0, 'wrong'], [1, 'wrong'], [2, 'wrong'], [3, 'wrong'], [4, 'alice-secret'],
                  [5, 'wrong'], [6, 'wrong'], [7, 'wrong'], [8, 'wrong'], [9, 'alice-secret']] as [$second, $password]) {
            $this->setClock($second);
            $seen[] = $this->login($app, 'alice@example.com', $password)->getStatusCode();
        }
        $this->assertSame([422, 422, 422, 422, 200, 422, 422, 422, 422, 200], $seen);
    }

    /**
     * ThrottlesLogins' defaults (5 failures a minute, no lockout): the route
     * on the package answers as the same route on Laravel's RateLimiter,
     * status and Retry-After, at the same instants.
     */
    public function testWithoutALockoutTheRouteAnswersAsOnLaravelsRateLimiter(): void
    {
        $app = $this->loginApp();
        $requests = [[0, 'wrong'], [1, 'wrong'], [2, 'wrong'], [3, 'wrong'], [4, 'wrong'],
            [5, 'alice-secret'], [30, 'wrong'], [59, 'alice-secret'], [61, 'wrong'], [62, 'alice-secret'], [63, 'wrong']];
        $seen = ['/login/laravel' => [], '/login/no-lockout' => []];
        foreach ($requests as [$second, $password]) {
            $this->setClock($second);
            foreach (array_keys($seen) as $uri) {
                $response = $this->login($app, 'alice@example.com', $password, '10.0.0.1', $uri);
                $seen[$uri][] = [$second, $response->getStatusCode(), $response->headers->get('Retry-After')];
            }
        }
        $this->assertSame($seen['/login/laravel'], $seen['/login/no-lockout']);
        $this->assertSame([[5, 429, '55'], [30, 429, '30'], [59, 429, '1'], [61, 422, null]], array_slice($seen['/login/no-lockout'], 5, 4));
    }

    /** The test app (tests/Support/App), one for the test's requests; Laravel's limiter counts in its array cache. */
    private function loginApp(): Application
    {
        $app = LaravelApp::make($this->server->port, config: ['cache' => ['default' => 'array']]);
        $app->make(HttpKernelContract::class)->bootstrap();
        return $app;
    }

    private function login(Application $app, string $email, string $password, string $ip = '10.0.0.1', string $uri = '/login'): Response
    {
        $request = Request::create($uri, 'POST', ['email' => $email, 'password' => $password], [], [], [
            'REMOTE_ADDR' => $ip,
            'HTTP_ACCEPT' => 'application/json',
        ]);
        $kernel = $app->make(HttpKernelContract::class);
        $response = $kernel->handle($request);
        $kernel->terminate($request, $response);
        return $response;
    }
}
