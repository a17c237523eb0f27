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

local kind = redis.call('TYPE', KEYS[2]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE job record ' .. KEYS[2] .. ' is not a hash')
end
local record = redis.call('HMGET', KEYS[2], 'token', 'started_ms', 'at_least_ms')
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if record[1] == ARGV[1] then
  redis.call('HSET', KEYS[2], 'finished_ms', string.format('%d', now_ms), 'outcome', ARGV[2])
end
local given_back = ARGV[2] == 'given_back'
if given_back and KEYS[4] and redis.call('GET', KEYS[4]) == ARGV[1] then
  redis.call('DEL', KEYS[4])
end
local value, refused = lock_value(KEYS[1])
if refused then
  return refused
end
if value ~= ARGV[1] then
  return value and -1 or 0
end
local keep = -1
if record[1] == ARGV[1] and not given_back then
  keep = tonumber(record[2] or '0') + tonumber(record[3] or '0') - now_ms
end
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], string.format('%d', keep))
  return 2
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[3], ARGV[3])
return 1
