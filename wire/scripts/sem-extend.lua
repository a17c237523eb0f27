
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

local refused = sem_types()
if refused then
  return refused
end
local now = sem_now()
purge(now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
gc()
return 1
