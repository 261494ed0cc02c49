-- Seed 002's LeakyBucketLimiter script, verbatim: a hash {water,
-- lastLeakTime} drained at leakRate per second.
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local leakRate = tonumber(ARGV[2])
local tokens = tonumber(ARGV[3])
local now = tonumber(ARGV[4])

local bucket = redis.call('hmget', key, 'water', 'lastLeakTime')
local currentWater = 0
local lastLeakTime = now

if bucket[1] then
    currentWater = tonumber(bucket[1])
    lastLeakTime = tonumber(bucket[2])
end

-- 计算漏出水量
local leakAmount = (now - lastLeakTime) * leakRate
currentWater = math.max(0, currentWater - leakAmount)

-- 检查是否可以加水
if currentWater + tokens <= capacity then
    redis.call('hmset', key, 'water', currentWater + tokens, 'lastLeakTime', now)
    redis.call('expire', key, math.ceil(capacity / leakRate) + 10)
    return 1
else
    return 0
end
