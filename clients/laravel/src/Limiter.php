<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use Illuminate\Redis\Connections\Connection;
use Illuminate\Support\Carbon;
use InvalidArgumentException;
use RuntimeException;

/**
 * Sends THROTTLE commands on one of Laravel's Redis connections: phpredis or
 * Predis, single server or Redis Cluster.
 *
 * Keys get the connection's prefix (`database.redis.options.prefix`) and then
 * the package's own prefix, as Laravel's eval() would apply the first:
 * `rawCommand`/`executeRaw` send keys as they are.
 *
 * Time is the server's clock. While Carbon has a test "now"
 * (`Carbon::setTestNow()`, `$this->travel()` in a Laravel test), each call
 * carries it as `AT` in Unix microseconds, so an application's tests drive
 * the limiter's time as they drive Laravel's.
 */
final class Limiter
{
    /** Algorithm names (config `algorithm`, `using()`) and the words each sends. */
    public const ALGORITHMS = [
        'fixed' => ['FIXED'],
        'sliding' => ['SLIDING'],
        'sliding-exact' => ['SLIDING', 'EXACT'],
        'token' => ['TOKEN'],
        'leaky' => ['LEAKY'],
    ];

    public function __construct(private Connection $connection, private string $keyPrefix = '')
    {
        $client = $connection->client();
        if ($client instanceof \Predis\ClientInterface && method_exists($client->getConnection(), 'getClusterStrategy')) {
            self::routeOnPredisCluster($client->getConnection()->getClusterStrategy());
        }
    }

    /** Throws when $algorithm is not one of ALGORITHMS; $argument names where it came from. */
    public static function checkAlgorithm(string $algorithm, string $argument): void
    {
        if (!isset(self::ALGORITHMS[$algorithm])) {
            throw new InvalidArgumentException(sprintf(
                "%s must be one of %s; got '%s'", $argument, implode(', ', array_keys(self::ALGORITHMS)), $algorithm,
            ));
        }
    }

    /**
     * One limit: `THROTTLE.<ALG> key limit <period>ms [COST n] [AT µs]
     * [penalties] [DETAIL] [BLOCK ms]`. $blockMs > 0 waits on the server up
     * to that long for the call to be admitted (a banned key: until its ban
     * ends). A call with penalties also asks for DETAIL, so its reply says
     * the key's hits and ban.
     */
    public function attempt(
        string $key, string $algorithm, int $limit, int $periodMs, int $cost = 1, int $blockMs = 0,
        ?Penalties $penalties = null, bool $detail = false,
    ): Reply {
        $spec = $this->spec($key, $algorithm, $limit, $periodMs);
        $type = array_shift($spec); // $spec: key, limit, period, flags
        $args = ["THROTTLE.$type", ...$spec, ...self::options($cost)];
        if ($penalties !== null && !$penalties->isEmpty()) {
            array_push($args, ...$penalties->words());
            $detail = true;
        }
        if ($detail) {
            $args[] = 'DETAIL';
        }
        if ($blockMs > 0) {
            array_push($args, 'BLOCK', $blockMs);
        }
        return Reply::fromArray($this->send($args, $spec[0]));
    }

    /**
     * Several limits at once, all or nothing, in one round trip
     * (`THROTTLE.ALL`; one limit is sent as its own command). In Redis Cluster
     * the keys must share a hash slot: give them the same `{tag}`. No limits:
     * admitted, without a call. $cost 0 only looks.
     *
     * @param list<array{0: string, 1: string, 2: int, 3: int}> $limits [key, algorithm, limit, period ms] each
     * @return array{0: bool, 1: list<Reply>} admitted, then one reply per limit in order
     */
    public function attemptAll(array $limits, int $cost = 1): array
    {
        if ($limits === []) {
            return [true, []]; // no limit refuses
        }
        if (count($limits) === 1) {
            [$key, $algorithm, $limit, $periodMs] = $limits[0];
            $reply = $this->attempt($key, $algorithm, $limit, $periodMs, $cost);
            return [$reply->allowed, [$reply]];
        }
        $specs = array_map(fn (array $limit) => $this->spec(...$limit), $limits);
        $reply = $this->send(['THROTTLE.ALL', ...self::options($cost), ...array_merge(...$specs)], $specs[0][1]);
        return [(int) $reply[0] === 1, array_map([Reply::class, 'fromArray'], array_slice($reply, 1))];
    }

