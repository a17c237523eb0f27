
local refused = sem_types()
if refused then
  return refused
end
local now = sem_now()
local held = 0
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf')) do
  local grant = redis.call('HGET', KEYS[3], token)
  for _ in string.gmatch(string.match(grant or '', ';(.*)$') or '', '%d+') do
    held = held + 1
  end
end
return {tonumber(redis.call('GET', KEYS[4]) or '-1'), held}
