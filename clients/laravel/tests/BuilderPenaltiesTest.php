<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests;

use Carbon\CarbonInterval;
use Illuminate\Redis\Events\CommandExecuted;
use Illuminate\Support\Facades\Redis;
use InvalidArgumentException;
use RedisThrottle\Laravel\DurationLimiter;
use RedisThrottle\Laravel\Penalties;
use RedisThrottle\Laravel\Reply;
use RedisThrottle\Laravel\ThrottleBuilder;
use RedisThrottle\Laravel\ThrottleTimeoutException;
use RedisThrottle\Laravel\Tests\Support\TestCase;

/**
 * `Redis::throttleNative()` with the module's penalties (docs/penalties.md):
 * ban(), renewBan(), backoff(), tally(), the reply's DETAIL fields in both
 * callbacks, block() on a banned key, and bad options. Time is Carbon's
 * test now (AT), except where a waiter needs the server's clock.
 */
final class BuilderPenaltiesTest extends TestCase
{
    /** The commands the connection sent, as Laravel's CommandExecuted events name them. */
    private array $sent = [];

    private function recordCommands(): void
    {
        Redis::enableEvents();
        $this->app['events']->listen(CommandExecuted::class, function (CommandExecuted $event) {
            $this->sent[] = array_merge(...array_map(fn ($p) => (array) $p, $event->parameters));
        });
    }

    /**
     * ban(900): the refusal that follows two admitted calls bans the key for
     * 15 minutes from that call; every call is refused meanwhile, though the
     * 60 s window has long moved on; then the key is fresh.
     *
     * @dataProvider clients
     */
    public function testABanRefusesEveryCallUntilItEnds(string $client): void
    {
        $this->app($client);
        $this->recordCommands();
        $outcome = function (float $second): array {
            $this->setClock($second);
            $builder = Redis::throttleNative('login')->allow(2)->every(60)->ban(900)->block(0);
            return $builder->then(
                fn () => ['ran', $builder->reply->hits, $builder->reply->bannedMs],
                fn (ThrottleTimeoutException $e) => ['refused', $e->reply->hits, $e->reply->bannedMs, $e->reply->retryAfterMs, $e->getMessage()],
            );
        };
        $this->assertSame(['ran', 1, 0], $outcome(0));
        $this->assertSame(['ran', 2, 0], $outcome(1));
        $this->assertSame(['refused', 2, 900_000, 900_000, 'rate limit: the key is banned for another 900000 ms'], $outcome(2));
        $this->assertSame(['refused', 2, 840_000, 840_000, 'rate limit: the key is banned for another 840000 ms'], $outcome(62));
        $this->assertSame(['refused', 2, 1, 1, 'rate limit: the key is banned for another 1 ms'], $outcome(901.999));
        $this->assertSame(['ran', 1, 0], $outcome(902));
        $this->assertSame(
            ['THROTTLE.FIXED', 'throttle:login', 2, '60000ms', 'AT', (self::T0 + 2) * 1_000_000, 'BAN', '900000ms', 'DETAIL'],
            $this->sent[2],
        );
    }

    /** @dataProvider clients */
    public function testRenewBanRestartsTheBanWithEachRefusal(string $client): void
    {
        $this->app($client);
        $waits = [];
        foreach ([0, 1, 20, 45, 76] as $second) {
            $this->setClock($second);
            $waits[] = Redis::throttleNative('api')->allow(1)->every(60)->ban(30)->renewBan()->block(0)
                ->then(fn () => 'ran', fn (ThrottleTimeoutException $e) => $e->reply->retryAfterMs);
        }
        // Without renewBan() the ban of second 1 would have ended at 31.
        $this->assertSame(['ran', 30_000, 30_000, 30_000, 'ran'], $waits);
    }

    /** backoff(35): each refusal during the ban doubles it, from that call, up to 35 s. */
    public function testBackoffDoublesTheBanUpToItsCap(): void
    {
        $this->app();
        $waits = [];
        foreach ([0, 1, 2, 3, 4, 5] as $second) {
            $this->setClock($second);
            $waits[] = Redis::throttleNative('b')->using('token')->allow(1)->every(60)->ban(10)->backoff(35)->block(0)
                ->then(fn () => 'ran', fn (ThrottleTimeoutException $e) => $e->reply->bannedMs);
        }
        $this->assertSame(['ran', 10_000, 20_000, 35_000, 35_000, 35_000], $waits);
    }

