
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
