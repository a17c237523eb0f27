
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
-- The id a fair queue's announcements name a waiter by: the first 16 hex digits of the SHA-1 of its token (its
-- member in the queue). It tells the waiter's process that it is that waiter's turn without publishing the token,
-- which is a capability (whoever has it can release or extend the hold).
local function waiter_id(token)
  return string.sub(redis.sha1hex(token), 1, 16)
end

local token = ARGV[1]
local writer, refused = lock_value(KEYS[1])
if refused then
  return refused
end
local mine, beat, head
mine, refused = rw_read('ZSCORE', 'readers', KEYS[2], token)
if refused then
  return refused
end
beat, refused = rw_read('ZSCORE', 'writer heartbeats', KEYS[4], token)
if refused then
  return refused
end
head, refused = rw_read('ZRANGE', 'writer queue', KEYS[3], 0, 1)
if refused then
  return refused
end
local now = rw_now()
local outcome = 0
if writer == token then
  redis.call('DEL', KEYS[1])
  writer = false
  outcome = 1
elseif mine then
  redis.call('ZREM', KEYS[2], token)
  outcome = tonumber(mine) > now and 1 or 2
elseif writer then
  outcome = -1
end
local left = redis.call('ZREM', KEYS[3], token)
if beat then
  redis.call('ZREM', KEYS[4], token)
end
if outcome == 0 and left == 1 then
  -- A waiting writer's place, given back: released (so the caller wakes a reader of its own process it held back).
  outcome = 1
end
if (outcome == 1 or outcome == 2) and not writer then
  local first = head[1]
  if first == token then
    first = head[2]
  end
  local publish = ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH'
  if first then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    if not (last[2] and tonumber(last[2]) > now) then
      redis.call(publish, KEYS[5], ARGV[2] .. ' ' .. waiter_id(first))
    end
  elseif redis.call('DEL', KEYS[6]) > 0 then
    redis.call(publish, KEYS[5], ARGV[2])
  end
end
return outcome
