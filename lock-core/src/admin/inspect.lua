
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
local now = shared_now()
local readers, refused_readers = shared_live(KEYS[5], 'read-write lock readers', now)
if refused_readers then
  return refused_readers
end
local permits, refused_permits = shared_live(KEYS[6], 'semaphore permits', now)
if refused_permits then
  return refused_permits
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
