-- The lock key's value: a token (ours, or another client's: another library's lock on the same key), nil when the
-- key is gone, or, for a key of another type (another library's lock: a Redisson hash), 'type:<type>', which no
-- token equals: whatever sits at the lock key holds the lock. Any other refusal (an ACL's) is returned second.
local function lock_value(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    if string.find(value.err, 'WRONGTYPE', 1, true) then
      return 'type:' .. redis.call('TYPE', key).ok
    end
    return nil, value
  end
  return value
end
-- The id a fair queue's announcements name a waiter by: the first 16 hex digits of the SHA-1 of its token (its
-- member in the queue). It tells the waiter's process that it is that waiter's turn without publishing the token,
-- which is a capability (whoever has it can release or extend the hold).
local function waiter_id(token)
  return string.sub(redis.sha1hex(token), 1, 16)
end

-- The holders that share a name, each with its own expiry on the server clock: a read-write lock's readers
-- (`KEYS[5]`, token -> expiry) and a semaphore's permits (`KEYS[6]`, token -> expiry; `KEYS[7]`, token ->
-- 'fence;slot,slot,...'). `shared_now()` is the server's clock in ms; `shared_live(key, what, now)` the live
-- members of one of them (at most 1000, soonest to expire first), or nil and a WRONGTYPE reply.
local function shared_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function shared_live(key, what, now)
  local members = redis.pcall('ZRANGEBYSCORE', key, '(' .. string.format('%d', now), '+inf')
  if type(members) == 'table' and members.err then
    if string.find(members.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply('WRONGTYPE ' .. what .. ' ' .. key .. ' is not a sorted set')
    end
    return nil, members
  end
  local live = {}
  for i = 1, math.min(#members, 1000) do
    local expiry = tonumber(redis.call('ZSCORE', key, members[i]))
    table.insert(live, {members[i], expiry - now})
  end
  return live
end
-- The live readers and permits, or nil, nil and a WRONGTYPE reply.
local function shared_holders()
  local now = shared_now()
  local readers, refused = shared_live(KEYS[5], 'read-write lock readers', now)
  if refused then
    return nil, nil, refused
  end
  local permits
  permits, refused = shared_live(KEYS[6], 'semaphore permits', now)
  if refused then
    return nil, nil, refused
  end
  return readers, permits
end
local function permit_slots(token)
  local grant = redis.pcall('HGET', KEYS[7], token)
  if type(grant) ~= 'string' then
    return ''
  end
  return string.match(grant, ';(.*)$') or ''
end

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
-- ARGV[3]: '*' anyone, '' nobody, else the owner ids an operator was shown, separated by spaces: each the first
-- hex digits of one of our tokens, or '~' and the first hex digits of the SHA-1 of a value another client wrote.
local expect = ARGV[3] or '*'
local ids = {}
for id in string.gmatch(expect, '%S+') do
  table.insert(ids, id)
end
local function expected(value)
  if expect == '*' then
    return true
  end
  for _, id in ipairs(ids) do
    if string.sub(id, 1, 1) == '~' then
      if string.sub(redis.sha1hex(value), 1, #id - 1) == string.sub(id, 2) then
        return true
      end
    elseif string.sub(value, 1, #id) == id then
      return true
    end
  end
  return false
end
-- Each holder found as four items: 'x' (the lock key's holder), 'r' (a reader) or 'p' (a permit), its value, its
-- time left, its slots; those deleted, then those kept (not expected: taken since the operator looked).
local deleted, kept = {}, {}
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
    found(kept, 'x', value, pttl, '')
  end
end
for _, reader in ipairs(readers) do
  if expected(reader[1]) then
    redis.call('ZREM', KEYS[5], reader[1])
    found(deleted, 'r', reader[1], reader[2], '')
  else
    found(kept, 'r', reader[1], reader[2], '')
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
  else
    found(kept, 'p', token, permit[2], slots)
  end
end
local function reply(code)
  local out = {code, #deleted / 4}
  for _, list in ipairs({deleted, kept}) do
    for _, item in ipairs(list) do
      table.insert(out, item)
    end
  end
  return out
end
if #deleted == 0 and #kept > 0 then
  return reply(2)
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
  return reply(0)
end
return reply(1)
