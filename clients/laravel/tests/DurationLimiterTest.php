<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Illuminate\Contracts\Redis\LimiterTimeoutException;
use Illuminate\Redis\Limiters\DurationLimiter as LaravelDurationLimiter;
use Illuminate\Support\Facades\Redis;
use RedisThrottle\Laravel\DurationLimiter;
use RedisThrottle\Laravel\Tests\Support\TestCase;
use ReflectionClass;
use ReflectionMethod;
use ReflectionProperty;

/** The package's DurationLimiter beside Laravel's, on the same calls at the same instants. */
final class DurationLimiterTest extends TestCase
{
    /** @dataProvider clients */
    public function testSameAnswersAsLaravels(string $client): void
    {
        $this->app($client);
        $connection = Redis::connection();
        $limiters = [
            'laravel' => new LaravelDurationLimiter($connection, 'laravel', 2, 10),
            'native' => new DurationLimiter($connection, 'native', 2, 10),
        ];
        $seen = ['laravel' => [], 'native' => []];
        // Whole seconds: Laravel's window starts at the whole second (README).
        foreach ([[0, 'acquire'], [0, 'acquire'], [3, 'acquire'], [11, 'acquire'], [12, 'clear'], [12, 'acquire']] as [$second, $method]) {
            $this->setClock($second);
            foreach ($limiters as $name => $limiter) {
                $result = $limiter->$method();
                $seen[$name][] = [$second, $method, $result, $limiter->decaysAt === null ? null : (int) $limiter->decaysAt, $limiter->remaining];
            }
        }
        $this->assertSame($seen['laravel'], $seen['native']);
        $this->assertSame([
            [0, 'acquire', true, self::T0 + 10, 1],
            [0, 'acquire', true, self::T0 + 10, 0],
            [3, 'acquire', false, self::T0 + 10, 0],
            [11, 'acquire', true, self::T0 + 21, 1],
        ], array_slice($seen['native'], 0, 4));

        // tooManyAttempts() looks without counting: the window opened at
        // 12 s is full after a second call.
        $this->setClock(15);
        $limiters['native']->acquire();
        $this->assertSame([true, self::T0 + 22, 0], [$limiters['native']->tooManyAttempts(), $limiters['native']->decaysAt, $limiters['native']->remaining]);

        // tooManyAttempts() on an idle key: Laravel's script answers its two
        // values the other way round (decaysAt 0, remaining a Unix time).
        $this->setClock(30);
        $this->assertSame([false, 0, self::T0 + 40], [$limiters['laravel']->tooManyAttempts(), (int) $limiters['laravel']->decaysAt, (int) $limiters['laravel']->remaining]);
        $this->assertSame([false, self::T0 + 30, 2], [$limiters['native']->tooManyAttempts(), $limiters['native']->decaysAt, $limiters['native']->remaining]);
    }

    /** @dataProvider clients */
    public function testBlockThrowsLaravelsExceptionWithTheReply(string $client): void
    {
        $this->app($client);
        $this->setClock(0);
        $limiter = new DurationLimiter(Redis::connection(), 'job', 1, 60, 'token', 1, 'rl:');
        $this->assertSame('ran', $limiter->block(0, fn () => 'ran'));
        try {
            $limiter->block(0, fn () => 'ran');
            $this->fail('no exception');
        } catch (LimiterTimeoutException $e) {
            $this->assertSame([false, 60_000], [$e->reply->allowed, $e->reply->retryAfterMs]);
        }
        $this->assertSame('thr-token', $this->server->type('rl:job'));
        $limiter->clear();
        $this->assertSame(0, $this->server->client()->dbSize());
    }

    public function testHasEveryPublicMemberOfLaravels(): void
    {
        $members = fn (string $class) => array_merge(
            array_map(fn (ReflectionMethod $m) => $m->getName() . '()', (new ReflectionClass($class))->getMethods(ReflectionMethod::IS_PUBLIC)),
            array_map(fn (ReflectionProperty $p) => '$' . $p->getName(), (new ReflectionClass($class))->getProperties(ReflectionProperty::IS_PUBLIC)),
        );
        $this->assertSame([], array_values(array_diff($members(LaravelDurationLimiter::class), $members(DurationLimiter::class))));
    }
}
