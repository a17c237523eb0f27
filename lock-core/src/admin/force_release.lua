
local value, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
local pttl = -2
if value then
  pttl = redis.call('PTTL', KEYS[1])
end
local expect = ARGV[3] or '*'
if value and expect ~= '*' and (expect == '' or string.sub(value, 1, #expect) ~= expect) then
  return {2, value, pttl}
end
redis.call('DEL', KEYS[1], KEYS[3])
local publish = ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH'
local head = redis.pcall('ZRANGE', KEYS[4], 0, 0)
if type(head) == 'table' and head[1] then
  redis.call(publish, KEYS[2], ARGV[1] .. ' ' .. head[1])
else
  redis.call(publish, KEYS[2], ARGV[1])
end
if value then
  return {1, value, pttl}
end
return {0}
