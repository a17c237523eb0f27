
local value, refused = lock_value(KEYS[1])
if refused then
  return refused
end
if value == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif value then
  return -1
end
return 0
