
local reply = {}
local n = #KEYS / 3
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  -- Whatever sits at a lock key holds it: another library's value or a key of another type is another's (-1).
  local value, refused = lock_value(lock)
  if refused then
    return refused
  end
  if value == ARGV[1] then
    if redis.call('DEL', lock, KEYS[2 * n + i]) > 1 then
      redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2 * i], ARGV[2])
    end
    reply[i] = 1
  elseif value then
    reply[i] = -1
  else
    reply[i] = 0
  end
end
return reply
