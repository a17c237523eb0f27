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
