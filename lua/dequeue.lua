-- Give up a waiter's place in the queue; if the lock is free, wake the waiter now first.
-- KEYS[1]: lock key. KEYS[2], KEYS[3]: the waiters' queue and its places' terms (as in
-- acquire.lua). ARGV[1]: the waiter id. ARGV[2]: the prefix of the wake channels (as in
-- release.lua). ARGV[3]: '1' for a read-write lock's writer (KEYS[1] is then the holders, see
-- holders.lua), whose record that it waits goes with its place: left there, it would keep new
-- readers out for the rest of the place's life with no writer waiting.
-- Returns 1 when the waiter had a place here, 0 otherwise.
--
-- A waiter that leaves may have been woken for a release it will not use; without passing the
-- turn on, the lock would sit free until the next waiter's retry delay ran out.
--
-- queue_helpers comes from queue.lua, put in front of this script.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], '#writer-waiting:' .. ARGV[1])
end
if removed == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  queue_helpers().wake_first(KEYS[2], KEYS[3], ARGV[2], nil)
end
return removed
