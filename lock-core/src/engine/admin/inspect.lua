
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
-- The name's record, when a primitive keeps one (`KEYS[8]`: an election's leader, a job's last run): its field
-- count, then its fields and values, without the holder's token (a capability, never shown).
local record = {}
local kind = redis.call('TYPE', KEYS[8]).ok
if kind == 'hash' then
  local fields = redis.call('HGETALL', KEYS[8])
  for i = 1, #fields, 2 do
    if fields[i] ~= 'token' then
      table.insert(record, fields[i])
      table.insert(record, fields[i + 1])
    end
  end
elseif kind ~= 'none' then
  return redis.error_reply('WRONGTYPE record ' .. KEYS[8] .. ' is not a hash')
end
table.insert(reply, #record / 2)
for _, item in ipairs(record) do
  table.insert(reply, item)
end
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
