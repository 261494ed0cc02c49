-- Seed 002's TokenBucketLimiter script, verbatim: a hash {tokens,
-- lastFillTime} refilled at fillRate per second.
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local fillRate = tonumber(ARGV[2])
local tokens = tonumber(ARGV[3])
local now = tonumber(ARGV[4])

local bucket = redis.call('hmget', key, 'tokens', 'lastFillTime')
local currentTokens = capacity
local lastFillTime = now

if bucket[1] then
    currentTokens = tonumber(bucket[1])
    lastFillTime = tonumber(bucket[2])
end

-- 计算应该填充的令牌
local fillAmount = (now - lastFillTime) * fillRate
currentTokens = math.min(capacity, currentTokens + fillAmount)

-- 检查是否有足够令牌
if currentTokens >= tokens then
    redis.call('hmset', key, 'tokens', currentTokens - tokens, 'lastFillTime', now)
    redis.call('expire', key, math.ceil(capacity / fillRate) + 10)
    return 1
else
    return 0
end
