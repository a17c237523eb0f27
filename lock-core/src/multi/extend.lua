
local reply = {}
local all = true
for i = 1, #KEYS do
  local value, refused = lock_value(KEYS[i])
  if refused then
    return refused
  end
  if value == ARGV[1] then
    reply[i] = 1
  else
    reply[i] = value and -1 or 0
    all = false
  end
end
if all then
  for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
return reply
