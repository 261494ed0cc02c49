<?php

/*
 * A worker process for FunnelTest: one Laravel Redis connection (phpredis
 * or Predis) and one funnelNative() call on it, as a queue worker makes.
 *
 *     php funnel_worker.php '{"port": 6400, "client": "phpredis", "key": "k", "id": 1, "mode": "wait"}'
 *
 * mode "wait": limit(1), block(10); the callback appends the worker's id
 * to the list `admitted`, then then() releases the slot. Exits 0 when the
 * callback ran, 3 when the funnel timed out.
 * mode "crash": at Carbon's test now `at` (Unix µs, sent as AT), limit(1),
 * releaseAfter(60), block(0); the callback prints "holding <token>" and
 * then waits to be killed, as a worker that dies holding its slot.
 */

declare(strict_types=1);

require __DIR__ . '/autoload.php';

use Illuminate\Redis\RedisManager;
use Illuminate\Support\Carbon;
use RedisThrottle\Laravel\FunnelBuilder;

$job = json_decode($argv[1] ?? '', true, 4, JSON_THROW_ON_ERROR);
$connection = (new RedisManager(null, $job['client'], [
    'default' => ['host' => '127.0.0.1', 'port' => $job['port'], 'database' => 0, 'read_timeout' => 30],
]))->connection();
$funnel = (new FunnelBuilder($connection, $job['key'], 'throttle:'))->limit(1);

if ($job['mode'] === 'wait') {
    $ran = $funnel->block(10)->then(function () use ($connection, $job) {
        $connection->rpush('admitted', (string) $job['id']);
        return true;
    }, fn () => false);
    exit($ran ? 0 : 3);
}

if ($job['mode'] === 'crash') {
    $at = (int) $job['at'];
    Carbon::setTestNow(Carbon::createFromFormat('U.u', sprintf('%d.%06d', intdiv($at, 1_000_000), $at % 1_000_000)));
    $funnel->releaseAfter(60)->block(0)->then(function () use ($funnel) {
        fwrite(STDOUT, "holding {$funnel->reply->token}\n");
        fflush(STDOUT);
        \sleep(60); // killed long before
    });
    exit(4); // never reached
}

exit(2);
