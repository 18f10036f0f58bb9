-- Read what this node knows of its deployment.
-- KEYS[1]: the deployment marker. KEYS[2]: the longest TTL asked for here, in milliseconds.
-- KEYS[3]: the quarantine. KEYS[4]: the run_id of the process that was last marked.
-- Returns {marker or '', longest TTL, quarantine's PTTL (-2: none), marked run_id or ''}.
local read = redis.call('MGET', KEYS[1], KEYS[2], KEYS[4])
return {read[1] or '', tonumber(read[2] or '0'), redis.call('PTTL', KEYS[3]), read[3] or ''}
