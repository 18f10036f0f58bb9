-- Shared by the scripts of the read-write lock and the semaphore, put after queue.lua. Their
-- holders live in one sorted set per name: member the holder, score when its hold expires in
-- this node's milliseconds. Members starting with '#' are records, not holders: a
-- semaphore's '#permits' (score minus the number of permits, so that no expiry drops it), a
-- read-write lock's '#writer-waiting:<waiter id>' for each waiting writer (score when that
-- wait lapses), and each holder's fencing token, '#f:' and the holder's member, scored minus
-- one more than the token (below zero too; it goes with its holder). The holder's own token
-- is kept because the counter moves on under it: every permit of a semaphore raises it, and
-- so may a reader's refence. The set's own TTL is its longest-lived member's, so it is gone
-- with them.

-- Every acquire and release of these locks looks at the queue.
local helpers = queue_helpers()

-- The record of a holder's fencing token.
local function fence_record(member)
  return '#f:' .. member
end

-- Records `fence` as the fencing token of holder `member` (a string: a Lua number would be
-- cut to 14 digits).
local function record_fence(holders, member, fence)
  redis.call('ZADD', holders, string.format('%d', -(fence + 1)), fence_record(member))
end

-- The fencing token recorded for holder `member`, or nil (a hold granted before tokens were
-- recorded).
local function recorded_fence(holders, member)
  local score = redis.call('ZSCORE', holders, fence_record(member))
  return score and -tonumber(score) - 1
end

-- Drops the holds and records that have lapsed, with the lapsed holders' fencing tokens;
-- returns this node's time.
local function trim(holders)
  local now = helpers.now_ms()
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', holders, 0, now)) do
    if string.sub(member, 1, 1) ~= '#' then
      redis.call('ZREM', holders, fence_record(member))
    end
  end
  redis.call('ZREMRANGEBYSCORE', holders, 0, now)
  return now
end

-- The holders (not records) left, and when the first and the last of them lapse.
local function holding(holders)
  local count, first, last = 0, nil, nil
  local all = redis.call('ZRANGEBYSCORE', holders, 0, '+inf', 'WITHSCORES')
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 1) ~= '#' then
      local at = tonumber(all[i + 1])
      count = count + 1
      first = first and math.min(first, at) or at
      last = last and math.max(last, at) or at
    end
  end
  return count, first, last
end

-- Keeps the set as long as its longest-lived member, or deletes it when no holder is left;
-- and the name's fencing counter `counter`, when given, at least as long, with its slot's
-- floor `floor` (see keep_counter in fences.lua).
local function keep_alive(holders, now, counter, floor)
  local count = holding(holders)
  if count == 0 and redis.call('ZCOUNT', holders, now + 1, '+inf') == 0 then
    redis.call('DEL', holders)
    return
  end
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')[2]
  if last and tonumber(last) > now then
    redis.call('PEXPIRE', holders, tonumber(last) - now)
    if counter then
      keep_counter(counter, floor, tonumber(last) - now)
    end
  end
end

-- The deployment check every grant makes first (see acquire.lua): {5} on a node without the
-- deployment's marker or with one made for another process, {6, pttl} while it is
-- quarantined, nil when it may grant. Records the longest TTL asked for. `marked_run` is the
-- key of the process the marker was made for, `process` the caller's reading (see
-- marked_for_me in marked.lua).
local function deployment_gate(marker, longest, quarantine, marked_run, ttl, process)
  local read = redis.call('MGET', marker, longest, quarantine, marked_run)
  if not read[1] or not marked_for_me(read[4], process) then
    return {5}
  end
  if read[3] then
    return {6, redis.call('PTTL', quarantine)}
  end
  if tonumber(ttl) > tonumber(read[2] or '0') then
    redis.call('SET', longest, ttl)
  end
  return nil
end

-- Queues a waiting caller to be woken by releases (a place without terms: nothing is handed
-- over to it, since the lock is not fair).
local function queue_waiter(queue, terms, waiter, priority, life)
  if waiter ~= '' and life ~= '0' then
    helpers.queue_place(queue, terms, nil, waiter, priority, life, '', '', '')
  end
end

-- Takes a granted caller out of the queue.
local function dequeue_waiter(queue, terms, waiter)
  if waiter ~= '' then
    redis.call('ZREM', queue, waiter)
    redis.call('HDEL', terms, waiter)
  end
end

-- Wakes the first `count` waiters: more than one may fit now (readers, permits).
local function wake_waiters(queue, terms, prefix, count)
  if prefix == '' then
    return
  end
  helpers.first_waiter(queue, terms)
  for _, waiter in ipairs(redis.call('ZRANGE', queue, 0, count - 1)) do
    redis.call('PUBLISH', helpers.channel_of(prefix, waiter), waiter)
  end
end
