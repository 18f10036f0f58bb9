-- Push back a lock's expiry, only while this token still holds it.
-- KEYS[1]: lock key. KEYS[2]: the name's fencing counter (which lives as long as the lock: see
-- fences.lua). KEYS[3]: the longest TTL asked for
-- on this node (see acquire.lua). KEYS[4]: the latest expiry (see marked.lua). KEYS[5]: the
-- fencing floor of the name's slot (see fences.lua).
-- ARGV[1]: holder token. ARGV[2]: new TTL in milliseconds.
-- Returns the holder's fencing token (the counter, which nobody can raise while the lock is
-- held here) when extended, -1 when the key is gone or held by another token.
--
-- A key that is gone is never recreated: a node that lost the lock (expiry, restart) must not
-- be made to vote for a holder it no longer knows.
--
-- record_expiry comes from marked.lua, keep_counter from fences.lua, put in front of this
-- script.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  record_expiry(KEYS[4], ARGV[2])
  if tonumber(ARGV[2]) > tonumber(redis.call('GET', KEYS[3]) or '0') then
    redis.call('SET', KEYS[3], ARGV[2])
  end
  return keep_counter(KEYS[2], KEYS[5], ARGV[2])
end
return -1
