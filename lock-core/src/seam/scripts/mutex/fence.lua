
local value, refused = lock_value(KEYS[1])
if refused then
  return refused
end
if value ~= ARGV[1] then
  return value and -1 or 0
end
local current
current, refused = read_counter(KEYS[2])
if refused then
  return refused
end
local now = redis.call('TIME')
return advance(KEYS[2], current, tonumber(now[1]) * 1000000 + tonumber(now[2]))
