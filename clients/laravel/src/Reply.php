<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

/**
 * What a THROTTLE command answers for one limit: the five integers every
 * call gets, and the three of `DETAIL` when the call asked for them (the
 * package asks whenever a call carries a penalty: ban(), tally(), a
 * LoginThrottle). THROTTLE.ACQUIRE (the funnel) answers the five and, when
 * admitted, the lease's token.
 */
final class Reply
{
    public function __construct(
        /** The call was admitted. */
        public bool $allowed,
        /** The most units the key can admit at once (TOKEN and LEAKY: the burst). */
        public int $limit,
        /** Units still admissible right now, after this call. */
        public int $remaining,
        /** Milliseconds until the same call would be admitted; 0 when admitted, -1 when it never can be. */
        public int $retryAfterMs,
        /** Milliseconds until the key is idle again; the key's PTTL. */
        public int $resetAfterMs,
        /** DETAIL: the units the key counts now, refused and forced ones included; in a ban, those it counted when the ban started and since. Null without DETAIL. */
        public ?int $hits = null,
        /** DETAIL: milliseconds left of the key's ban, 0 when it has none. Null without DETAIL. */
        public ?int $bannedMs = null,
        /** DETAIL: milliseconds until one more unit is admissible, 0 when nothing is used. Null without DETAIL. */
        public ?int $nextFreeMs = null,
        /** THROTTLE.ACQUIRE: the admitted lease's token, which releases or renews it. Null when refused, and for the rate commands. */
        public ?string $token = null,
    ) {
    }

    /**
     * @param array<int|string, int|string|bool> $reply the command's five integers, eight with DETAIL, or
     *        THROTTLE.ACQUIRE's five and a token when admitted; a RESP3 map keyed by field name is read the same way
     */
    public static function fromArray(array $reply): self
    {
        if (isset($reply['allowed'])) {
            $field = fn (string $name) => isset($reply[$name]) ? (int) $reply[$name] : null;
            return new self(
                (int) $reply['allowed'] === 1, (int) $field('limit'), (int) $field('remaining'),
                (int) $field('retry_after'), (int) $field('reset_after'),
                $field('hits'), $field('banned'), $field('next_free'),
                isset($reply['token']) ? (string) $reply['token'] : null,
            );
        }
        $detail = count($reply) >= 8;
        return new self(
            (int) $reply[0] === 1, (int) $reply[1], (int) $reply[2], (int) $reply[3], (int) $reply[4],
            $detail ? (int) $reply[5] : null, $detail ? (int) $reply[6] : null, $detail ? (int) $reply[7] : null,
            count($reply) === 6 ? (string) $reply[5] : null,
        );
    }

    /** retry_after in whole seconds, rounded up, for Retry-After. */
    public function retryAfterSeconds(): int
    {
        return intdiv(max(0, $this->retryAfterMs) + 999, 1000);
    }

    /** reset_after in whole seconds, rounded up. */
    public function resetAfterSeconds(): int
    {
        return intdiv($this->resetAfterMs + 999, 1000);
    }

    /** Whether the key is banned (known only from a reply with DETAIL). */
    public function banned(): bool
    {
        return ($this->bannedMs ?? 0) > 0;
    }

    /** What is left of the key's ban in whole seconds, rounded up; 0 when it has none. */
    public function bannedSeconds(): int
    {
        return intdiv(($this->bannedMs ?? 0) + 999, 1000);
    }
}
