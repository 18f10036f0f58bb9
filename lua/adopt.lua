-- Hold a lock that releases handed to one waiter under different tokens on different nodes
-- (each node used the terms of the waiter's latest attempt it had seen) under one token and
-- one fencing token, so that a quorum of nodes agrees on both.
-- KEYS[1]: lock key. KEYS[2]: the name's fencing counter. KEYS[3]: the fencing floor of the
-- name's slot (see fences.lua).
-- ARGV[1]: the waiter's token found here. ARGV[2]: the token to hold the lock with.
-- ARGV[3]: the fencing token: the highest of those the releases chose.
-- Returns 1 when the lock is now held with ARGV[2] and ARGV[3]; 0 when it is not held with
-- ARGV[1] here any more (given back, expired), or when this node has granted a higher fencing
-- token since (nothing is changed then).
--
-- The key keeps its TTL: the lock lives no longer than the handover made it, and the waiter
-- counts its validity from the earliest of the attempts whose terms the handovers used.
-- Raising the counter to the chosen fencing token is what a grant of it would have done, so
-- any later quorum, which shares a node with this one, proposes above it.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- Read before anything is written: a lock in its last millisecond would leave the counter a
-- life of 0, which SET refuses, after the token had changed.
local left = redis.call('PTTL', KEYS[1])
if left < 1 then
  return 0
end
local read = redis.call('MGET', KEYS[2], KEYS[3])
local counter = tonumber(read[1] or read[2] or '0')
if counter > tonumber(ARGV[3]) then
  return 0
end
if ARGV[1] ~= ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
end
-- The counter lives as long as the lock (see fences.lua).
redis.call('SET', KEYS[2], ARGV[3], 'PX', left)
if tonumber(ARGV[3]) > tonumber(read[2] or '0') then
  redis.call('SET', KEYS[3], ARGV[3])
end
return 1
