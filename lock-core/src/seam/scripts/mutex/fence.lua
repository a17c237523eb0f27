
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
return advance(KEYS[2], current, clock_floor(), ARGV[2])
