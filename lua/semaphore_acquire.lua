-- Take one of a semaphore's permits on this node, if fewer than that many holders hold one.
-- KEYS as in acquire.lua (KEYS[11] the fencing floor), with KEYS[1] the holders (see holders.lua). ARGV[1] to ARGV[7] as
-- in acquire.lua (ARGV[7] is ignored: a semaphore is not fair). ARGV[8]: the number of
-- permits. ARGV[9]: empty. ARGV[10] as in acquire.lua.
-- Returns what acquire.lua returns, and {7, permits} when the semaphore is held here with
-- another number of permits (its holders must all count the same).
--
-- A node counts only its own holders. What keeps a semaphore to its permits across nodes is
-- the quorum the client asks for (more than a majority when there is more than one permit;
-- see LockKind::quorum): P+1 holders would need more grants than N nodes of P permits have.
-- Fencing tokens grow as a mutex's do, since any two of those quorums share a node.
local refused = deployment_gate(KEYS[5], KEYS[6], KEYS[7], KEYS[9], ARGV[2], ARGV[10])
if refused then
  return refused
end
local holders, token, permits = KEYS[1], ARGV[1], tonumber(ARGV[8])
local now = trim(holders)
-- A counter that is gone reads as its slot's floor (see fences.lua).
local fencing = redis.call('MGET', KEYS[2], KEYS[11])
local counter = tonumber(fencing[1] or fencing[2] or '0')
local recorded = redis.call('ZSCORE', holders, '#permits')
local count, first = holding(holders)
if recorded and -tonumber(recorded) ~= permits and count > 0 then
  return {7, -tonumber(recorded)}
end
local mine = redis.call('ZSCORE', holders, token)
if not mine and count >= permits then
  queue_waiter(KEYS[3], KEYS[4], ARGV[4], ARGV[5], ARGV[6])
  return {0, counter}
end
local proposed = tonumber(ARGV[3])
-- The same holder re-sending the same proposal (a retry after a lost reply) is granted again.
if counter > proposed or (counter == proposed and not mine) then
  return {2, counter}
end
-- Its TTL is set below, with the holders' (keep_alive).
redis.call('SET', KEYS[2], ARGV[3])
raise_floor(KEYS[11], ARGV[3], fencing[2])
redis.call('ZADD', holders, now + tonumber(ARGV[2]), token)
record_fence(holders, token, proposed)
redis.call('ZADD', holders, -permits, '#permits')
keep_alive(holders, now, KEYS[2], KEYS[11])
record_expiry(KEYS[10], ARGV[2], now)
dequeue_waiter(KEYS[3], KEYS[4], ARGV[4])
return {1, proposed}
