-- Take a lock on this node if it is free, with a fencing token above every earlier one.
-- KEYS[1]: lock key. KEYS[2]: the name's fencing counter (no expiry).
-- ARGV[1]: holder token. ARGV[2]: TTL in milliseconds. ARGV[3]: proposed fencing token.
-- Returns {1, fence} when granted; {0, pttl, holder's fence} when another token holds the
-- lock (the fence names the holder without giving its token away, so that a client can tell
-- one holder from a split vote); {2, counter} when the proposal is not above this node's
-- counter (propose higher).
--
-- Granting only above the counter, and raising the counter in the same script, is what makes
-- fencing tokens grow in the order acquisitions happen: any two quorums share a node, and
-- that node saw the later acquisition only after it had recorded the earlier one's token.
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0')}
end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
local proposed = tonumber(ARGV[3])
-- The same holder re-sending the same proposal (a retry after a lost reply) is granted again;
-- anything else must be strictly above the counter.
if counter > proposed or (counter == proposed and current ~= ARGV[1]) then
  return {2, counter}
end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, proposed}