    /**
     * One of $limit slots of $key for $leaseMs (a lease): `THROTTLE.ACQUIRE
     * key limit <lease>ms [ID id] [AT µs] [BLOCK ms]`. Admitted, the reply
     * carries the lease's token (`->token`), which release() and renew()
     * take. $id names the lease (acquiring with an $id that holds one renews
     * it); without it the server makes a token. $blockMs > 0 waits on the
     * server up to that long for a slot, behind the key's earlier waiters.
     */
    public function acquire(string $key, int $limit, int $leaseMs, ?string $id = null, int $blockMs = 0): Reply
    {
        $key = $this->key($key);
        $args = ['THROTTLE.ACQUIRE', $key, $limit, "{$leaseMs}ms"];
        if ($id !== null) {
            array_push($args, 'ID', $id);
        }
        array_push($args, ...self::options(1));
        if ($blockMs > 0) {
            array_push($args, 'BLOCK', $blockMs);
        }
        return Reply::fromArray($this->send($args, $key));
    }

    /**
     * Ends $token's lease on $key (`THROTTLE.RELEASE`): true when it held
     * one, false when it did not (it ended, was released, or never held
     * one), which changes nothing.
     */
    public function release(string $key, string $token): bool
    {
        $key = $this->key($key);
        return $this->send(['THROTTLE.RELEASE', $key, $token, ...self::options(1)], $key, false) === 1;
    }

    /**
     * Makes $token's lease on $key end $leaseMs from now (`THROTTLE.RENEW`):
     * true when it held one, false (nothing changed) when it did not.
     */
    public function renew(string $key, string $token, int $leaseMs): bool
    {
        $key = $this->key($key);
        return $this->send(['THROTTLE.RENEW', $key, $token, "{$leaseMs}ms", ...self::options(1)], $key, false) === 1;
    }

    /** A limit as THROTTLE.ALL takes it, `TYPE key limit <period>ms [EXACT]`, with the key as stored. */
    private function spec(string $key, string $algorithm, int $limit, int $periodMs): array
    {
        self::checkAlgorithm($algorithm, 'algorithm');
        $words = self::ALGORITHMS[$algorithm];
        return [$words[0], $this->key($key), $limit, "{$periodMs}ms", ...array_slice($words, 1)];
    }

    /** `COST n` unless it is 1, and `AT µs` while Carbon has a test now. */
    private static function options(int $cost): array
    {
        $options = $cost === 1 ? [] : ['COST', $cost];
        if (Carbon::hasTestNow()) {
            array_push($options, 'AT', (int) Carbon::now()->format('Uu'));
        }
        return $options;
    }

    /** The key as stored: connection prefix, package prefix, key. */
    private function key(string $key): string
    {
        $key = $this->keyPrefix . $key;
        $client = $this->connection->client();
        if ($client instanceof \Redis || $client instanceof \RedisCluster) {
            return $client->_prefix($key);
        }
        $prefix = $client->getOptions()->prefix; // Predis: a KeyPrefixProcessor or null
        return $prefix === null ? $key : $prefix->getPrefix() . $key;
    }

    /**
     * Sends through the connection's command(), so Laravel's CommandExecuted
     * events still fire. An error reply throws: ThrottleModuleMissingException
     * when the server does not know the command, else a RuntimeException.
     * The reply is an array, or with $array false an integer (RELEASE, RENEW).
     *
     * @return ($array is true ? array : int)
     */
    private function send(array $args, string $key, bool $array = true): array|int
    {
        $client = $this->connection->client();
        if ($client instanceof \RedisCluster) {
            // phpredis routes a raw command by its first argument, a key
            $reply = $this->connection->command('rawCommand', [$key, ...$args]);
        } elseif ($client instanceof \Redis) {
            $reply = $this->connection->command('rawCommand', $args);
        } else {
            // Predis answers an error reply with its text
            $reply = $this->connection->command('executeRaw', [$args]);
        }
        if ($array ? !is_array($reply) : !is_int($reply)) {
            $error = is_string($reply) ? $reply : ($client->getLastError() ?? 'no reply');
            throw ThrottleModuleMissingException::fromError($args[0], $error)
                ?? new RuntimeException("{$args[0]} failed: $error");
        }
        return $reply;
    }

    /**
     * Predis's cluster connection routes only the commands it knows: tell it
     * where each THROTTLE command's key is (the first argument; THROTTLE.ALL:
     * after the first algorithm word; COST and AT values are numbers).
     */
    private static function routeOnPredisCluster(object $strategy): void
    {
        $firstArgument = fn ($command) => $command->getArgument(0);
        foreach (['FIXED', 'SLIDING', 'TOKEN', 'LEAKY', 'ACQUIRE', 'RELEASE', 'RENEW'] as $type) {
            $strategy->setCommandHandler("THROTTLE.$type", $firstArgument);
        }
        $strategy->setCommandHandler('THROTTLE.ALL', function ($command) {
            $args = $command->getArguments();
            foreach ($args as $i => $arg) {
                if (in_array($arg, ['FIXED', 'SLIDING', 'TOKEN', 'LEAKY'], true)) {
                    return $args[$i + 1] ?? null;
                }
            }
            return null;
        });
    }
}
