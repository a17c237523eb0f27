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

local function line_up(waiting, mark, origin, pttl)
  if not origin or origin == '' then
    return awaited(mark, pttl)
  end
  -- Read first: a process already in line keeps its place (and a key of another type is refused before any write).
  local place = redis.pcall('ZSCORE', waiting, origin)
  if type(place) == 'table' then
    return redis.error_reply('WRONGTYPE waiting processes ' .. waiting .. ' holds a value that is not a sorted set')
  end
  local refused = awaited(mark, pttl)
  if refused or place then
    return refused
  end
  local now = redis.call('TIME')
  local at = tonumber(now[1]) * 1000000 + tonumber(now[2])
  redis.call('ZADD', waiting, string.format('%d', at), origin)
  redis.call('PEXPIRE', waiting, string.format('%d', math.max(pttl, 0) + 1000))
end

local current, refused = read_counter(KEYS[2])
if refused then
  return refused
end
local kind = redis.call('TYPE', KEYS[4]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE leader record ' .. KEYS[4] .. ' is not a hash')
end
if KEYS[6] then
  kind = redis.call('TYPE', KEYS[6]).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE given-back candidacies ' .. KEYS[6] .. ' is not a hash')
  end
  if redis.call('HGET', KEYS[6], ARGV[1]) then
    -- This candidacy was given back before this request arrived: it elects nobody and leaves no record.
    return {0, -2}
  end
end
local promised = false
if KEYS[8] then
  kind = redis.call('TYPE', KEYS[8]).ok
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE election promise ' .. KEYS[8] .. ' holds a value that is not a promise')
  end
  promised = redis.call('GET', KEYS[8])
end
local holder, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
if holder == ARGV[1] then
  -- A retried election: lock and record live the lease from this request (the caller's validity runs from it).
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  local term = granted_fence(KEYS[2], current, tonumber(ARGV[3] or '') or clock_floor(), ARGV[10])
  if not current then
    -- A term drawn anew: the record names it, as observers read the term there.
    redis.call('HSET', KEYS[4], 'term', string.format('%d', term))
  end
  return {1, term}
end
local me = ARGV[8] or ''
-- Marks the election as awaited for `pttl` and lines this process up; a refusal (a key of another type) to return.
local function wait_in_line(pttl)
  if KEYS[7] then
    return line_up(KEYS[7], KEYS[3], me, pttl)
  end
  return awaited(KEYS[3], pttl)
end
if holder then
  local pttl = redis.call('PTTL', KEYS[1])
  local refused = wait_in_line(pttl)
  if refused then
    return refused
  end
  return {0, pttl}
end
local grace = tonumber(ARGV[9] or '')
-- Whether it is this process's turn: the election is promised to it, or it is first in line. Its process, not its
-- candidacy: a try that does not line up (try_campaign) is as much that process's as a waiting campaign's, and a
-- campaign cut off after lining up leaves its process first in line with nothing waiting to take the promise.
local turn = false
if grace and KEYS[7] and KEYS[9] then
  local left = false
  if promised and promised ~= ARGV[6] then
    left = redis.call('PTTL', KEYS[8])
  elseif promised then
    turn = true
  else
    local firsts = redis.pcall('ZRANGE', KEYS[7], 0, 0)
    local first = type(firsts) == 'table' and not firsts.err and firsts[1]
    turn = first == ARGV[6]
    if first and not turn then
      -- The leader's lease ran out with processes waiting: the first of them is promised the election.
      redis.call('ZREM', KEYS[7], first)
      redis.call('SET', KEYS[8], first, 'PX', string.format('%d', grace))
      redis.call(ARGV[7] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[9], ARGV[6] .. '>' .. first)
      left = grace
    end
  end
  if left then
    local refused = wait_in_line(left)
    if refused then
      return refused
    end
    return {0, left}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local term = advance(KEYS[2], current, tonumber(ARGV[3] or '') or clock_floor(), ARGV[10])
if KEYS[7] and (me ~= '' or turn) then
  redis.pcall('ZREM', KEYS[7], ARGV[6])
end
if promised then
  redis.call('DEL', KEYS[8])
end
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'id', ARGV[4], 'value', ARGV[5], 'term', string.format('%d', term), 'token', ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
redis.call(ARGV[7] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[6])
return {1, term}
