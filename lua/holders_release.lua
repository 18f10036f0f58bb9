-- Give up a reader's, a writer's or a permit holder's hold, and wake waiters that may fit now.
-- KEYS[1]: the holders (see holders.lua). KEYS[2], KEYS[3]: the waiters' queue and its
-- places' terms. ARGV[1]: holder token. ARGV[2]: the prefix of the wake channels, or '' to
-- stay silent (as in release.lua). ARGV[3]: what goes before the token in the set ('r:',
-- 'w:', or '' for a permit).
-- Returns 1 when the hold was removed; when this token holds nothing here, as release.lua
-- does: 0 when nobody holds the lock (it is gone), -1 when others do (nothing is changed).
local holders = KEYS[1]
local now = trim(holders)
local me = ARGV[3] .. ARGV[1]
local removed = redis.call('ZREM', holders, me)
if removed == 1 then
  redis.call('ZREM', holders, fence_record(me))
end
keep_alive(holders, now)
if removed == 1 then
  -- Several waiters may fit now (readers after a writer, a permit for whoever is quickest);
  -- those that do not are back in line at their next attempt.
  wake_waiters(KEYS[2], KEYS[3], ARGV[2], 8)
  return 1
end
if holding(holders) > 0 then
  return -1
end
return 0
