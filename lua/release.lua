-- Delete a lock, only if this token holds it (compare-and-delete), and tell waiters.
-- KEYS[1]: lock key. ARGV[1]: holder token. ARGV[2]: the name's release channel, or '' to
-- stay silent (cleaning up after a failed attempt is no release worth waking anyone for:
-- waking waiters then only makes more attempts collide).
-- Returns 1 when deleted, 0 when the key was already gone, -1 when another token holds it
-- (nothing is changed then).
--
-- The token is published so that a waiter hearing the same release from several masters
-- wakes once.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
  end
  return 1
end
if current == false then
  return 0
end
return -1
