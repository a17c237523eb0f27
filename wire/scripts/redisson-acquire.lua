
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

-- Redisson's RLock layout: the hash KEYS[1], field ARGV[1] -> hold count, the lease as its TTL. A free lock (no key)
-- is granted; a retry of our own grant (our field is there) gets the same grant, its lease from this request; anything
-- else (Redisson's holder, or a key of another type) holds it. With fencing, the token is drawn from KEYS[2], the
-- counter Redisson's RFencedLock increments, read (and checked as INCRBY would) before anything is written.
local fencing = ARGV[3] == '1'
local current = false
if fencing then
  local refused
  current, refused = read_counter(KEYS[2])
  if refused then
    return refused
  end
end
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not fencing then
    return {1}
  end
  -- Redisson's own clients increment this counter from 1: it never expires (no idle), whatever ours do.
  return {1, advance(KEYS[2], current, clock_floor(), nil)}
end
if kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not fencing then
    return {1}
  end
  return {1, tonumber(current)}
end
return {0, redis.call('PTTL', KEYS[1])}
