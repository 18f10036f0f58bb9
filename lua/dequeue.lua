-- Give up a waiter's place in the queue; if the lock is free, wake the waiter now first.
-- KEYS[1]: lock key. KEYS[2], KEYS[3]: the waiters' queue and its places' terms (as in
-- acquire.lua). ARGV[1]: the waiter id. ARGV[2]: the prefix of the wake channels (as in
-- release.lua).
-- Returns 1 when the waiter had a place here, 0 otherwise.
--
-- A waiter that leaves may have been woken for a release it will not use; without passing the
-- turn on, the lock would sit free until the next waiter's retry delay ran out.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if removed == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not first then
      break
    end
    local terms = redis.call('HGET', KEYS[3], first) or '0'
    if tonumber(string.match(terms, '^%d+') or '0') > now then
      redis.call('PUBLISH', ARGV[2] .. string.match(first, '^[^.]*'), first)
      break
    end
    redis.call('ZREM', KEYS[2], first)
    redis.call('HDEL', KEYS[3], first)
  end
end
return removed
