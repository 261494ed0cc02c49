<?php

// Settings of redis-throttle/laravel. Publish with
//   php artisan vendor:publish --tag=throttle-native-config

return [
    // The Redis connection (config/database.php, `redis`) that has the module
    // loaded; null is the default connection.
    'connection' => env('THROTTLE_NATIVE_CONNECTION'),

    // The algorithm of the throttle.native middleware and the default of
    // Redis::throttleNative(): fixed (Laravel's fixed window), sliding,
    // sliding-exact, token or leaky.
    'algorithm' => env('THROTTLE_NATIVE_ALGORITHM', 'fixed'),

    // Put before every limiter key, after the connection's own prefix. Keeps
    // the module's keys apart from those of Laravel's own limiter, which
    // stores a hash under the same names.
    'prefix' => env('THROTTLE_NATIVE_PREFIX', 'throttle:'),

    // Also send the IETF fields RateLimit-Policy and RateLimit
    // (draft-ietf-httpapi-ratelimit-headers) beside the X-RateLimit-* headers.
    'ietf_headers' => env('THROTTLE_NATIVE_IETF_HEADERS', false),
];
