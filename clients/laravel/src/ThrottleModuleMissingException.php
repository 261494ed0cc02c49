<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use RuntimeException;

/**
 * The Redis server has no THROTTLE commands: the redis-throttle module is
 * not loaded there. The message says how to load it and quotes the server.
 */
class ThrottleModuleMissingException extends RuntimeException
{
    public function __construct(string $command, public string $serverError)
    {
        parent::__construct(
            "the Redis server has no $command command: the THROTTLE commands are missing because the redis-throttle module is not loaded. "
            . 'Load it with the line `loadmodule /path/to/libredis_throttle.so` in redis.conf, '
            . 'or `MODULE LOAD /path/to/libredis_throttle.so`, or `redis-server --loadmodule /path/to/libredis_throttle.so` '
            . "(server said: $serverError)"
        );
    }

    /** The exception for a server's error reply to $command, when that reply says the command is unknown. */
    public static function fromError(string $command, string $error): ?self
    {
        return stripos($error, 'unknown command') !== false && stripos($error, $command) !== false
            ? new self($command, $error)
            : null;
    }
}
