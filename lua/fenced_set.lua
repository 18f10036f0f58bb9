-- A write to a protected resource that refuses stale lock holders.
-- KEYS[1]: the resource's key. KEYS[2]: the highest fencing token it has accepted.
-- ARGV[1]: the writer's fencing token. ARGV[2]: the value to write.
-- Returns {1, fence} when written, {0, highest} when refused because a holder with a higher
-- token has written already.
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = tonumber(ARGV[1])
if fence < highest then
  return {0, highest}
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return {1, fence}
