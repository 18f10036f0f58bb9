-- Take a reader's or the writer's share of a read-write lock on this node.
-- KEYS as in acquire.lua (KEYS[11] the fencing floor), with KEYS[1] the holders (see holders.lua): readers as 'r:<token>',
-- the writer as 'w:<token>'. ARGV[1] to ARGV[7] as in acquire.lua (ARGV[7] is ignored: the
-- lock is not fair). ARGV[8]: 'r' for a reader, 'w' for the writer. ARGV[9]: for a reader,
-- '1' to raise the fencing counter to the proposal (ARGV[3]) if it is below, '0' to leave it.
-- ARGV[10] as in acquire.lua. Returns what acquire.lua returns, except that a reader is granted with {8, counter, 0}: the
-- writers' fencing counter on this node, the last writer's token. When the reader's masters
-- do not agree on it (a writer's failed attempt raised it on some), the client asks again
-- with ARGV[9] set and a proposal above them all, so that the reader's token is one a quorum
-- records, which the next writer must exceed (see fence_of in src/lock/attempt.rs).
--
-- A writer is granted only with no holder at all, a reader only without a writer: any two
-- quorums share a node, which refuses the second of a writer and anyone else. A writer that
-- must wait records '#writer-waiting:<waiter id>' for as long as its place in the queue
-- lasts (a record of its own, which goes with its place when it gives up: see dequeue.lua),
-- and new readers are refused ({3}) while any such record is there, so that a stream of
-- readers cannot starve writers.
local refused = deployment_gate(KEYS[5], KEYS[6], KEYS[7], KEYS[9], ARGV[2], ARGV[10])
if refused then
  return refused
end
local holders, reader = KEYS[1], ARGV[8] == 'r'
local me = (reader and 'r:' or 'w:') .. ARGV[1]
local now = trim(holders)
-- A counter that is gone reads as its slot's floor (see fences.lua).
local fencing = redis.call('MGET', KEYS[2], KEYS[11])
local counter = tonumber(fencing[1] or fencing[2] or '0')
local mine = redis.call('ZSCORE', holders, me)
if not mine then
  local writer_until, readers, readers_until, writer_waits = nil, 0, now, false
  local all = redis.call('ZRANGEBYSCORE', holders, 0, '+inf', 'WITHSCORES')
  for i = 1, #all, 2 do
    local kind, at = string.sub(all[i], 1, 2), tonumber(all[i + 1])
    if kind == 'w:' then
      writer_until = at
    elseif kind == 'r:' then
      readers = readers + 1
      readers_until = math.max(readers_until, at)
    elseif string.sub(all[i], 1, 15) == '#writer-waiting' then
      writer_waits = true
    end
  end
  if writer_until then
    queue_waiter(KEYS[3], KEYS[4], ARGV[4], ARGV[5], ARGV[6])
    return {0, counter}
  end
  if reader and writer_waits then
    queue_waiter(KEYS[3], KEYS[4], ARGV[4], ARGV[5], ARGV[6])
    return {3}
  end
  if not reader and readers > 0 then
    if ARGV[4] ~= '' and ARGV[6] ~= '0' then
      redis.call('ZADD', holders, now + tonumber(ARGV[6]), '#writer-waiting:' .. ARGV[4])
      keep_alive(holders, now, KEYS[2], KEYS[11])
      queue_waiter(KEYS[3], KEYS[4], ARGV[4], ARGV[5], ARGV[6])
    end
    return {0, counter}
  end
end
local fence = counter
if reader and ARGV[9] == '1' and tonumber(ARGV[3]) > counter then
  -- Its TTL is set below, with the holders' (keep_alive).
  redis.call('SET', KEYS[2], ARGV[3])
  raise_floor(KEYS[11], ARGV[3], fencing[2])
  fence = tonumber(ARGV[3])
end
if not reader then
  local proposed = tonumber(ARGV[3])
  -- The same writer re-sending the same proposal (a retry after a lost reply) is granted
  -- again; anything else must be strictly above the counter.
  if counter > proposed or (counter == proposed and not mine) then
    return {2, counter}
  end
  redis.call('SET', KEYS[2], ARGV[3])
  raise_floor(KEYS[11], ARGV[3], fencing[2])
  -- Its own wait is over; other writers' records stay. (A bare '#writer-waiting' is one
  -- that an earlier version shared between writers.)
  redis.call('ZREM', holders, '#writer-waiting', '#writer-waiting:' .. ARGV[4])
  fence = proposed
end
redis.call('ZADD', holders, now + tonumber(ARGV[2]), me)
record_fence(holders, me, fence)
keep_alive(holders, now, KEYS[2], KEYS[11])
record_expiry(KEYS[10], ARGV[2], now)
dequeue_waiter(KEYS[3], KEYS[4], ARGV[4])
if reader then
  return {8, fence, 0}
end
return {1, fence}
