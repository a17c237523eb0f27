
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'value', ARGV[2])
redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[3], ARGV[3])
return 1
