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
local all = true
for i = 1, #KEYS do
  local value, refused = lock_value(KEYS[i])
  if refused then
    return refused
  end
  if value == ARGV[1] then
    reply[i] = 1
  else
    reply[i] = value and -1 or 0
    all = false
  end
end
if all then
  for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
return reply
