
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

local token = ARGV[1]
local writer, refused = lock_value(KEYS[1])
if refused then
  return refused
end
local mine, head
mine, refused = rw_read('ZSCORE', 'readers', KEYS[2], token)
if refused then
  return refused
end
head, refused = rw_read('ZRANGE', 'writer queue', KEYS[3], 0, 0)
if refused then
  return refused
end
local now = rw_now()
local expiry = string.format('%d', now + tonumber(ARGV[2]))
if writer == token then
  if ARGV[3] ~= '1' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
  redis.call('DEL', KEYS[1])
  redis.call('ZADD', KEYS[2], expiry, token)
  rw_expire_readers()
  if not head[1] and redis.call('DEL', KEYS[6]) > 0 then
    redis.call(ARGV[5] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[4])
  end
  return 1
end
if mine and tonumber(mine) > now then
  redis.call('ZADD', KEYS[2], 'XX', expiry, token)
  rw_expire_readers()
  return 1
end
return 0
