<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Auth\GenericUser;
use Illuminate\Cache\RateLimiting\Limit;
use Illuminate\Http\Request;
use Illuminate\Routing\Middleware\ThrottleRequests as LaravelThrottleRequests;
use Illuminate\Support\Facades\RateLimiter;
use RedisThrottle\Laravel\Tests\Support\TestCase;

/**
 * Limiters and routes that Laravel's own ThrottleRequests (counting in the
 * cache) takes: the package answers the same requests at the same instants
 * with the same status and headers. Laravel's side reads Carbon's test now,
 * as the package does (sent as AT).
 */
final class SameAsLaravelTest extends TestCase
{
    /**
     * Sends the same requests to Laravel's middleware and the package's, at
     * T0 + each second; returns what each answered, and asserts they agree.
     *
     * @param list<float> $seconds
     * @return list<array{0: int, 1: array<string, string>}>
     */
    private function bothAnswer(string $middleware, array $seconds, ?object $user = null, bool $statusOnly = false): array
    {
        $router = $this->app['router'];
        $router->get('/laravel', fn () => 'ok')->middleware(LaravelThrottleRequests::class . ':' . $middleware);
        $router->get('/native', fn () => 'ok')->middleware('throttle.native:' . $middleware);
        $seen = ['laravel' => [], 'native' => []];
        foreach ($seconds as $second) {
            $this->setClock($second);
            foreach (['laravel', 'native'] as $route) {
                $response = $this->get("/$route", '127.0.0.1', $user);
                $seen[$route][] = $statusOnly ? $response->getStatusCode() : [$response->getStatusCode(), self::limitHeaders($response)];
            }
        }
        $this->assertSame($seen['laravel'], $seen['native']);
        return $seen['native'];
    }

    public static function noLimits(): array
    {
        return ['[]' => [fn () => []], 'null' => [fn () => null]];
    }

    /**
     * A named limiter with no limit lets every request through, without
     * headers.
     *
     * @dataProvider noLimits
     */
    public function testALimiterWithNoLimitLimitsNothing(callable $limits): void
    {
        $this->app();
        RateLimiter::for('open', $limits);
        $this->assertSame(array_fill(0, 3, [200, []]), $this->bothAnswer('open', [0, 0, 0]));
        $this->assertSame(0, $this->server->client()->dbSize());
    }

    /**
     * Two limits without `by()` name the same key: Laravel hits it twice per
     * request, so the first limit (3) refuses the third request, whose count
     * is 4. The window is the first limit's, a minute. (At 60 s exactly
     * Laravel's array store still holds the key: 61 s.)
     *
     * @dataProvider clients
     */
    public function testLimitsWithoutByShareOneKey(string $client): void
    {
        $this->app($client);
        RateLimiter::for('uploads', fn () => [Limit::perMinute(3), Limit::perHour(5)]);
        // The headers are the limit with the least remaining: the first,
        // which Laravel's count of 4 puts at -1.
        $this->assertSame([
            [200, ['X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => '1']],
            [200, ['X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => '-1']],
            [429, ['X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => '0', 'Retry-After' => '60', 'X-RateLimit-Reset' => (string) (self::T0 + 60)]],
            [429, ['X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => '0', 'Retry-After' => '30', 'X-RateLimit-Reset' => (string) (self::T0 + 60)]],
            [200, ['X-RateLimit-Limit' => '3', 'X-RateLimit-Remaining' => '1']],
        ], $this->bothAnswer('uploads', [0, 0, 0, 30, 61]));
        // One key, counting requests: 2 a window.
        $this->assertSame(['throttle:{uploads}:' . md5('uploads')], $this->server->client()->keys('*'));
    }

    /** The shared key beside a key of its own; the later limit of the pair refuses first. */
    public function testASharedKeyBesideAnother(): void
    {
        $this->app();
        RateLimiter::for('api', fn (Request $request) => [
            Limit::perMinute(5),
            Limit::perMinute(10)->by($request->user()->id),
            Limit::perMinute(2),
        ]);
        $answers = $this->bothAnswer('api', [0, 0, 0], new GenericUser(['id' => 7]));
        $this->assertSame([200, 429, 429], array_column($answers, 0));
        $this->assertSame('2', $answers[1][1]['X-RateLimit-Limit']);
    }

    /** Limits on one key that can never all pass: every request is refused, as in Laravel. */
    public function testASharedKeyThatNeverAdmits(): void
    {
        $this->app();
        RateLimiter::for('closed', fn () => [Limit::perMinute(1), Limit::perMinute(1)]);
        $this->assertSame([
            [429, ['X-RateLimit-Limit' => '1', 'X-RateLimit-Remaining' => '0', 'Retry-After' => '60', 'X-RateLimit-Reset' => (string) (self::T0 + 60)]],
        ], $this->bothAnswer('closed', [0]));
        $this->assertSame(0, $this->server->client()->dbSize());
    }

    /** `Limit::none()` in a list is a limit of PHP_INT_MAX: it never refuses. */
    public function testLimitNoneInAList(): void
    {
        $this->app();
        RateLimiter::for('mixed', fn () => [Limit::none(), Limit::perMinute(2)->by('x')]);
        $this->assertSame([200, 200, 429], array_column($this->bothAnswer('mixed', [0, 0, 0]), 0));
        $this->assertSame(2, $this->server->client()->dbSize());
    }

    /**
     * A decay beyond the module's longest period (3650 days) is sent as
     * that; Retry-After says so.
     */
    public function testADecayOfCenturies(): void
    {
        $this->app();
        $this->assertSame([200, 200, 429], $this->bothAnswer('2,100000000', [0, 0, 0], null, true));
        $this->assertSame((string) (3650 * 86_400), $this->get('/native')->headers->get('Retry-After'));
    }
}
