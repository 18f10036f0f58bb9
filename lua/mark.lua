-- Mark a node as part of the deployment, in quarantine if it lost its data.
-- KEYS[1]: the deployment marker (no expiry). KEYS[2]: the longest TTL asked for here, in
-- milliseconds (no expiry). KEYS[3]: the quarantine (expires when it ends). KEYS[4]: the
-- run_id of the process marked last (no expiry). KEYS[5]: the latest expiry (see marked.lua).
-- ARGV[1]: the deployment's id. ARGV[2]: the quarantine in milliseconds (0: none). ARGV[3]:
-- the longest TTL the rest of the deployment records, in milliseconds. ARGV[4]: the run_id of
-- the node's process as the client read it ('' when not read).
-- Returns 1 when marked, 0 when it was marked already for this process, or another client
-- marked it first (nothing is changed but, for a marker older than the run_id's record, the
-- record).
--
-- Every node carries the marker, written by the first client that found none on a quorum of
-- nodes (a new deployment). A node that lacks it while another node has it has lost its data
-- (a restart without persistence, a flush, an eviction) and with it any lock it granted; those
-- locks may still be held on other nodes until the latest expiry those nodes record, and
-- never longer than the longest TTL ever asked for. So it is quarantined for that long (the
-- client works it out), by its own clock, in the same step as it is marked again: every
-- client sees the same quarantine, whichever noticed the loss, and a node that loses its data
-- again loses the marker with it and is quarantined again. Until it is marked, acquire.lua
-- grants nothing on it. A marker that is evicted or deleted therefore fails safe.
--
-- A node that does not keep every write (no AOF with fsync always) may also come back with
-- the marker and older data: a snapshot taken before the locks it granted last. The marker
-- records the process it was made for; a client that reads another process, on a node that is
-- not durable, takes the node as one that lost its data (it counts none of its votes) and
-- marks it again here, in quarantine.
local marker = redis.call('GET', KEYS[1])
if marker then
  local marked_run = redis.call('GET', KEYS[4])
  if ARGV[4] == '' or marked_run == ARGV[4] then
    return 0
  end
  if not marked_run then
    -- Marked before the process was recorded: this process is taken as the marked one.
    redis.call('SET', KEYS[4], ARGV[4])
    return 0
  end
end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
end
if tonumber(ARGV[3]) > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[4], ARGV[4])
end
-- A marked master records the latest expiry from now on: a master without the record was
-- marked by an earlier version, whose grants recorded only the longest TTL.
if redis.call('EXISTS', KEYS[5]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[5], string.format('%d', tonumber(t[1]) * 1000))
end
return 1
