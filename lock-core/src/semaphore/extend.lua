
local refused = sem_types()
if refused then
  return refused
end
local now = sem_now()
purge(now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
gc()
return 1
