-- Delete a lock, only if this token holds it (compare-and-delete), and wake the waiter whose
-- turn it is.
-- KEYS[1]: lock key. KEYS[2], KEYS[3]: the waiters' queue and its lapse times (as in
-- acquire.lua). ARGV[1]: holder token. ARGV[2]: the prefix of the wake channels, or '' to
-- stay silent (cleaning up after a failed attempt is no release worth waking anyone for).
-- A waiter id is '<client id>.<n>'; the waiter is woken on ARGV[2] .. '<client id>'.
-- Returns 1 when deleted, 0 when the key was already gone, -1 when another token holds it
-- (nothing is changed then).
--
-- Only the first waiter is named, so only it retries: waking every waiter would send all of
-- them at the nodes for a lock only the first may take.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    while true do
      local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
      if not first then
        break
      end
      if tonumber(redis.call('HGET', KEYS[3], first) or '0') > now then
        redis.call('PUBLISH', ARGV[2] .. string.match(first, '^[^.]*'), first)
        break
      end
      redis.call('ZREM', KEYS[2], first)
      redis.call('HDEL', KEYS[3], first)
    end
  end
  return 1
end
if current == false then
  return 0
end
return -1
