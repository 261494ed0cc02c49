<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support;

use RuntimeException;

/**
 * A real server with the module loaded, on a free loopback port, in a
 * temporary directory of its own. The binary is THROTTLE_REDIS_SERVER
 * (default `redis-server` on PATH; `make test-laravel` runs the suite once
 * for each server in THROTTLE_SERVERS). Stopped with SHUTDOWN NOSAVE, then by
 * its own process handle if it is still running.
 */
final class RedisServer
{
    public int $port;
    private string $dir;
    /** @var resource */
    private $process;

    /**
     * @param list<string> $extraArgs further server options, e.g. ['--cluster-enabled', 'yes']
     * @param bool $loadModule false: a server without the module
     */
    public function __construct(array $extraArgs = [], bool $loadModule = true)
    {
        $module = getenv('THROTTLE_MODULE') ?: '';
        if ($module === '' || !is_file($module)) {
            throw new RuntimeException("THROTTLE_MODULE must name the built module (libredis_throttle.so); got '$module'");
        }
        $binary = self::binary();
        $this->dir = sys_get_temp_dir() . '/throttle-laravel-' . bin2hex(random_bytes(6));
        mkdir($this->dir);

        // Another process can take the port between our probe and the
        // server's bind: try a few fresh ports before giving up.
        for ($attempt = 1; ; $attempt++) {
            $this->port = self::freePort();
            $args = [$binary, '--port', (string) $this->port, '--bind', '127.0.0.1',
                '--save', '', '--appendonly', 'no', '--dir', $this->dir,
                '--logfile', $this->dir . '/redis.log', ...($loadModule ? ['--loadmodule', $module] : []), ...$extraArgs];
            $this->process = proc_open($args, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
            if ($this->waitUntilReady()) {
                return;
            }
            proc_terminate($this->process, 9); // if it is still starting
            proc_close($this->process);
            if ($attempt === 5) {
                $log = @file_get_contents($this->dir . '/redis.log');
                throw new RuntimeException("$binary did not start:\n$log");
            }
        }
    }

    /** THROTTLE_REDIS_SERVER, else `redis-server`. */
    public static function binary(): string
    {
        return getenv('THROTTLE_REDIS_SERVER') ?: 'redis-server';
    }

    /** The one-node cluster of this run, once started. */
    private static ?self $cluster = null;

    /**
     * A Redis Cluster of one node that serves every slot: cluster clients,
     * MOVED-free routing, and CROSSSLOT checks for multi-key commands. One
     * per run, stopped when PHP exits. A new master reports the cluster ok
     * only 2 s after it starts, so tests/bootstrap.php starts it early
     * (startCluster()) and this waits for what is left of those 2 s.
     */
    public static function singleNodeCluster(): self
    {
        $server = self::startCluster();
        $redis = $server->client();
        $deadline = microtime(true) + 10;
        while (!str_contains($redis->rawCommand('CLUSTER', 'INFO'), 'cluster_state:ok')) {
            if (microtime(true) > $deadline) {
                throw new RuntimeException('the one-node cluster did not reach cluster_state:ok');
            }
            usleep(20_000);
        }
        return $server;
    }

    /** Starts the run's one-node cluster and gives it every slot; returns at once. */
    public static function startCluster(): self
    {
        if (self::$cluster === null) {
            self::$cluster = new self(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-announce-ip', '127.0.0.1']);
            self::$cluster->client()->rawCommand('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
            register_shutdown_function(static fn () => self::$cluster?->stop());
        }
        return self::$cluster;
    }

    /** A port the kernel just handed out for 127.0.0.1, never 6379. */
    private static function freePort(): int
    {
        do {
            $socket = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
            if ($socket === false) {
                throw new RuntimeException("cannot bind a loopback port: $error");
            }
            $port = (int) substr(strrchr(stream_socket_get_name($socket, false), ':'), 1);
            fclose($socket);
        } while ($port === 6379);
        return $port;
    }

    private function waitUntilReady(): bool
    {
        $deadline = microtime(true) + 10;
        while (microtime(true) < $deadline) {
            if (!proc_get_status($this->process)['running']) {
                return false;
            }
            try {
                $redis = new \Redis();
                if (@$redis->connect('127.0.0.1', $this->port, 0.2) && $redis->ping()) {
                    $redis->close();
                    return true;
                }
            } catch (\RedisException $e) {
                // not listening yet
            }
            usleep(10_000);
        }
        return false;
    }

    /** A plain phpredis connection, for checks outside Laravel. */
    public function client(): \Redis
    {
        $redis = new \Redis();
        $redis->connect('127.0.0.1', $this->port, 2);
        return $redis;
    }

    /**
     * A command's reply with status replies as strings (phpredis answers
     * them with true in raw commands): `command('TYPE', $key)`.
     */
    public function command(string ...$args): mixed
    {
        $reply = (new \Predis\Client(['host' => '127.0.0.1', 'port' => $this->port]))->executeRaw($args);
        return is_array($reply) ? array_map(fn ($item) => is_object($item) ? (string) $item : $item, $reply) : $reply;
    }

    public function type(string $key): string
    {
        return $this->command('TYPE', $key);
    }

    public function stop(): void
    {
        if (!is_resource($this->process)) {
            return;
        }
        try {
            $this->client()->rawCommand('SHUTDOWN', 'NOSAVE');
        } catch (\RedisException $e) {
            // the connection closes as the server exits
        }
        $deadline = microtime(true) + 5;
        while (proc_get_status($this->process)['running'] && microtime(true) < $deadline) {
            usleep(10_000);
        }
        if (proc_get_status($this->process)['running']) {
            proc_terminate($this->process, 9);
        }
        proc_close($this->process);
        foreach (glob($this->dir . '/*') ?: [] as $file) {
            unlink($file);
        }
        rmdir($this->dir);
    }

    public function __destruct()
    {
        $this->stop();
    }
}
