-- Take a lock on this node if it is free, with a fencing token above every earlier one, in
-- the order waiters queued for it.
-- KEYS[1]: lock key. KEYS[2]: the name's fencing counter (no expiry). KEYS[3]: the waiters'
-- queue (sorted set of waiter ids, by priority). KEYS[4]: each queued place's terms (hash of
-- waiter id to '<lapse> <token> <ttl> <proposal>': when the place lapses, in this node's
-- milliseconds, and the attempt it came from, on whose terms a release may hand the lock
-- straight over; see release.lua). KEYS[5], KEYS[6], KEYS[7]: the deployment's marker, the
-- longest TTL asked for here, and the quarantine (see mark.lua). KEYS[8]: the queue's live
-- mark (see queue.lua). KEYS[9], KEYS[10]: the process the marker was made for and the latest
-- expiry (see marked.lua). KEYS[11]: the fencing floor of the name's slot (see fences.lua).
-- ARGV[1]: holder token. ARGV[2]: TTL in milliseconds. ARGV[3]: proposed fencing token.
-- ARGV[4]: the caller's waiter id, or '' for a caller that does not wait. ARGV[5]: its
-- priority (lower goes first). ARGV[6]: how long its place is kept, in milliseconds (0: the
-- caller takes no place). ARGV[7]: '1' for a fair caller, '0' for one that takes a free lock
-- whatever the queue says (it queues only to be woken, without terms). ARGV[8], ARGV[9]: the
-- kind's own (see reentrant_acquire.lua, rw_acquire.lua, semaphore_acquire.lua). ARGV[10]:
-- the caller's reading of this connection (see marked_for_me in marked.lua).
-- Returns {1, fence} when granted; {0, holder's fence} when another token holds the lock (the
-- fence names the holder without giving its token away, so that a client can tell one holder
-- from a split vote); {2, counter} when the proposal is not above this node's
-- counter (propose higher); {3} when the lock is free but an earlier waiter goes first;
-- {4, token, fence} when a release handed the lock to the calling waiter (see release.lua);
-- {5} when this node carries no deployment marker, or one made for another process while it
-- does not keep every write; {6, pttl} while it is quarantined.
--
-- Granting only above the counter, and raising the counter in the same script, is what makes
-- fencing tokens grow in the order acquisitions happen: any two quorums share a node, and
-- that node saw the later acquisition only after it had recorded the earlier one's token.
--
-- The queue decides only who may take a free lock, never whether a lock is free: safety rests
-- on the lock key alone. Every client gives a waiter the same priority on every node, so the
-- nodes agree on who goes first, and a release wakes only that waiter instead of every
-- contender at once. Places lapse unless refreshed, so a waiter that died holds nobody up for
-- longer than its place lasts.
--
-- queue_helpers comes from queue.lua, marked_for_me and record_expiry from marked.lua, put in
-- front of this script.

-- Takes or refreshes the caller's place in the queue, with the queue's helpers `q`. A place
-- with no life is not taken: the caller waits but is out of line (it reaches too few nodes to
-- take the lock, and must not hold up callers that can). It takes all it needs as arguments:
-- a function that used this script's locals would cost more to make on every run.
local function queue_caller(q)
  if ARGV[4] ~= '' and ARGV[6] ~= '0' then
    if ARGV[7] ~= '0' then
      q.queue_place(KEYS[3], KEYS[4], KEYS[8], ARGV[4], ARGV[5], ARGV[6], ARGV[1], ARGV[2],
        ARGV[3])
    else
      q.queue_place(KEYS[3], KEYS[4], KEYS[8], ARGV[4], ARGV[5], ARGV[6], '', '', '')
    end
  end
end

-- One read for every key: each call from a script costs about as much as a command of its own.
local read = redis.call('MGET', KEYS[1], KEYS[2], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9],
  KEYS[10], KEYS[11])
-- A counter that is gone (no hold of the name lives) reads as its slot's floor.
local current, counter = read[1], tonumber(read[2] or read[9] or '0')
-- A node without the marker may have lost locks it granted (a restart without persistence, a
-- flush, an eviction), and so may one back from a snapshot, marker and all: it grants nothing
-- until a client has marked it, in quarantine if another node says the deployment was in use.
-- Checked here, in the same step as the grant, so that no reconnect, flush or restart between
-- two health readings can slip past it.
if not read[3] or not marked_for_me(read[7], ARGV[10]) then
  return {5}
end
if read[5] then
  return {6, redis.call('PTTL', KEYS[7])}
end
-- The longest TTL asked for: how long a node that loses its data must be quarantined.
if tonumber(ARGV[2]) > tonumber(read[4] or '0') then
  redis.call('SET', KEYS[6], ARGV[2])
end
if current and current ~= ARGV[1] then
  -- A release handed the lock to this very waiter (release.lua), whose message may have been
  -- lost: say so, with the lock's token and fencing token, instead of refusing.
  if ARGV[4] ~= '' and string.sub(current, 1, #ARGV[4] + 1) == ARGV[4] .. '/' then
    return {4, current, counter}
  end
  queue_caller(queue_helpers())
  return {0, counter}
end
-- Whether the caller may have a place here to give up when granted: with no live place in the
-- queue it has none, and the grant skips two calls.
local queued_here = read[6] ~= false
if not current and ARGV[7] ~= '0' and queued_here then
  local q = queue_helpers()
  local first = q.first_waiter(KEYS[3], KEYS[4])
  queued_here = first ~= nil
  if first and first ~= ARGV[4] then
    -- Queued here, the caller may come first after all (it was queued on other nodes
    -- earlier, with the priority it has everywhere).
    queue_caller(q)
    if q.first_waiter(KEYS[3], KEYS[4]) ~= ARGV[4] then
      return {3}
    end
  end
end
local proposed = tonumber(ARGV[3])
-- The same holder re-sending the same proposal (a retry after a lost reply) is granted again;
-- anything else must be strictly above the counter.
if counter > proposed or (counter == proposed and current ~= ARGV[1]) then
  return {2, counter}
end
-- The counter lives as long as the lock: the hold it names (see fences.lua).
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
if proposed > tonumber(read[9] or '0') then
  redis.call('SET', KEYS[11], ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
record_expiry(KEYS[10], ARGV[2], nil, read[8])
if ARGV[4] ~= '' and queued_here then
  redis.call('ZREM', KEYS[3], ARGV[4])
  redis.call('HDEL', KEYS[4], ARGV[4])
end
return {1, proposed}
