
local reply = {}
local n = #KEYS / 3
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  local value = redis.call('GET', lock)
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
