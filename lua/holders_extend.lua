-- Push back a reader's, a writer's or a permit holder's expiry, only while it still holds.
-- KEYS[1]: the holders (see holders.lua). KEYS[2]: the fencing counter. KEYS[3]: the longest
-- TTL asked for on this node. KEYS[4]: the latest expiry (see marked.lua). KEYS[5]: the
-- fencing floor of the name's slot (see fences.lua). ARGV[1]: holder token. ARGV[2]: new TTL in milliseconds.
-- ARGV[3]: what goes before the token in the set ('r:', 'w:', or '' for a permit). ARGV[4],
-- for a permit: the semaphore's number of permits.
-- Returns the holder's own fencing token when extended (the counter, for a hold granted before
-- holders' tokens were recorded), -1 when the hold is gone, and {7, permits} (nothing
-- changed) when the semaphore is held here with another number of permits than ARGV[4], as
-- semaphore_acquire.lua does: the caller would count a quorum of that number. A hold that is
-- gone is never recreated (see extend.lua).
local holders, me = KEYS[1], ARGV[3] .. ARGV[1]
local now = trim(holders)
if not redis.call('ZSCORE', holders, me) then
  return -1
end
if ARGV[4] then
  local recorded = redis.call('ZSCORE', holders, '#permits')
  if recorded and -tonumber(recorded) ~= tonumber(ARGV[4]) then
    return {7, -tonumber(recorded)}
  end
end
redis.call('ZADD', holders, 'XX', now + tonumber(ARGV[2]), me)
keep_alive(holders, now, KEYS[2], KEYS[5])
record_expiry(KEYS[4], ARGV[2], now)
if tonumber(ARGV[2]) > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], ARGV[2])
end
return recorded_fence(holders, me) or tonumber(redis.call('GET', KEYS[2]) or '0')
