
local function sem_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function sem_types()
  local want = {'zset', 'hash', 'hash', 'string'}
  for i = 1, 4 do
    local kind = redis.call('TYPE', KEYS[i]).ok
    if kind ~= 'none' and kind ~= want[i] then
      return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[i] .. ' is not a ' .. want[i])
    end
  end
end
local function free(token)
  local grant = redis.call('HGET', KEYS[3], token)
  if grant then
    for slot in string.gmatch(string.match(grant, ';(.*)$') or '', '%d+') do
      if redis.call('HGET', KEYS[2], slot) == token then
        redis.call('HDEL', KEYS[2], slot)
      end
    end
    redis.call('HDEL', KEYS[3], token)
  end
  redis.call('ZREM', KEYS[1], token)
end
local function purge(now)
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))) do
    free(token)
  end
end
local function gc()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if not last[2] then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
    return
  end
  local at = string.format('%d', tonumber(last[2]) + 1000)
  for i = 1, 4 do
    redis.call('PEXPIREAT', KEYS[i], at)
  end
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

local refused = sem_types()
if refused then
  return refused
end
local fencing = ARGV[5] == '1'
local current = false
if fencing then
  current, refused = read_counter(KEYS[5])
  if refused then
    return refused
  end
end
local now = sem_now()
local ttl = tonumber(ARGV[3])
purge(now)
local stored = redis.call('GET', KEYS[4])
if stored and stored ~= ARGV[4] then
  return {-1, tonumber(stored)}
end
local grant = redis.call('HGET', KEYS[3], ARGV[1])
if grant then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + ttl), ARGV[1])
  gc()
  local reply = {1, tonumber(string.match(grant, '^(%-?%d+);'))}
  for slot in string.gmatch(string.match(grant, ';(.*)$') or '', '%d+') do
    table.insert(reply, tonumber(slot))
  end
  return reply
end
local n, limit = tonumber(ARGV[2]), tonumber(ARGV[4])
if redis.call('HLEN', KEYS[2]) + n > limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = -1
  if first[2] then
    wait = math.max(tonumber(first[2]) - now, 0)
  end
  local marked = awaited(KEYS[6], wait)
  if marked then
    return marked
  end
  return {0, wait, limit - redis.call('HLEN', KEYS[2])}
end
local slots = {}
local slot = 0
while #slots < n and slot < limit do
  if not redis.call('HGET', KEYS[2], string.format('%d', slot)) then
    table.insert(slots, slot)
  end
  slot = slot + 1
end
local fence = -1
if fencing then
  fence = advance(KEYS[5], current, tonumber(ARGV[6] or '') or clock_floor(), ARGV[7])
end
for _, s in ipairs(slots) do
  redis.call('HSET', KEYS[2], string.format('%d', s), ARGV[1])
end
redis.call('HSET', KEYS[3], ARGV[1], string.format('%d', fence) .. ';' .. table.concat(slots, ','))
redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
redis.call('SET', KEYS[4], ARGV[4])
gc()
local reply = {1, fence}
for _, s in ipairs(slots) do
  table.insert(reply, s)
end
return reply
