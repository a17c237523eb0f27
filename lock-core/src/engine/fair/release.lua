
local value, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
-- Our lock: we hold no place (the grant or the try that gave us the lock removed it), and the key is deleted below
-- unless a grant overwrites it. Otherwise we are a waiter leaving the queue.
local outcome = 0
if value == ARGV[1] then
  outcome = 1
else
  local beat = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
  if type(beat) == 'table' then
    return refused(beat, 'heartbeats', KEYS[3])
  end
  local left = redis.pcall('ZREM', KEYS[2], ARGV[1])
  if type(left) == 'table' then
    return refused(left, 'queue', KEYS[2])
  end
  if beat then
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  if left == 1 then
    redis.pcall('HDEL', KEYS[7], ARGV[1])
  end
  if value then
    return -1
  end
  if left == 0 then
    return 0
  end
end
local publish = ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH'
-- The head, past the places whose heartbeat expired (a few; the next fair try purges any more). The clock is read
-- only when someone is queued. Types are checked before the first write.
local front = redis.pcall('ZRANGE', KEYS[2], 0, 0)
if front.err then
  return refused(front, 'queue', KEYS[2])
end
local head, live, t = front[1], false, nil
if head then
  t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _ = 1, 8 do
    local expiry = redis.pcall('ZSCORE', KEYS[3], head)
    if type(expiry) == 'table' then
      return refused(expiry, 'heartbeats', KEYS[3])
    end
    if not expiry or tonumber(expiry) > now then
      live = expiry and true or false
      break
    end
    redis.call('ZREM', KEYS[2], head)
    redis.call('ZREM', KEYS[3], head)
    redis.pcall('HDEL', KEYS[7], head)
    head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not head then
      break
    end
  end
end
if head and live then
  local entry = redis.pcall('HGET', KEYS[7], head)
  local lease, draw = nil, nil
  if type(entry) == 'string' then
    lease, draw = string.match(entry, '^(%d+) ([01])$')
  end
  local current, refused_counter = false, nil
  if lease and draw == '1' then
    current, refused_counter = read_counter(KEYS[6])
  end
  if lease and tonumber(lease) > 0 and not refused_counter then
    -- Overwrites our token when we released: one write for the release and the grant.
    redis.call('SET', KEYS[1], head, 'PX', lease)
    redis.call('ZREM', KEYS[2], head)
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[7], head)
    local fence = ''
    if draw == '1' then
      -- Formatted as an integer: Lua prints a number past 14 digits (a token above the time floor) in exponent form.
      fence = string.format('%d', advance(KEYS[6], current, tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[4]))
    end
    redis.call(publish, KEYS[4], ARGV[2] .. '+' .. fence .. ' ' .. waiter_id(head))
    return outcome
  end
end
local marked = outcome == 1 and redis.call('DEL', KEYS[1], KEYS[5]) > 1
if head then
  redis.call(publish, KEYS[4], ARGV[2] .. ' ' .. waiter_id(head))
elseif marked then
  redis.call(publish, KEYS[4], ARGV[2])
end
return outcome
