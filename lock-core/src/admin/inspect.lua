
local value, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
local fence = redis.pcall('GET', KEYS[2])
if type(fence) == 'table' then
  return redis.error_reply('WRONGTYPE fencing counter ' .. KEYS[2] .. ' does not hold an integer')
end
local queued = redis.pcall('ZCARD', KEYS[4])
if type(queued) == 'table' then
  return redis.error_reply('WRONGTYPE fair queue ' .. KEYS[4] .. ' is not a sorted set')
end
return {value or '', redis.call('PTTL', KEYS[1]), fence or '', redis.call('PTTL', KEYS[3]), queued}
