
local function rw_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function rw_read(command, what, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply('WRONGTYPE read-write lock ' .. what .. ' ' .. key .. ' has another type')
    end
    return nil, reply
  end
  return reply
end
local function rw_expire_readers()
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', KEYS[2], last[2])
  end
end
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
local writer, refused = lock_value(KEYS[1])
if refused then
  return refused
end
local now = rw_now()
local mine, dead, queued, current
mine, refused = rw_read('ZSCORE', 'readers', KEYS[2], token)
if refused then
  return refused
end
dead, refused = rw_read('ZRANGEBYSCORE', 'writer heartbeats', KEYS[4], '-inf', string.format('%d', now))
if refused then
  return refused
end
queued, refused = rw_read('ZCARD', 'writer queue', KEYS[3])
if refused then
  return refused
end
if ARGV[3] == '1' then
  current, refused = read_counter(KEYS[5])
  if refused then
    return refused
  end
end
local function purge()
  if #dead > 0 then
    for _, waiter in ipairs(dead) do
      redis.call('ZREM', KEYS[3], waiter)
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', string.format('%d', now))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now))
end
local wait = false
if mine and tonumber(mine) > now then
  wait = false
elseif writer then
  wait = redis.call('PTTL', KEYS[1])
elseif queued > #dead then
  local next = redis.call('ZRANGE', KEYS[4], #dead, #dead, 'WITHSCORES')
  wait = next[2] and math.max(tonumber(next[2]) - now, 0) or -1
end
if wait then
  local marked = awaited(KEYS[6], wait)
  if marked then
    return marked
  end
  purge()
  return {0, wait}
end
purge()
redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), token)
rw_expire_readers()
if ARGV[3] ~= '1' then
  return {1}
end
return {1, tonumber(current) or 0}
