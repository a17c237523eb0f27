
local fencing = ARGV[3] == '1'
local current = false
if fencing then
  local refused
  current, refused = read_counter(KEYS[2])
  if refused then
    return refused
  end
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if not fencing then
    return {1}
  end
  return {1, advance(KEYS[2], current, tonumber(ARGV[4] or '') or clock_floor(), ARGV[5])}
end
-- Held: by a token, or by a key of another type (another library's lock), which holds it as well.
local pttl = redis.call('PTTL', KEYS[1])
local refused = line_up(KEYS[4], KEYS[3], ARGV[6], pttl)
if refused then
  return refused
end
return {0, pttl}
