-- The lock key's value: a token (ours, or another client's: another library's lock on the same key), nil when the
-- key is gone, or, for a key of another type (another library's lock: a Redisson hash), 'type:<type>', which no
-- token equals: whatever sits at the lock key holds the lock. Any other refusal (an ACL's) is returned second.
local function lock_value(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    if string.find(value.err, 'WRONGTYPE', 1, true) then
      return 'type:' .. redis.call('TYPE', key).ok
    end
    return nil, value
  end
  return value
end

local function refused(reply, what, key)
  if string.find(reply.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply('WRONGTYPE fair-lock ' .. what .. ' ' .. key .. ' is not a sorted set')
  end
  return reply
end
-- The id a fair queue's announcements name a waiter by: the first 16 hex digits of the SHA-1 of its token (its
-- member in the queue). It tells the waiter's process that it is that waiter's turn without publishing the token,
-- which is a capability (whoever has it can release or extend the hold).
local function waiter_id(token)
  return string.sub(redis.sha1hex(token), 1, 16)
end

-- The counter at `key` as INCRBY would accept it (a decimal integer, no spaces, no exponent, no hex, within 64
-- bits), not as Lua's tonumber reads it; nil and a WRONGTYPE reply otherwise. Read before the lock key is set, so a
-- counter INCRBY would refuse never leaves a lock key behind.
local function read_counter(key)
  local current = redis.pcall('GET', key)
  if type(current) == 'table' or (current and not (string.match(current, '^%-?%d+$') and #current <= 18)) then
    return nil, redis.error_reply('WRONGTYPE fencing counter ' .. key .. ' does not hold an integer')
  end
  return current
end
-- The server's clock in µs when this script first asks (one reading per script, so the counters one script draws
-- from take one floor): the floor when the caller sends none.
local clock_read = nil
local function clock_floor()
  if not clock_read then
    local now = redis.call('TIME')
    clock_read = tonumber(now[1]) * 1000000 + tonumber(now[2])
  end
  return clock_read
end
-- Sets the counter to max(current + 1, floor). With `idle` (ms, a decimal string; nil or empty for none) the counter
-- expires once unused that long: the next draw starts again from the floor, above every fence drawn before as long
-- as the clocks agree within half of `idle` (WIRE.md 5.5).
local function advance(key, current, floor, idle)
  local expires = idle and idle ~= ''
  if expires and not current then
    -- A new or expired counter: a floor the caller sent (a Redlock client's, read before its request travelled)
    -- counts only down to half the expiry below the server's clock, so a request delayed past an expiry cannot
    -- draw below the fence drawn meanwhile; a floor in step with the clock is kept, so instances stay in step.
    floor = math.max(floor, clock_floor() - tonumber(idle) * 500)
  end
  local fence = math.max((tonumber(current) or 0) + 1, floor)
  if expires and fence < 9007199254740992 then
    -- One command for the value and its expiry (it costs the server about what INCRBY alone does), exact below 2^53.
    redis.call('SET', key, string.format('%d', fence), 'PX', idle)
    return fence
  end
  -- INCRBY is exact over 64 bits, whatever Lua's doubles can hold; and keeps the counter's TTL.
  local step = floor - (tonumber(current) or 0)
  if step < 1 then
    step = 1
  end
  fence = redis.call('INCRBY', key, string.format('%d', step))
  if expires then
    redis.call('PEXPIRE', key, idle)
  end
  return fence
end
-- What a retry that finds its own grant replies: the counter as it stands (`current`, as read), or, when it expired
-- since the grant (WIRE.md 5.2, 5.5), a fence drawn anew, which lies within the same hold and so above every fence
-- before it.
local function granted_fence(key, current, floor, idle)
  if current then
    return tonumber(current)
  end
  return advance(key, false, floor, idle)
end

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
