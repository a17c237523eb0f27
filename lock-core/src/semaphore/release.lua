
local refused = sem_types()
if refused then
  return refused
end
if not redis.call('HGET', KEYS[3], ARGV[1]) then
  return 0
end
local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
local late = score <= sem_now()
free(ARGV[1])
-- The keys already expire a second after the latest expiry of the permits left (removing one never moves that
-- later), so only an emptied semaphore needs its keys touched.
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
end
if redis.call('DEL', KEYS[6]) > 0 then
  redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[2])
end
if late then
  return 2
end
return 1
