<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

use DateInterval;
use Illuminate\Support\Carbon;
use InvalidArgumentException;

/**
 * The penalty options of one THROTTLE call (the module's `BAN d`, `RENEW`,
 * `BACKOFF max`, `TALLY cap`, `FORCE`, `NOW`), as the builder and
 * LoginThrottle send them. Check its arguments where they are given: the
 * messages there name the caller's method.
 */
final class Penalties
{
    /** The module's longest ban, 3650 days, in ms. */
    public const MAX_LENGTH_MS = 315_360_000_000;

    /** The module's largest TALLY cap, 10^15 units. */
    public const MAX_TALLY = 1_000_000_000_000_000;

    public function __construct(
        /** `BAN`: a refused call bans the key for this long. */
        public ?int $banMs = null,
        /** `RENEW`: each refused call during the ban restarts it. */
        public bool $renew = false,
        /** `BACKOFF`: each refused call during the ban doubles it, up to this. */
        public ?int $backoffMaxMs = null,
        /** `TALLY`: refused units count, until the key counts this many. */
        public ?int $tallyCap = null,
        /** `FORCE`: the units are taken whether or not they fit. */
        public bool $force = false,
        /** `NOW`: the key is banned now, whatever it holds. */
        public bool $now = false,
    ) {
    }

    /** No option at all: the call is a plain one. */
    public function isEmpty(): bool
    {
        return $this->banMs === null && $this->tallyCap === null && !$this->force && !$this->now;
    }

    /** The options' words for the command. */
    public function words(): array
    {
        $words = [];
        if ($this->banMs !== null) {
            array_push($words, 'BAN', "{$this->banMs}ms");
            if ($this->renew) {
                $words[] = 'RENEW';
            }
            if ($this->backoffMaxMs !== null) {
                array_push($words, 'BACKOFF', "{$this->backoffMaxMs}ms");
            }
            if ($this->now) {
                $words[] = 'NOW';
            }
        }
        if ($this->tallyCap !== null) {
            array_push($words, 'TALLY', $this->tallyCap);
        }
        if ($this->force) {
            $words[] = 'FORCE';
        }
        return $words;
    }

    /**
     * A ban's length in ms: whole seconds, as Laravel's builders count, or a
     * DateInterval (CarbonInterval: `CarbonInterval::minutes(15)`, down to
     * milliseconds), from 1 ms (1 s for seconds) to 3650 days. $argument
     * names the caller in the error.
     *
     * @param int|DateInterval $length
     */
    public static function lengthMs($length, string $argument): int
    {
        if ($length instanceof DateInterval) {
            $now = Carbon::now();
            $ms = (int) $now->copy()->add($length)->format('Uv') - (int) $now->format('Uv');
            if ($ms < 1 || $ms > self::MAX_LENGTH_MS) {
                throw new InvalidArgumentException("$argument must be an interval from 1 ms to 3650 days; got $ms ms");
            }
            return $ms;
        }
        if (!is_int($length) || $length < 1 || $length > intdiv(self::MAX_LENGTH_MS, 1000)) {
            throw new InvalidArgumentException(sprintf(
                '%s must be from 1 to %d seconds (3650 days) or a DateInterval; got %s',
                $argument, intdiv(self::MAX_LENGTH_MS, 1000), is_scalar($length) ? var_export($length, true) : get_debug_type($length),
            ));
        }
        return $length * 1000;
    }

    /** A TALLY cap, 1 to 10^15; $argument names the caller in the error. */
    public static function tallyCap(int $cap, string $argument): int
    {
        if ($cap < 1 || $cap > self::MAX_TALLY) {
            throw new InvalidArgumentException("$argument must be from 1 to " . self::MAX_TALLY . "; got $cap");
        }
        return $cap;
    }

    /** A length in ms for a message: whole seconds when it is, else ms. */
    public static function describe(int $ms): string
    {
        return $ms % 1000 === 0 ? intdiv($ms, 1000) . ' s' : "$ms ms";
    }
}
