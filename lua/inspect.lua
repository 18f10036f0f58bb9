-- What this node holds of a lock, without saying who holds it (no token, no owner): for
-- inspect. Reads only.
-- KEYS[1]: the lock key: a mutex's or a reentrant lock's (the holder), or a read-write lock's
-- or a semaphore's holders (see holders.lua). KEYS[2]: a reentrant lock's holds.
-- ARGV[1]: 'mutex', 'reentrant', or 'holders' for a read-write lock or a semaphore.
-- Returns {pttl, holders, readers, writers, holds, permits, writer waiting}: pttl in
-- milliseconds until the last holder here lapses (-2 when none holds); how many hold; of
-- them, readers and writers (read-write lock); a reentrant lock's holds; the permits a
-- semaphore's holders asked for (0 when none is recorded); 1 while a writer waits here.
local key = KEYS[1]
if ARGV[1] ~= 'holders' then
  local pttl = redis.call('PTTL', key)
  if pttl == -2 then
    return {-2, 0, 0, 0, 0, 0, 0}
  end
  local holds = 0
  if ARGV[1] == 'reentrant' then
    holds = redis.call('HLEN', KEYS[2])
  end
  return {pttl, 1, 0, 0, holds, 0, 0}
end
-- Holds that have lapsed but are not trimmed yet (only a write trims) are not counted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holders, readers, writers, last, permits, waiting = 0, 0, 0, nil, 0, 0
local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
for i = 1, #all, 2 do
  local member, at = all[i], tonumber(all[i + 1])
  if member == '#permits' then
    permits = -at
  elseif string.sub(member, 1, 15) == '#writer-waiting' then
    if at > now then
      waiting = 1
    end
  elseif string.sub(member, 1, 1) == '#' then
    -- Another record (a holder's fencing token): no holder.
  elseif at > now then
    holders = holders + 1
    local kind = string.sub(member, 1, 2)
    if kind == 'r:' then
      readers = readers + 1
    elseif kind == 'w:' then
      writers = writers + 1
    end
    last = last and math.max(last, at) or at
  end
end
if holders == 0 then
  return {-2, 0, 0, 0, 0, permits, waiting}
end
return {last - now, holders, readers, writers, 0, permits, waiting}
