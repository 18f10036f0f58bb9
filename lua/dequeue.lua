-- Give up a waiter's place in the queue; if the lock is free, wake the waiter now first.
-- KEYS[1]: lock key. KEYS[2], KEYS[3]: the waiters' queue and its places' terms (as in
-- acquire.lua). ARGV[1]: the waiter id. ARGV[2]: the prefix of the wake channels (as in
-- release.lua).
-- Returns 1 when the waiter had a place here, 0 otherwise.
--
-- A waiter that leaves may have been woken for a release it will not use; without passing the
-- turn on, the lock would sit free until the next waiter's retry delay ran out.
--
-- queue_helpers comes from queue.lua, put in front of this script.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if removed == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  queue_helpers().wake_first(KEYS[2], KEYS[3], ARGV[2], nil)
end
return removed
