
local value, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
for i = 7, 8 do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[i] .. ' is not a hash')
  end
end
local readers, permits, refused_shared = shared_holders()
if refused_shared then
  return refused_shared
end
local expect = ARGV[3] or '*'
local function expected(token)
  return expect == '*' or (expect ~= '' and string.sub(token, 1, #expect) == expect)
end
-- Each holder found as four items: 'x' (the lock key's holder), 'r' (a reader) or 'p' (a permit), its value, its
-- time left, its slots.
local deleted, kept = {}, nil
local function found(list, kind, holder, pttl, slots)
  for _, item in ipairs({kind, holder, pttl, slots}) do
    table.insert(list, item)
  end
end
if value then
  local pttl = redis.call('PTTL', KEYS[1])
  if expected(value) then
    redis.call('DEL', KEYS[1])
    found(deleted, 'x', value, pttl, '')
  else
    kept = {'x', value, pttl, ''}
  end
end
for _, reader in ipairs(readers) do
  if expected(reader[1]) then
    redis.call('ZREM', KEYS[5], reader[1])
    found(deleted, 'r', reader[1], reader[2], '')
  elseif not kept then
    kept = {'r', reader[1], reader[2], ''}
  end
end
for _, permit in ipairs(permits) do
  local token = permit[1]
  local slots = permit_slots(token)
  if expected(token) then
    for slot in string.gmatch(slots, '%d+') do
      if redis.call('HGET', KEYS[8], slot) == token then
        redis.call('HDEL', KEYS[8], slot)
      end
    end
    redis.call('HDEL', KEYS[7], token)
    redis.call('ZREM', KEYS[6], token)
    found(deleted, 'p', token, permit[2], slots)
  elseif not kept then
    kept = {'p', token, permit[2], slots}
  end
end
if #deleted == 0 and kept then
  return {2, kept[1], kept[2], kept[3], kept[4]}
end
if redis.call('ZCARD', KEYS[6]) == 0 then
  redis.call('DEL', KEYS[6], KEYS[7], KEYS[8], KEYS[9])
end
redis.call('DEL', KEYS[3])
local publish = ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH'
local head = redis.pcall('ZRANGE', KEYS[4], 0, 0)
if type(head) == 'table' and head[1] then
  redis.call(publish, KEYS[2], ARGV[1] .. ' ' .. waiter_id(head[1]))
else
  redis.call(publish, KEYS[2], ARGV[1])
end
if #deleted == 0 then
  return {0}
end
table.insert(deleted, 1, 1)
return deleted
