
-- Releases our hold (field ARGV[1] of the hash KEYS[1]; our hold count is always 1) and tells Redisson's waiters
-- as its own unlock does: the message 0 on KEYS[2] (SPUBLISH on Cluster). Reply: 1 released, 0 gone, -1 another's.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2], '0')
return 1
