-- Give back a grant that did not make a quorum, and put the waiter back in line.
-- KEYS[1]: lock key. KEYS[2], KEYS[3]: the waiters' queue and its places' terms (as in
-- acquire.lua). KEYS[4]: the queue's live mark (see queue.lua). KEYS[5], KEYS[6], KEYS[7]:
-- the deployment's marker, quarantine, and the process the marker was made for. ARGV[1]: the
-- grant's token.
-- ARGV[2]: the waiter id. ARGV[3]: its priority. ARGV[4]: how long its place is kept, in
-- milliseconds. ARGV[5], ARGV[6], ARGV[7]: the terms of the waiter's attempt (its token, TTL
-- in milliseconds and proposed fencing token), or three empty strings for a place without
-- terms. ARGV[8]: the prefix of the wake channels (as in release.lua). ARGV[9]: the caller's
-- reading of this connection (see marked_for_me in marked.lua).
-- Returns 1 when deleted, 0 when the key was already gone, -1 when another token holds it.
--
-- A grant, by an attempt or by a release's handover, takes the waiter's place off this node's
-- queue, while the nodes that refused the same waiter keep it in line. A waiter that got no
-- quorum and gave the grants back would then be first on some nodes and missing on others,
-- and the next release would hand the lock to different waiters on different nodes: with
-- only a bare majority of the nodes reachable, nobody gets a quorum, again and again. So the
-- place comes back with the same priority (the waiter still waits): after a failed attempt,
-- with that attempt's terms, which the refusing nodes have; after a handover that fell short,
-- with none, because those terms were used already.
--
-- Only where the grant was still there to delete: from the grant to its give-back, the lock
-- was not free on this node, so no release can have handed it over to the waiter meanwhile,
-- taking the place for good. Anywhere else (a node that refused the attempt, and may have
-- handed the lock to the waiter since) the queue is left alone: a place put back there after
-- a handover would have the next release hand over, to this waiter, a token it has used
-- already, which its client could take for the lock it holds, and leave until its TTL.
--
-- A master that grants nothing (no marker, one made for another process, or quarantined)
-- takes no place either, as acquire.lua queues nobody there: a place with terms is a
-- hand-over to come.
--
-- An earlier waiter may have queued here while the grant stood; the lock now being free, it
-- is woken rather than left to its retry delay.
--
-- queue_helpers comes from queue.lua, marked_for_me from marked.lua, put in front of this
-- script.
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  if current == false then
    return 0
  end
  return -1
end
redis.call('DEL', KEYS[1])
local q = queue_helpers()
local node = redis.call('MGET', KEYS[5], KEYS[6], KEYS[7])
if node[1] and not node[2] and marked_for_me(node[3], ARGV[9]) then
  q.queue_place(KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
    ARGV[7])
end
q.wake_first(KEYS[2], KEYS[3], ARGV[8], ARGV[2])
return 1
