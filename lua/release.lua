-- Delete a lock, only if this token holds it (compare-and-delete), and hand it to the waiter
-- whose turn it is, or at least wake that waiter.
-- KEYS[1]: lock key. KEYS[2], KEYS[3]: the waiters' queue and its places' terms (as in
-- acquire.lua). KEYS[4]: the name's fencing counter. KEYS[5], KEYS[6]: the deployment's
-- marker and quarantine (a node without the one, or with the other, hands nothing over,
-- since its grants would not count). KEYS[7]: the queue's live mark (see queue.lua). KEYS[8],
-- KEYS[9]: the process the marker was made for and the latest expiry (see marked.lua), and
-- KEYS[10] the longest TTL asked for (see acquire.lua): a hand-over is a grant.
-- ARGV[1]: holder token. ARGV[2]: the prefix of the wake channels, or '' to stay silent
-- (cleaning up after a failed attempt is no release worth waking anyone for). ARGV[3]: the
-- released lock's fencing token, or 0 if unknown. ARGV[4]: '1' when the lock's own holder
-- releases it (it knows the lock held on a quorum): a lock already gone here is then handed
-- over too. ARGV[5] to ARGV[10], optional: a place to keep in line for the releaser's next
-- attempt, when the lock is handed over (waiter id, priority, life, token, TTL and proposal,
-- as acquire.lua queues them), or empty strings. ARGV[11]: the caller's reading of this
-- connection (see marked_for_me in marked.lua): a master marked for another process hands
-- nothing over and keeps no place, whoever releases.
-- A waiter id is '<client id>.<n>'; its client hears on ARGV[2] .. '<client id>'.
-- Returns 1 when deleted, 0 when the key was already gone, -1 when another token holds it
-- (nothing is changed then, but for a place kept as below); 10 more when the releaser's place
-- was kept as the lock was handed over; 20 more when it was kept where the lock was gone or
-- another's.
--
-- A client that takes the same lock again right after releasing it (a worker in a loop) would
-- send an attempt that every master refuses, only to queue it at the back of the line: half
-- the scripts of a contended hand-over. Its release queues that place instead, with the terms
-- of a next hold, in the same step as the hand-over that puts someone else ahead of it, and
-- the client's next acquire waits in line at once (src/lock/queue.rs). A place the client does
-- not take up is given back like any waiter's.
--
-- A master can fall out of step with the line: where a release hands this master's lock to a
-- different waiter than the quorum's (its queue lost a place the others kept, or a message came
-- late), the holders' releases after it find the lock another's here. Without the place below,
-- each such release would leave its releaser out of this master's queue, until the queue is
-- empty and the lock gone, and then no release hands this master's lock over again: the line
-- runs on the other masters alone, with no master to spare (seen under contention on a
-- multi-thread runtime, where two of five masters stopped handing over for good).
-- So a looping holder keeps its place here too when the lock is gone or another's: the queue
-- gets the places, by the same priorities, that the other masters have, and a holder's release
-- hands the free lock here to the first of them (below), back in step with the line. Where the
-- holder's release finds the lock its own and no one waiting, no place is kept: that is a
-- holder with no one behind it, and its next acquire must try, not wait.
--
-- A lock gone here while its holder held it on a quorum (this master missed a hand-over, or
-- the lock expired here) leaves this master out of every later hand-over: each release finds
-- nothing here, and waiters' attempts here are given back. So the holder's release hands a
-- free lock here to the first waiter as well, exactly as that waiter's own attempt would take
-- it (first in line, on its terms, with a fencing token above the counter), and the lock
-- passes over every master again.
--
-- Only the first waiter is named, so only it acts: waking every waiter would send all of them
-- at the nodes for a lock only the first may take. Where it can, the release takes the lock
-- for that waiter on the terms of its last refused attempt, exactly as that attempt would
-- have: its TTL, a fencing token above this node's counter, which it raises, and a token made
-- of the waiter id, '/' and the attempt's token (so that no cleanup of the attempt can touch
-- it, and so that the waiter's next attempt can tell the lock is its own even if this
-- message is lost). The fencing token is one above the larger of the attempt's proposal and
-- the released lock's, the same on every node of this release, so that a quorum of them
-- grants one value. Above the proposal, not at it: a node that granted that very attempt,
-- which fell short of a quorum and was given back with the waiter's place kept on its terms
-- (give_back.lua), has its counter at the proposal, and a hand-over at it would fail there:
-- the node would only wake the waiter, which takes the lock on the others; with the lock free
-- here, the next waiter woken here has its attempt granted here and given back in turn, and
-- this node stays out of the line for as long as the line runs. The message then reads
-- '<waiter id> <token> <fence> <lock key>', and the waiter holds the lock once a quorum has
-- said so (a client whose waiter is gone releases it: the key says which lock),
-- counting its validity from the start of that attempt, which came before any of the grants.
-- Otherwise (no terms, or the fencing token would not be above the counter) the message is
-- just '<waiter id>', and the waiter tries at once.
--
-- queue_helpers comes from queue.lua, marked_for_me and record_expiry from marked.lua,
-- raise_floor from fences.lua, put in front of this script.

