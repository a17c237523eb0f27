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

local reply = {}
local n = #KEYS / 3
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  -- Whatever sits at a lock key holds it: another library's value or a key of another type is another's (-1).
  local value, refused = lock_value(lock)
  if refused then
    return refused
  end
  if value == ARGV[1] then
    if redis.call('DEL', lock, KEYS[2 * n + i]) > 1 then
      redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2 * i], ARGV[2])
    end
    reply[i] = 1
  elseif value then
    reply[i] = -1
  else
    reply[i] = 0
  end
end
return reply
