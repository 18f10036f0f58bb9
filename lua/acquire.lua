-- Take a lock on this node if it is free.
-- KEYS[1]: lock key. ARGV[1]: holder token. ARGV[2]: TTL in milliseconds.
-- Returns {1, 0} when granted, {0, pttl} when another token holds it.
--
-- If the key already carries this token, the grant is renewed, not refused:
-- a retry after a lost reply must not count its own earlier grant against it.
local current = redis.call('GET', KEYS[1])
if current == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, 0}
end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
