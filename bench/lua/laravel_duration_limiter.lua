-- Laravel's DurationLimiter (Illuminate\Redis\Limiters\DurationLimiter),
-- the script behind Redis::throttle(), as quoted in seed 000: a fixed
-- window kept in a hash {start, end, count}, TTL twice the decay.
-- KEYS[1] the limiter's key
-- ARGV[1] now (microtime(true), float seconds)
-- ARGV[2] now (time(), whole seconds): the window's start
-- ARGV[3] decay: the window's length in seconds
-- ARGV[4] maxLocks: calls allowed per window
-- Returns {allowed, window end, remaining}.
local function reset()
    redis.call('HMSET', KEYS[1], 'start', ARGV[2], 'end', ARGV[2] + ARGV[3], 'count', 1)
    return redis.call('EXPIRE', KEYS[1], ARGV[3] * 2)
end

if redis.call('EXISTS', KEYS[1]) == 0 then
    return {reset(), ARGV[2] + ARGV[3], ARGV[4] - 1}
end

if ARGV[1] >= redis.call('HGET', KEYS[1], 'start') and ARGV[1] <= redis.call('HGET', KEYS[1], 'end') then
    return {
        tonumber(redis.call('HINCRBY', KEYS[1], 'count', 1)) <= tonumber(ARGV[4]),
        redis.call('HGET', KEYS[1], 'end'),
        ARGV[4] - redis.call('HGET', KEYS[1], 'count')
    }
end

return {reset(), ARGV[2] + ARGV[3], ARGV[4] - 1}