    /**
     * tally(): refused calls count against the limit all the same (as
     * Laravel's own limiter and fastify count them), up to the cap, and
     * the reply says how many the key counts: "403 past 3 + 2 hits".
     *
     * @dataProvider clients
     */
    public function testTallyCountsRefusedCallsUpToItsCap(string $client): void
    {
        $this->app($client);
        $seen = [];
        foreach ([0, 1, 2, 3, 4, 5, 6] as $second) {
            $this->setClock($second);
            $builder = Redis::throttleNative('t')->allow(3)->every(60)->tally(5)->block(0);
            $seen[] = $builder->then(
                fn () => 200,
                fn (ThrottleTimeoutException $e) => $e->reply->hits > 3 + 1 ? 403 : 429,
            ) . '/' . $builder->reply->hits;
        }
        $this->assertSame(['200/1', '200/2', '200/3', '429/4', '403/5', '403/5', '403/5'], $seen);
        // The window still ends 60 s after it opened.
        $this->setClock(60);
        $this->assertSame('ran', Redis::throttleNative('t')->allow(3)->every(60)->tally(5)->block(0)->then(fn () => 'ran'));
    }

    /** ban() and backoff() take a DateInterval (CarbonInterval), down to the millisecond. */
    public function testBanTakesAnInterval(): void
    {
        $this->app();
        $this->recordCommands();
        $this->setClock(0);
        $builder = Redis::throttleNative('i')->allow(1)->every(60)->block(0)
            ->ban(CarbonInterval::milliseconds(1500))->backoff(CarbonInterval::minutes(15));
        $builder->then(fn () => null);
        $banned = $builder->then(fn () => null, fn (ThrottleTimeoutException $e) => $e->reply);
        $this->assertSame([1500, 2], [$banned->bannedMs, $banned->bannedSeconds()]);
        $this->assertSame(['BAN', '1500ms', 'BACKOFF', '900000ms', 'DETAIL'], array_slice($this->sent[1], -5));
    }

    /**
     * Without penalties the call and its reply are what they were: five
     * fields, no DETAIL sent.
     */
    public function testWithoutPenaltiesNothingNewIsSent(): void
    {
        $this->app();
        $this->recordCommands();
        $this->setClock(0);
        $builder = Redis::throttleNative('plain')->allow(1)->every(60)->block(0);
        $builder->then(fn () => null);
        $this->assertSame(['THROTTLE.FIXED', 'throttle:plain', 1, '60000ms', 'AT', self::T0 * 1_000_000], $this->sent[0]);
        $this->assertSame([null, null, null, false], [$builder->reply->hits, $builder->reply->bannedMs, $builder->reply->nextFreeMs, $builder->reply->banned()]);
    }

    /**
     * block() on a banned key waits on the server for the ban to end. The
     * key is banned for an hour; once the call is parked, another client
     * shortens the ban to 50 ms (`BAN 50ms NOW`), and the waiter is admitted
     * when that ban ends, on the fresh key, in the same call. The waiter's
     * own ban() applied once, when it first ran, and did not extend it.
     *
     * @dataProvider clients
     */
    public function testBlockOnABannedKeyWaitsForTheBanToEnd(string $client): void
    {
        $this->app($client);
        $builder = fn () => Redis::throttleNative('mail')->allow(1)->every(3600)->ban(3600);
        $builder()->block(0)->then(fn () => null);
        $this->assertTrue($builder()->block(0)->then(fn () => false, fn (ThrottleTimeoutException $e) => $e->reply->banned()));

        $shortener = $this->otherClient(<<<'PHP'
            $reply = $redis->rawCommand('THROTTLE.FIXED', 'throttle:mail', 1, '3600s', 'COST', 0, 'BAN', '50ms', 'NOW');
            exit($reply[0] === 0 && $reply[3] <= 50 ? 0 : 3);
            PHP);

        $waiter = $builder()->block(10);
        $result = $waiter->then(fn () => 'sent', fn (ThrottleTimeoutException $e) => $e->getMessage());
        $this->assertSame(0, proc_close($shortener), 'the other client saw a waiter and shortened the ban');
        $this->assertSame('sent', $result);
        $this->assertSame([true, 1, 0], [$waiter->reply->allowed, $waiter->reply->hits, $waiter->reply->bannedMs]);
    }

    /**
     * A waiter whose time-out comes before the ban's end gets the ban's
     * refusal: retry_after is what is left of the ban. The time-out is
     * ended with CLIENT UNBLOCK ... TIMEOUT, which answers as the module's
     * own time-out does, so no test waits for a clock.
     */
    public function testBlockOnABannedKeyGivesUpWithTheBan(): void
    {
        $this->app();
        $builder = fn () => Redis::throttleNative('mail')->allow(1)->every(60)->ban(3600);
        $builder()->block(0)->then(fn () => null);
        $builder()->block(0)->then(fn () => null, fn () => null);

        $unblocker = $this->otherClient(<<<'PHP'
            preg_match('/^id=(\d+) .*flags=\w*b/m', $redis->rawCommand('CLIENT', 'LIST'), $waiter) || exit(2);
            exit($redis->rawCommand('CLIENT', 'UNBLOCK', $waiter[1], 'TIMEOUT') === 1 ? 0 : 3);
            PHP);
        $reply = $builder()->block(5)->then(fn () => null, fn (ThrottleTimeoutException $e) => $e->reply);
        $this->assertSame(0, proc_close($unblocker), 'the other client saw a waiter and unblocked it');
        $this->assertInstanceOf(Reply::class, $reply);
        $this->assertTrue($reply->banned());
        $this->assertFalse($reply->allowed);
        $this->assertSame($reply->bannedMs, $reply->retryAfterMs);
        $this->assertGreaterThan(5_000, $reply->bannedMs, 'the ban, not the 5 s time-out, is what is left');
    }

