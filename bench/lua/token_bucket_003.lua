-- Seed 003's throttle.lua (ThinkPHP middleware), verbatim: a hash
-- {tokens, last_refresh}; a denied call still touches last_refresh.
-- KEYS[1]: 存储桶数据的key
-- ARGV[1]: 桶容量
-- ARGV[2]: 令牌生成速率（个/秒）
-- ARGV[3]: 当前时间戳（秒）

local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])

-- 获取桶当前状态：剩余令牌数，上次刷新时间
local bucket = redis.call('HMGET', key, 'tokens', 'last_refresh')
local tokens = tonumber(bucket[1])
local last_refresh = tonumber(bucket[2])

-- 初始化桶（首次访问或已过期）
if tokens == nil then
    tokens = capacity
    last_refresh = now
end

-- 计算自上次刷新后应新增的令牌数
local time_passed = now - last_refresh
local new_tokens = time_passed * rate

if new_tokens > 0 then
    -- 补充令牌，但不超过容量
    tokens = math.min(capacity, tokens + new_tokens)
    last_refresh = now
end

-- 尝试消费一个令牌
if tokens >= 1 then
    tokens = tokens - 1
    -- 更新桶状态，并设置一个较长的过期时间（如2倍填满桶的时间）
    redis.call('HMSET', key, 'tokens', tokens, 'last_refresh', last_refresh)
    local ttl = math.ceil(capacity / rate) * 2
    redis.call('EXPIRE', key, ttl)
    return 1 -- 允许请求
else
    -- 令牌不足，返回0并更新上次刷新时间（避免一直不更新导致令牌无限累积的假象）
    redis.call('HSET', key, 'last_refresh', now)
    redis.call('EXPIRE', key, math.ceil(capacity / rate) * 2)
    return 0 -- 拒绝请求
end
