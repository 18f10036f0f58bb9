-- Read what this node knows of its deployment.
-- KEYS[1]: the deployment marker. KEYS[2]: the longest TTL asked for here, in milliseconds.
-- KEYS[3]: the quarantine. KEYS[4]: the run_id of the process that was last marked. KEYS[5]:
-- the latest expiry of what this node granted, in its milliseconds (see marked.lua).
-- Returns {marker or '', longest TTL, quarantine's PTTL (-2: none), marked run_id or '', how
-- long until the latest expiry in ms (0 once it has passed; -1: none recorded)}.
local read = redis.call('MGET', KEYS[1], KEYS[2], KEYS[4], KEYS[5])
local left = -1
if read[4] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  left = math.max(0, tonumber(read[4]) - now)
end
return {read[1] or '', tonumber(read[2] or '0'), redis.call('PTTL', KEYS[3]), read[3] or '', left}
