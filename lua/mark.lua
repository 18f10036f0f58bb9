-- Mark a node as part of the deployment, in quarantine if it lost its data.
-- KEYS[1]: the deployment marker (no expiry). KEYS[2]: the longest TTL asked for here, in
-- milliseconds (no expiry). KEYS[3]: the quarantine (expires when it ends).
-- ARGV[1]: the deployment's id. ARGV[2]: the quarantine in milliseconds (0: none). ARGV[3]:
-- the longest TTL the rest of the deployment records, in milliseconds.
-- Returns 1 when marked, 0 when another client marked it first (nothing is changed).
--
-- Every node carries the marker, written by the first client that found none on a quorum of
-- nodes (a new deployment). A node that lacks it while another node has it has lost its data
-- (a restart without persistence, a flush, an eviction) and with it any lock it granted; those
-- locks may still be held on other nodes for up to the longest TTL ever asked for. So it is
-- quarantined for that long, by its own clock, in the same step as it is marked again: every
-- client sees the same quarantine, whichever noticed the loss, and a node that loses its data
-- again loses the marker with it and is quarantined again. Until it is marked, acquire.lua
-- grants nothing on it. A marker that is evicted or deleted therefore fails safe.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
end
if tonumber(ARGV[3]) > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
