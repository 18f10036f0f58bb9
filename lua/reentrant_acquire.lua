-- Take a hold of a reentrant lock: the lock itself if it is free (as acquire.lua would, its
-- value the owner's), or one more hold if the owner holds it already.
-- KEYS[1] to KEYS[11] as in acquire.lua. KEYS[12]: the holds (a hash of hold ids, with the
-- lock's TTL). ARGV[1]: the owner's value, 'owner:' and its id (Owner::lock_value): the ':'
-- is a byte no token has, so that no mutex token can ever match it in extend.lua or
-- release.lua. ARGV[2] to ARGV[7] as in acquire.lua (never fair).
-- ARGV[8]: this hold's id (the attempt's token). ARGV[9]: '1' to raise the fencing counter
-- of a lock the owner holds here to the proposal (ARGV[3]) if it is below, '0' to leave it.
-- Returns what acquire.lua returns when it takes the lock, and {8, counter, others} when the
-- owner held it here already: one more hold, with the lock's fencing token on this node, and
-- others 1 when the owner has other holds here than this one (0: only this attempt's own,
-- granted in an earlier round).
--
-- A hold's fencing token is the lock's, the same for all the owner's holds, when the masters
-- that had the owner's lock form a quorum and agree on its token: any other owner that got
-- the lock in between met one of them without the owner's lock, and the owner's lock there
-- was taken again afterwards, above that owner's token. Otherwise (too few masters answer
-- with the owner's lock, say one is silent or missed the first hold), the client refuses the
-- hold while the owner has other holds, whose token another one would differ from, and asks
-- again later; where the owner's lock is only this attempt's own, granted afresh in an
-- earlier round on some masters (a stale proposal raised), it asks again at once with
-- ARGV[9] set and a proposal above every counter it was told: the lock then gets a fencing
-- token that a quorum records, which every later acquisition must exceed.
--
-- Holds are counted by id, not by number, so that every call is idempotent and a hold's
-- release can only ever remove that hold: a node that missed a hold (it failed to answer)
-- frees the lock no earlier than the holds it did record allow, and each hold is kept by the
-- quorum that granted it. The lock's TTL is never shortened by a hold: other holds count on
-- it.
--
-- mutex_acquire is acquire.lua, put in front of this script as a function (with queue.lua
-- marked.lua and fences.lua before it).
local lock, holds, hold, ttl = KEYS[1], KEYS[12], ARGV[8], tonumber(ARGV[2])

local function keep_for(at_least)
  if redis.call('PTTL', lock) < at_least then
    redis.call('PEXPIRE', lock, at_least)
  end
  local left = redis.call('PTTL', lock)
  redis.call('PEXPIRE', holds, left)
  -- The counter names the holds' token for as long as they may live (see fences.lua).
  keep_counter(KEYS[2], KEYS[11], left)
  record_expiry(KEYS[10], at_least)
end

if redis.call('GET', lock) == ARGV[1] then
  -- The deployment check acquire.lua makes, the longest TTL included: a hold may keep the
  -- lock longer than any TTL asked for before, and a master that loses its data must then be
  -- quarantined for that long.
  local read = redis.call('MGET', KEYS[5], KEYS[6], KEYS[7], KEYS[9])
  if not read[1] or not marked_for_me(read[4], ARGV[10]) then
    return {5}
  end
  if read[3] then
    return {6, redis.call('PTTL', KEYS[7])}
  end
  if ttl > tonumber(read[2] or '0') then
    redis.call('SET', KEYS[6], ARGV[2])
  end
  local others = redis.call('HLEN', holds) - redis.call('HEXISTS', holds, hold)
  redis.call('HSET', holds, hold, 1)
  keep_for(ttl)
  if ARGV[4] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[4])
    redis.call('HDEL', KEYS[4], ARGV[4])
  end
  -- A counter that is gone reads as its slot's floor (see fences.lua).
  local fencing = redis.call('MGET', KEYS[2], KEYS[11])
  local counter = tonumber(fencing[1] or fencing[2] or '0')
  if ARGV[9] == '1' and tonumber(ARGV[3]) > counter then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', redis.call('PTTL', lock))
    raise_floor(KEYS[11], ARGV[3], fencing[2])
    counter = tonumber(ARGV[3])
  end
  return {8, counter, others > 0 and 1 or 0}
end
local reply = mutex_acquire()
if reply[1] == 1 then
  -- A fresh lock: holds left by an earlier owner whose lock expired are not this one's.
  redis.call('DEL', holds)
  redis.call('HSET', holds, hold, 1)
  keep_for(ttl)
end
return reply
