-- Delete a lock, only if this token holds it (compare-and-delete).
-- KEYS[1]: lock key. ARGV[1]: holder token.
-- Returns 1 when deleted, 0 when the key was already gone, -1 when another
-- token holds it (nothing is changed then).
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if current == false then
  return 0
end
return -1
