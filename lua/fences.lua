-- Shared by the scripts that set a name's fencing counter, other than acquire.lua (which does
-- it inline, on the hot path), and put in front of each: the counter's life and the floors.
--
-- Fencing tokens: a name's counter (`{prefix}fence:<name>`) holds the highest token granted
-- for it, and lives as long as a hold of the name may (its TTL follows the lock's, the holds'
-- or the holders'), so that it names the holder's token while there is one and a name no
-- longer used leaves no key. Every token granted also raises the floor of the name's slot
-- (`{prefix}fence-floor:<slot>`, one of 16,384, no expiry) to its token: a counter that is gone
-- reads as the floor, which is at or above every token granted for the name, so the name's
-- next token is above them all. A master keeps at most one floor per slot however many names
-- are used.
--
-- Made only in the scripts that use them: a script makes every function it defines again on
-- each run (see queue.lua).

-- Raises the fencing floor `floor` to `fence` (see the top of this file) if it is below.
-- `read`: the floor as read (false: none), nil when not read.
local function raise_floor(floor, fence, read)
  if read == nil then
    read = redis.call('GET', floor)
  end
  if tonumber(fence) > tonumber(read or '0') then
    redis.call('SET', floor, fence)
  end
end

-- Gives the name's fencing counter `counter` a life of `ms` milliseconds (the life of the holds
-- it names), raising the floor `floor` to it first: a counter that an earlier version left with
-- no expiry may be above the floor, and must not take its tokens with it when it goes. Returns
-- the counter's value (0 when there is none).
local function keep_counter(counter, floor, ms)
  local read = redis.call('MGET', counter, floor)
  if read[1] then
    raise_floor(floor, read[1], read[2])
    redis.call('PEXPIRE', counter, ms)
  end
  return tonumber(read[1] or '0')
end
