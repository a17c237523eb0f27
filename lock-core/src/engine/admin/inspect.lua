
local value, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
local fence = redis.pcall('GET', KEYS[2])
if type(fence) == 'table' then
  return redis.error_reply('WRONGTYPE fencing counter ' .. KEYS[2] .. ' does not hold an integer')
end
local queued = redis.pcall('ZCARD', KEYS[4])
if type(queued) == 'table' then
  return redis.error_reply('WRONGTYPE fair queue ' .. KEYS[4] .. ' is not a sorted set')
end
local reply = {value or '', redis.call('PTTL', KEYS[1]), fence or '', redis.call('PTTL', KEYS[3]), queued}
local readers, permits, refused_shared = shared_holders()
if refused_shared then
  return refused_shared
end
-- Then each shared holder as four items: 'r' (a reader) or 'p' (a permit), its token, its time left, its slots.
for _, reader in ipairs(readers) do
  for _, item in ipairs({'r', reader[1], reader[2], ''}) do
    table.insert(reply, item)
  end
end
for _, permit in ipairs(permits) do
  for _, item in ipairs({'p', permit[1], permit[2], permit_slots(permit[1])}) do
    table.insert(reply, item)
  end
end
return reply
