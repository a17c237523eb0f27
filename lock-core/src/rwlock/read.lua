
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
