
if type(redis.pcall('ZREM', KEYS[3], ARGV[1])) == 'table' then
  return 0
end
if redis.call('PTTL', KEYS[1]) ~= -2 then
  return 0
end
local first = next_waiting(KEYS[3], ARGV[1])
if KEYS[4] then
  local promised = redis.pcall('GET', KEYS[4])
  if promised == ARGV[1] then
    local left = redis.call('PTTL', KEYS[4])
    if first and left > 0 then
      redis.call('SET', KEYS[4], first, 'PX', string.format('%d', left))
    else
      redis.call('DEL', KEYS[4])
    end
  end
end
local payload = first and (ARGV[1] .. '>' .. first) or ARGV[1]
redis.call(ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2], payload)
return first and 1 or 0
