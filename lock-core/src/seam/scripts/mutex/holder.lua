
-- A key of any type holds the lock (another library's lock may be a hash); a key gone means free.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return -2
end
local refused = line_up(KEYS[3], KEYS[2], ARGV[1], pttl)
if refused then
  return refused
end
return pttl
