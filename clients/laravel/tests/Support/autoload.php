<?php

// The suite runs on the Laravel the machine has: a Composer install of this
// package (vendor/autoload.php, any Laravel the constraints allow) or, without
// one, Debian's packages php-laravel-framework and php-nrk-predis on PHP's
// include path. tests/bootstrap.php and the worker processes that some tests
// start (tests/Support/funnel_worker.php) load classes through this file.

declare(strict_types=1);

if (is_file(__DIR__ . '/../../vendor/autoload.php')) {
    require __DIR__ . '/../../vendor/autoload.php';
} else {
    require 'Illuminate/autoload.php';
    require 'Predis/autoload.php';
    spl_autoload_register(function (string $class): void {
        foreach (['RedisThrottle\\Laravel\\Tests\\' => __DIR__ . '/../', 'RedisThrottle\\Laravel\\' => __DIR__ . '/../../src/'] as $namespace => $dir) {
            if (str_starts_with($class, $namespace)) {
                $file = $dir . str_replace('\\', '/', substr($class, strlen($namespace))) . '.php';
                if (is_file($file)) {
                    require $file;
                }
                return;
            }
        }
    });
}
