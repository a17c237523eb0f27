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

local function awaited(key, pttl)
  local ttl = string.format('%d', math.max(pttl, 0) + 1000)
  if redis.REDIS_VERSION_NUM then
    local marked = redis.pcall('SET', key, '1', 'PX', ttl, 'GET')
    if type(marked) == 'table' then
      return redis.error_reply('WRONGTYPE release mark ' .. key .. ' holds a value that is not a mark')
    end
  else
    redis.call('SET', key, '1', 'PX', ttl)
  end
end

local token = ARGV[1]
local fencing = ARGV[3] == '1'
-- The fencing counter is read (and checked as INCRBY would) only on the paths that grant: before the lock key is set.
local holder, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The floor of a fence this call draws: the caller's, or the server's clock in µs (5.3).
local fence_floor = tonumber(ARGV[4] or '') or (tonumber(t[1]) * 1000000 + tonumber(t[2]))
local dead = redis.pcall('ZRANGEBYSCORE', KEYS[4], '-inf', now)
if dead.err then
  return refused(dead, 'heartbeats', KEYS[4])
end
-- A read-write lock's writer: live readers keep it busy (read only; expired readers are purged by the readers'
-- scripts), and their last expiry is how long.
local readers_ttl = false
if KEYS[8] then
  local last = redis.pcall('ZRANGE', KEYS[8], -1, -1, 'WITHSCORES')
  if last.err then
    return refused(last, 'readers', KEYS[8])
  end
  if last[2] and tonumber(last[2]) > now then
    readers_ttl = tonumber(last[2]) - now
  end
end
local busy = holder or readers_ttl
-- Who heads the queue matters only when the lock is free (or a purge may change the head). While it is busy, our
-- own place is read instead, which checks the queue's type before any write as well (it is needed below anyway).
local head, placed = {}, nil
if busy and #dead == 0 then
  placed = redis.pcall('ZSCORE', KEYS[3], token)
  if type(placed) == 'table' then
    return refused(placed, 'queue', KEYS[3])
  end
else
  head = redis.pcall('ZRANGE', KEYS[3], 0, 0)
  if head.err then
    return refused(head, 'queue', KEYS[3])
  end
end
local before = head[1]
if #dead > 0 then
  for _, waiter in ipairs(dead) do
    redis.call('ZREM', KEYS[3], waiter)
    redis.pcall('HDEL', KEYS[7], waiter)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  head = redis.call('ZRANGE', KEYS[3], 0, 0)
end
local first = head[1]
if holder == token then
  -- A retry of a grant whose reply was lost: the caller's validity runs from this request, so the key must live at
  -- least as long from now (the first grant's PX may have run partly down while the caller waited to retry).
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not fencing then
    return {1}
  end
  local current, refused = read_counter(KEYS[2])
  if refused then
    return refused
  end
  return {1, granted_fence(KEYS[2], current, fence_floor, ARGV[10])}
end
if not busy and (not first or first == token) then
  local current, refused = false, nil
  if fencing then
    current, refused = read_counter(KEYS[2])
    if refused then
      return refused
    end
  end
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  if first then
    redis.call('ZREM', KEYS[3], token)
    redis.call('ZREM', KEYS[4], token)
    redis.pcall('HDEL', KEYS[7], token)
  end
  -- A read-write lock's writer taking the lock while readers wait (they left the mark): they waited for a waiting
  -- writer's place and know no expiry of this hold; told, they look again and wait for it (a writer that dies holding
  -- announces nothing). The mark stays for this writer's release.
  if KEYS[8] and redis.call('PTTL', KEYS[6]) ~= -2 then
    redis.call(ARGV[8] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[7])
  end
  if not fencing then
    return {1}
  end
  return {1, advance(KEYS[2], current, fence_floor, ARGV[10])}
end
local tell = not busy and first and first ~= before
local function announce()
  redis.call(ARGV[8] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[7] .. ' ' .. waiter_id(first))
end
local pttl = -2
if holder then
  pttl = redis.call('PTTL', KEYS[1])
  local refused = awaited(KEYS[6], pttl)
  if refused then
    return refused
  end
elseif readers_ttl then
  pttl = readers_ttl
end
if ARGV[6] ~= '1' then
  if tell then
    announce()
  end
  return {0, pttl, -1}
end
local expiry = string.format('%d', now + tonumber(ARGV[5]))
if placed == nil then
  placed = redis.call('ZSCORE', KEYS[3], token)
end
if not placed then
  if ARGV[9] ~= '' then
    -- Before the place is written: a key of another type under the grants' name is refused with nothing written.
    local noted = redis.pcall('HSET', KEYS[7], token, ARGV[9])
    if type(noted) == 'table' then
      if string.find(noted.err, 'WRONGTYPE', 1, true) then
        return redis.error_reply('WRONGTYPE fair-lock grants ' .. KEYS[7] .. ' is not a hash')
      end
      return noted
    end
  end
  local ticket = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= ticket then
    ticket = tonumber(last[2]) + 1
  end
  redis.call('ZADD', KEYS[3], string.format('%d', ticket), token)
end
redis.call('ZADD', KEYS[4], expiry, token)
local reply = {0, pttl, 0}
for i = 11, #ARGV do
  if redis.call('ZSCORE', KEYS[4], ARGV[i]) then
    redis.call('ZADD', KEYS[4], expiry, ARGV[i])
    if not busy and ARGV[i] == first then
      tell = true
    end
  else
    reply[#reply + 1] = ARGV[i]
  end
end
if tell then
  announce()
end
local latest = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[3], latest[2])
redis.call('PEXPIREAT', KEYS[4], latest[2])
if ARGV[9] ~= '' then
  redis.call('PEXPIREAT', KEYS[7], latest[2])
end
reply[3] = redis.call('ZRANK', KEYS[3], token)
return reply
