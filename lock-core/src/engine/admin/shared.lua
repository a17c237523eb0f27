
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
