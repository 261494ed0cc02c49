<?php
/**
 * The throttle module from PHP with phpredis (Debian: php-cli php-redis):
 * the Laravel-style Throttle helper and the 429 middleware of Throttle.php,
 * checked against a live server. Exact values use AT (fixed time); the
 * block() part waits for real and checks how long.
 *
 *     REDIS_PORT=6399 php examples/php/example.php      (after `make run`)
 */

declare(strict_types=1);

require __DIR__ . '/Throttle.php';

$failures = 0;
function check(string $what, mixed $got, mixed $want): void
{
    global $failures;
    $ok = $got === $want;
    printf("%s %s: %s%s\n", $ok ? 'ok ' : 'MISMATCH', $what, json_encode($got),
        $ok ? '' : ', expected ' . json_encode($want));
    $failures += $ok ? 0 : 1;
}

$redis = new Redis();
$redis->connect(getenv('REDIS_HOST') ?: '127.0.0.1', (int) (getenv('REDIS_PORT') ?: 6399));
$p = 'example:php:';
$redis->del($p . 'asr', $p . 'mail', $p . 'api', $p . 'strict');
$t0 = 1_700_000_000_000_000; // Unix µs, for AT

// 1. Laravel: Redis::throttle('asr')->allow(3)->every(60)->block(0)->then($ok, $limited)
$calls = [];
foreach ([0, 1, 2, 3] as $i) {
    $asr = (new Throttle($redis, $p . 'asr'))->allow(3)->every(60)->block(0)->at($t0 + $i * 1_000_000);
    $calls[] = $asr->then(
        fn () => "ran, {$asr->remaining} left",
        fn (ThrottleTimeoutException $e) => "limited, retry in {$e->retryAfterMs} ms",
    );
}
check('3 a minute, 4 calls', $calls, ['ran, 2 left', 'ran, 1 left', 'ran, 0 left', 'limited, retry in 57000 ms']);

// Without a failure callback a refused call throws, as in Laravel.
try {
    (new Throttle($redis, $p . 'asr'))->allow(3)->every(60)->block(0)->at($t0 + 4_000_000)->then(fn () => 'ran');
    check('no failure callback', 'no exception', 'ThrottleTimeoutException');
} catch (ThrottleTimeoutException $e) {
    check('no failure callback', $e->retryAfterMs, 56_000);
}

// 2. block(2): wait up to 2 s for a slot, on the server (no polling loop).
// One call a second: the second call is admitted when the window ends.
$mail = fn () => (new Throttle($redis, $p . 'mail'))->allow(1)->every(1)->block(2);
$started = microtime(true);
$mail()->then(fn () => null);
$result = $mail()->then(fn () => 'sent', fn () => 'gave up');
$waited = microtime(true) - $started;
check('block(2) admitted when the window ends', $result, 'sent');
check('block(2) admitted 1 s after the first call', $waited >= 0.995 && $waited < 2.5, true);
printf("    (%d ms)\n", (int) round($waited * 1000));

// 3. The middleware: 20 requests a second, then HTTP 429 with the IETF
// RateLimit fields and Retry-After.
$responses = [];
for ($i = 0; $i < 20; $i++) {
    $responses[] = rate_limit($redis, $p . 'api', 20, 1, 'default', $t0);
}
check('20 requests admitted', array_unique(array_column($responses, 0)), [200]);
check('first response', $responses[0][1], ['RateLimit-Policy' => '"default";q=20;w=1', 'RateLimit' => '"default";r=19;t=1']);
check('20th response', $responses[19][1]['RateLimit'], '"default";r=0;t=1');

[$status, $headers] = rate_limit($redis, $p . 'api', 20, 1, 'default', $t0 + 500_000);
echo "\nHTTP/1.1 $status Too Many Requests\n";
foreach ($headers as $name => $value) {
    echo "$name: $value\n";
}
echo "\n";
check('21st request, 0.5 s later', [$status, $headers], [429, [
    'RateLimit-Policy' => '"default";q=20;w=1',
    'RateLimit' => '"default";r=0;t=1',
    'Retry-After' => '1',
]]);
[$status, $headers] = rate_limit($redis, $p . 'api', 20, 1, 'default', $t0 + 1_000_000);
check('next window', [$status, $headers['RateLimit']], [200, '"default";r=19;t=1']);

// A longer window: 100 an hour; 40 minutes in, t counts down the window.
rate_limit($redis, $p . 'strict', 100, 3600, 'hourly', $t0);
[$status, $headers] = rate_limit($redis, $p . 'strict', 100, 3600, 'hourly', $t0 + 2_400_000_000);
check('hourly policy', [$status, $headers], [200, ['RateLimit-Policy' => '"hourly";q=100;w=3600', 'RateLimit' => '"hourly";r=98;t=1200']]);

// Bad input is a Redis error, not a limited reply.
try {
    rate_limit($redis, $p . 'api', 0, 1);
    check('limit 0', 'no error', 'an error');
} catch (RuntimeException $e) {
    check('limit 0', str_contains($e->getMessage(), 'invalid limit'), true);
}

$redis->del($p . 'asr', $p . 'mail', $p . 'api', $p . 'strict');
if ($failures > 0) {
    echo "php example: $failures mismatches\n";
    exit(1);
}
echo "php example: every reply as expected\n";
