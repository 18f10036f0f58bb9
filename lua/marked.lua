-- Shared by the scripts that grant (a lock, a hand-over, a place in line) or extend, and put in
-- front of each: whether this master is the process its deployment marker was made for, and
-- the record of when the locks it granted may expire.


-- Whether the deployment's marker was made for this very process, or this master keeps every
-- write. A master that does not, carrying a marker made for another process, came back from
-- older data (a snapshot taken before the locks it granted last) and grants nothing, hands
-- nothing over and takes no place in line until a client marks it again, in quarantine:
-- checked here, whatever the calling client knows. `marked_run` is the process the marker was
-- made for (`{prefix}marked-run`, false when none is recorded: marked again first). `process`
-- is the caller's reading of this very connection, which cannot outlive the process it was
-- made to: its `run_id`, '*' when it read the master durable (AOF with `appendfsync always`)
-- or turned quarantine off, or '' when its reading is in the same pipeline as this call: the
-- master is asked then.
local function marked_for_me(marked_run, process)
  if process == '*' then
    return true
  end
  if not process or process == '' then
    process = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  end
  return marked_run == process
end

-- Records that a lock granted (or extended, or handed over) here now with `ttl` milliseconds
-- may live until then, by this master's clock: `{prefix}latest-expiry` holds the latest such
-- moment in milliseconds. A master that loses its data is quarantined until the latest expiry
-- the masters that kept theirs record (see mark.lua), not for the longest TTL ever asked. The
-- record is pushed up to a second further than needed (never more than the TTL), so that a
-- line of locks writes it once a second rather than at every grant. `now`: this master's time
-- in ms, if read already; `recorded`: the record as read (false: there is none), nil when not
-- read.
local function record_expiry(key, ttl, now, recorded)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  if recorded == nil then
    recorded = redis.call('GET', key)
  end
  ttl = tonumber(ttl)
  if tonumber(recorded or '0') < now + ttl then
    redis.call('SET', key, string.format('%d', now + ttl + math.min(ttl, 1000)))
  end
end
