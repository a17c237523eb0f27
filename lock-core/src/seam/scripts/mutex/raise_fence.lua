
if KEYS[3] then
  local kind = redis.call('TYPE', KEYS[3]).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE leader record ' .. KEYS[3] .. ' is not a hash')
  end
end
local value, refused = lock_value(KEYS[1])
if refused then
  return refused
end
if value ~= ARGV[1] then
  return 0
end
local raw = redis.pcall('GET', KEYS[2])
local current = type(raw) ~= 'table' and string.match(raw or '0', '^%-?%d+$') and #(raw or '0') <= 18
  and tonumber(raw or '0')
if not current then
  return redis.error_reply('WRONGTYPE fencing counter ' .. KEYS[2] .. ' does not hold an integer')
end
local wanted = tonumber(ARGV[2])
if current < wanted then
  redis.call('INCRBY', KEYS[2], string.format('%d', wanted - current))
  if ARGV[3] and ARGV[3] ~= '' then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
end
if KEYS[3] and redis.call('HGET', KEYS[3], 'token') == ARGV[1] then
  redis.call('HSET', KEYS[3], 'term', ARGV[2])
end
return 1
