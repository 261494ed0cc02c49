<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel;

/**
 * The five integers every THROTTLE command answers, for one limit.
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
    ) {
    }

    /** @param array<int, int|string> $reply the command's five integers */
    public static function fromArray(array $reply): self
    {
        return new self((int) $reply[0] === 1, (int) $reply[1], (int) $reply[2], (int) $reply[3], (int) $reply[4]);
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
}
