-- Push back a reentrant lock's expiry while its owner holds it with this hold, never
-- shortening it (other holds count on it), and its holds' with it.
-- KEYS[1] to KEYS[5] as in extend.lua. KEYS[6]: the holds. ARGV[1]: the owner's value (see
-- reentrant_acquire.lua). ARGV[2]: new TTL in milliseconds. ARGV[3]: the hold's id.
-- Returns what extend.lua returns: -1 also when the owner holds the lock here but not with
-- this hold (a token that holds nothing, a hold released already or never granted here), so
-- that only a hold's own masters vote for it.
--
-- record_expiry comes from marked.lua, keep_counter from fences.lua, put in front of this
-- script.
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('HEXISTS', KEYS[6], ARGV[3]) == 0 then
  return -1
end
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  record_expiry(KEYS[4], ttl)
end
local left = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[6], left)
-- The counter lives as long as the lock (see fences.lua).
local fence = keep_counter(KEYS[2], KEYS[5], left)
if ttl > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], ARGV[2])
end
return fence
