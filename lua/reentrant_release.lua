-- Release one hold of a reentrant lock; the last hold releases the lock as release.lua does
-- (handing it over to, or waking, the next waiter).
-- KEYS[1] to KEYS[11] as in release.lua. KEYS[12]: the holds. ARGV[1]: the owner's value (see
-- reentrant_acquire.lua). ARGV[2], ARGV[3] as in release.lua. ARGV[4]: the hold's id. ARGV[5]
-- to ARGV[10]: empty. ARGV[11] as in release.lua.
-- Returns what release.lua returns, and 2 when this hold is gone and others keep the lock.
-- A hold this node does not record (a token that holds nothing, a hold released already, or
-- one this node never granted) changes nothing and answers -1, as a lock that another token
-- holds: the owner's lock is not this token's to release.
--
-- mutex_release is release.lua, put in front of this script as a function.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('HDEL', KEYS[12], ARGV[4]) == 0 then
    return -1
  end
  if redis.call('HLEN', KEYS[12]) > 0 then
    return 2
  end
  redis.call('DEL', KEYS[12])
end
return mutex_release()
