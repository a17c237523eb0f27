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

local fencing = ARGV[3] == '1'
local kind = redis.call('TYPE', KEYS[3]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE job record ' .. KEYS[3] .. ' is not a hash')
end
if KEYS[4] then
  kind = redis.call('TYPE', KEYS[4]).ok
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE job tick ' .. KEYS[4] .. ' holds a value that is not a tick')
  end
end
local current = false
if fencing then
  local refused
  current, refused = read_counter(KEYS[2])
  if refused then
    return refused
  end
end
local holder, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
if holder == ARGV[1] then
  -- A retried start: the key lives the TTL from this request (the caller's validity runs from it).
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local started = redis.call('HMGET', KEYS[3], 'started_ms')
  local fence = fencing and granted_fence(KEYS[2], current, clock_floor(), ARGV[7]) or -1
  return {1, fence, tonumber(started[1] or '0')}
end
local record = redis.call('HMGET', KEYS[3], 'holder', 'token')
if KEYS[4] then
  local ran = redis.call('GET', KEYS[4])
  if ran and ran ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[4]), record[2] == ran and record[1], 'tick'}
  end
end
if holder then
  return {0, redis.call('PTTL', KEYS[1]), record[2] == holder and record[1]}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local now = redis.call('TIME')
local micros = tonumber(now[1]) * 1000000 + tonumber(now[2])
local started = math.floor(micros / 1000)
local fence = -1
if fencing then
  fence = advance(KEYS[2], current, micros, ARGV[7])
end
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'holder', ARGV[4], 'token', ARGV[1], 'started_ms', string.format('%d', started),
  'at_least_ms', ARGV[5], 'outcome', 'running')
if KEYS[4] then
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[6])
end
return {1, fence, started}
