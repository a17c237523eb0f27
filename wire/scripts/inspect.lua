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
