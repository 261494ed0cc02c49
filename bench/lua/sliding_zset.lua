-- Seed 002's SlidingWindowLimiter, its four pipelined calls made atomic in
-- one script: a sorted set of calls scored by time segment; segments older
-- than the window are trimmed, the set's size is the count.
-- KEYS[1] the limiter's key
-- ARGV[1] now, whole seconds (time())
-- ARGV[2] windowSize, seconds
-- ARGV[3] segments per window
-- ARGV[4] maxRequests per window
-- ARGV[5] a value unique to the call (the seed uses microtime(true))
-- Returns 1 allowed, 0 limited.
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local segments = tonumber(ARGV[3])
local segment_size = window / segments
local current = math.floor(now / segment_size)
local oldest_valid = current - segments + 1

redis.call('ZADD', KEYS[1], current, current .. ':' .. ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, oldest_valid - 1)
local count = redis.call('ZCARD', KEYS[1])
redis.call('EXPIRE', KEYS[1], window)
if count <= tonumber(ARGV[4]) then
    return 1
end
return 0
