
local holder, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
if not holder then
  return {}
end
local kind = redis.call('TYPE', KEYS[2]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE leader record ' .. KEYS[2] .. ' is not a hash')
end
local record = redis.call('HMGET', KEYS[2], 'id', 'value', 'term', 'token')
if record[4] ~= holder then
  return {}
end
return {record[1], record[2], record[3], redis.call('PTTL', KEYS[1])}
