
local value, refused = lock_value(KEYS[1])
if refused then
  return refused
end
if value ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'value', ARGV[2])
redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[3], ARGV[3])
return 1
