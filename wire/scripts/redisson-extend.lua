
-- Sets the lease of our hold (field ARGV[1] of the hash KEYS[1]) to ARGV[2] ms, as Redisson's watchdog does. Reply:
-- 1 extended, 0 gone, -1 another's.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