    /** DurationLimiter takes the penalties as its last argument. */
    public function testDurationLimiterCarriesPenalties(): void
    {
        $this->app();
        $this->setClock(0);
        $limiter = new DurationLimiter(Redis::connection(), 'dl', 1, 60, 'sliding', 1, 'throttle:', new Penalties(banMs: 120_000));
        $this->assertTrue($limiter->acquire());
        $this->assertFalse($limiter->acquire());
        $this->assertSame([120_000, 1], [$limiter->reply->bannedMs, $limiter->reply->hits]);
        $this->setClock(100);
        $this->assertTrue($limiter->tooManyAttempts(), 'a peek at a banned key is refused');
        $this->assertSame('thr-slide', $this->server->type('throttle:dl'));
    }

    public static function badPenalties(): array
    {
        $never = fn () => null;
        return [
            'ban(0)' => [fn ($b) => $b->ban(0), "throttleNative('k')->ban() must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 0"],
            'ban(3651 days)' => [fn ($b) => $b->ban(3651 * 86400), "throttleNative('k')->ban() must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 315446400"],
            'ban(1.5)' => [fn ($b) => $b->ban(1.5), "throttleNative('k')->ban() must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 1.5"],
            'ban(a past interval)' => [fn ($b) => $b->ban(CarbonInterval::seconds(-5)), "throttleNative('k')->ban() must be an interval from 1 ms to 3650 days; got -5000 ms"],
            'backoff(0)' => [fn ($b) => $b->backoff(0), "throttleNative('k')->backoff() must be from 1 to 315360000 seconds (3650 days) or a DateInterval; got 0"],
            'tally(0)' => [fn ($b) => $b->tally(0), "throttleNative('k')->tally() must be from 1 to 1000000000000000; got 0"],
            'tally(10^15 + 1)' => [fn ($b) => $b->tally(1_000_000_000_000_001), "throttleNative('k')->tally() must be from 1 to 1000000000000000; got 1000000000000001"],
            'renewBan() without ban()' => [fn ($b) => $b->renewBan()->then($never), "throttleNative('k')->renewBan() needs ban()"],
            'backoff() without ban()' => [fn ($b) => $b->backoff(60)->then($never), "throttleNative('k')->backoff() needs ban()"],
            'renewBan() and backoff()' => [fn ($b) => $b->ban(10)->renewBan()->backoff(60)->then($never), "throttleNative('k'): renewBan() and backoff() exclude each other"],
            'backoff() shorter than ban()' => [fn ($b) => $b->ban(60)->backoff(30)->then($never), "throttleNative('k')->backoff(): the longest ban, 30 s, is shorter than ban(), 60 s"],
        ];
    }

    /**
     * Bad penalty options get an error naming the method, before anything
     * is sent, as the module's own ERR names the option.
     *
     * @dataProvider badPenalties
     */
    public function testBadPenaltiesGetAnErrorNamingThem(callable $call, string $message): void
    {
        $this->app();
        try {
            $call(Redis::throttleNative('k')->allow(1)->every(60));
            $this->fail('no exception');
        } catch (InvalidArgumentException $e) {
            $this->assertSame($message, $e->getMessage());
        }
        $this->assertSame(0, $this->server->client()->dbSize());
    }

    /**
     * Another process that waits until one client is parked on the server
     * (BLOCK), then runs $action with `$redis` connected; exits 0 when it
     * did what it checks.
     *
     * @return resource
     */
    private function otherClient(string $action)
    {
        $script = sprintf(<<<'PHP'
            $redis = new Redis();
            $redis->connect('127.0.0.1', %d);
            $deadline = microtime(true) + 10;
            while (!str_contains($redis->rawCommand('INFO', 'throttle'), 'throttle_waiting_clients:1')) {
                if (microtime(true) > $deadline) { exit(1); }
                usleep(2000);
            }
            %s
            PHP, $this->server->port, $action);
        return proc_open([PHP_BINARY, '-r', $script], [], $pipes);
    }
}
