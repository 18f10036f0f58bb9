-- Push back a reader's, a writer's or a permit holder's expiry, only while it still holds.
-- KEYS[1]: the holders (see holders.lua). KEYS[2]: the fencing counter. KEYS[3]: the longest
-- TTL asked for on this node. ARGV[1]: holder token. ARGV[2]: new TTL in milliseconds.
-- ARGV[3]: what goes before the token in the set ('r:', 'w:', or '' for a permit).
-- Returns the holder's own fencing token when extended (the counter, for a hold granted before
-- holders' tokens were recorded), -1 when the hold is gone. A hold that is gone is never
-- recreated (see extend.lua).
local holders, me = KEYS[1], ARGV[3] .. ARGV[1]
local now = trim(holders)
if not redis.call('ZSCORE', holders, me) then
  return -1
end
redis.call('ZADD', holders, 'XX', now + tonumber(ARGV[2]), me)
keep_alive(holders, now)
if tonumber(ARGV[2]) > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], ARGV[2])
end
return recorded_fence(holders, me) or tonumber(redis.call('GET', KEYS[2]) or '0')
