-- Shared by the scripts that use a lock's queue of waiters, and put in front of each of them.
-- The queue is a sorted set of waiter ids by priority; each place's terms are a hash field
-- '<lapse> [<token> <ttl> <proposal>]' (see acquire.lua). The queue's live mark is a string
-- key that lasts as long as the queue's keys: without it, no place in the queue is live, and
-- an acquire or a release that finds it missing need not look at the queue.
--
-- The helpers are made only by a script that needs them, with queue_helpers(). A script makes
-- every function it defines again on each run, and these five cost a master, on each run of an
-- uncontended acquire or release that never looks at the queue, about as much as a command.

local function queue_helpers()
  -- This node's time in milliseconds, read once per script: a script runs at one instant, and
  -- each call from a script costs about as much as a command of its own.
  local now_read
  local function now_ms()
    if not now_read then
      local t = redis.call('TIME')
      now_read = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return now_read
  end

  -- The first waiter whose place has not lapsed, and its terms; lapsed places met on the way
  -- are dropped.
  local function first_waiter(queue, terms)
    local now
    while true do
      -- Arguments go as strings: Redis formats a Lua number with snprintf, which showed as
      -- 1.6% of a master's time in an uncontended run.
      local first = redis.call('ZRANGE', queue, '0', '0')[1]
      if not first then
        return nil
      end
      now = now or now_ms()
      local found = redis.call('HGET', terms, first) or '0'
      if tonumber(string.match(found, '^%d+') or '0') > now then
        return first, found
      end
      redis.call('ZREM', queue, first)
      redis.call('HDEL', terms, first)
    end
  end

  -- Takes or refreshes a waiter's place: its priority, and its terms (see acquire.lua), kept
  -- for `life` milliseconds. Without a token, the place has no terms: a release only wakes
  -- it. `live` is the queue's live mark, or nil for a queue that has none (the read-write
  -- lock's and the semaphore's, which every acquire looks at).
  local function queue_place(queue, terms, live, waiter, priority, life, token, ttl, proposal)
    life = tonumber(life)
    redis.call('ZADD', queue, priority, waiter)
    if token == '' then
      redis.call('HSET', terms, waiter, string.format('%d', now_ms() + life))
    else
      redis.call('HSET', terms, waiter,
        string.format('%d %s %s %s', now_ms() + life, token, ttl, proposal))
    end
    -- The queue lasts as long as its longest-lived place. It is given twice a place's life at
    -- a time, so that a line of waiters renews it once per life, not at every place taken
    -- (places lapse by their own terms; the keys only must not outlive the last of them by
    -- much). The live mark is set with the same expiry at the same time, and so outlasts
    -- every live place: a queue made afresh (its last place taken off, say) has no expiry,
    -- and is given one here, with the mark.
    if redis.call('PTTL', queue) < life then
      local keep = string.format('%d', 2 * life)
      redis.call('PEXPIRE', queue, keep)
      redis.call('PEXPIRE', terms, keep)
      if live then
        redis.call('SET', live, '1', 'PX', keep)
      end
    end
  end

  -- The channel that reaches a waiter's client: the prefix and the client part of its id
  -- ('<client id>.<n>').
  local function channel_of(prefix, waiter)
    return prefix .. string.match(waiter, '^[^.]*')
  end

  -- Wakes the first waiter, unless it is `except` (a waiter about to try anyway).
  local function wake_first(queue, terms, prefix, except)
    local first = first_waiter(queue, terms)
    if first and first ~= except then
      redis.call('PUBLISH', channel_of(prefix, first), first)
    end
  end

  return {
    now_ms = now_ms,
    first_waiter = first_waiter,
    queue_place = queue_place,
    channel_of = channel_of,
    wake_first = wake_first,
  }
end
