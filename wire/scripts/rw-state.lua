
local function rw_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function rw_read(command, what, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply('WRONGTYPE read-write lock ' .. what .. ' ' .. key .. ' has another type')
    end
    return nil, reply
  end
  return reply
end
local function rw_expire_readers()
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', KEYS[2], last[2])
  end
end
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

local writer, refused = lock_value(KEYS[1])
if refused then
  return refused
end
local now = string.format('%d', rw_now())
local readers, waiting
readers, refused = rw_read('ZRANGEBYSCORE', 'readers', KEYS[2], '(' .. now, '+inf')
if refused then
  return refused
end
waiting, refused = rw_read('ZRANGEBYSCORE', 'writer heartbeats', KEYS[4], '(' .. now, '+inf')
if refused then
  return refused
end
local _, refused_queue = rw_read('ZCARD', 'writer queue', KEYS[3])
if refused_queue then
  return refused_queue
end
return {writer and 1 or 0, #readers, #waiting}