-- Whether this master may grant: it carries the marker, made for its process, and is not
-- quarantined. `node` is the marker, the quarantine and the process the marker was made for.
local function may_grant(node)
  return node[1] and not node[2] and marked_for_me(node[3], ARGV[11])
end

-- Keeps the releaser's place (ARGV[5] to ARGV[10]) on a master where the release handed
-- nothing over; not on one that grants nothing (see may_grant), where acquire.lua queues
-- nobody either. `deployment` is what may_grant reads, when already read, nil otherwise.
-- Whether it did.
local function keep_place_out_of_step(q, deployment)
  if not ARGV[5] or ARGV[5] == '' then
    return false
  end
  if not may_grant(deployment or redis.call('MGET', KEYS[5], KEYS[6], KEYS[8])) then
    return false
  end
  q = q or queue_helpers()
  q.queue_place(KEYS[2], KEYS[3], KEYS[7], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9],
    ARGV[10])
  return true
end

-- The lock and the queue's live mark first: without a live place in the queue, nothing else
-- is needed. Each call from a script costs about as much as a command of its own.
local read = redis.call('MGET', KEYS[1], KEYS[7])
local current = read[1]
local mine = current == ARGV[1]
if mine or (current == false and ARGV[4] == '1') then
  local released = mine and 1 or 0
  local q, first, terms, deployment = nil, nil, nil, nil
  if ARGV[2] ~= '' and read[2] then
    q = queue_helpers()
    first, terms = q.first_waiter(KEYS[2], KEYS[3])
  end
  if first then
    local _, token, ttl, proposal = string.match(terms, '^(%d+) (%S+) (%d+) (%d+)$')
    local channel = q.channel_of(ARGV[2], first)
    local node = redis.call('MGET', KEYS[4], KEYS[5], KEYS[6], KEYS[8], KEYS[9], KEYS[10],
      KEYS[11])
    deployment = { node[2], node[3], node[4] }
    -- A counter that is gone reads as its slot's floor (see fences.lua).
    local counter = tonumber(node[1] or node[7] or '0')
    local fence = math.max(tonumber(proposal or '0') + 1, tonumber(ARGV[3]) + 1)
    -- Fencing tokens stay below 2^53, where Lua's numbers are exact.
    if token and tonumber(ttl) > 0 and fence > counter and fence <= 9007199254740991
        and may_grant(deployment) then
      fence = string.format('%d', fence)
      -- The counter lives as long as the lock handed over (see fences.lua).
      redis.call('SET', KEYS[4], fence, 'PX', ttl)
      raise_floor(KEYS[11], fence, node[7])
      token = first .. '/' .. token
      -- Replaces the released lock's key, value and TTL at once.
      redis.call('SET', KEYS[1], token, 'PX', ttl)
      -- The terms' TTL may be one this master never recorded (a place kept with the terms of
      -- a releaser's next hold): a master that loses its data is quarantined by both records.
      record_expiry(KEYS[9], ttl, q.now_ms(), node[5])
      if tonumber(ttl) > tonumber(node[6] or '0') then
        redis.call('SET', KEYS[10], ttl)
      end
      redis.call('ZREM', KEYS[2], first)
      redis.call('HDEL', KEYS[3], first)
      redis.call('PUBLISH', channel, first .. ' ' .. token .. ' ' .. fence .. ' ' .. KEYS[1])
      if ARGV[5] and ARGV[5] ~= '' then
        q.queue_place(KEYS[2], KEYS[3], KEYS[7], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9],
          ARGV[10])
        return released + 10
      end
      return released
    end
    redis.call('PUBLISH', channel, first)
  end
  if mine then
    redis.call('DEL', KEYS[1])
    return released
  end
  return keep_place_out_of_step(q, deployment) and 20 or 0
end
if current == false then
  return 0
end
return keep_place_out_of_step(nil, nil) and 19 or -1
