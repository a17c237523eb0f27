
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return -2
end
if kind ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a value that is not a lock')
end
local pttl = redis.call('PTTL', KEYS[1])
local refused = line_up(KEYS[3], KEYS[2], ARGV[1], pttl)
if refused then
  return refused
end
return pttl
