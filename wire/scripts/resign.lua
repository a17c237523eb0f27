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

-- The first waiting process other than `origin` (the releasing one, whose waiters it wakes itself), taken out of
-- the set, and whether another one (not `origin`) stays in line; false when there is none (or the set is not one: a
-- wake-up for everyone is the safe answer then). The releasing process keeps its own place: its waiters still
-- wait. ZRANGE and ZREM rather than ZPOPMIN, which the minimal ACL does not grant.
local function next_waiting(waiting, origin)
  local firsts = redis.pcall('ZRANGE', waiting, 0, 2)
  if type(firsts) ~= 'table' or firsts.err then
    return false, false
  end
  local first, others = false, false
  for _, member in ipairs(firsts) do
    if member ~= origin then
      if first then
        others = true
      else
        first = member
      end
    end
  end
  if first then
    redis.call('ZREM', waiting, first)
  end
  return first, others
end

if KEYS[6] then
  local kind = redis.call('TYPE', KEYS[6]).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE given-back candidacies ' .. KEYS[6] .. ' is not a hash')
  end
end
if KEYS[8] then
  local kind = redis.call('TYPE', KEYS[8]).ok
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE election promise ' .. KEYS[8] .. ' holds a value that is not a promise')
  end
end
local value, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
if value ~= ARGV[1] and KEYS[6] then
  redis.call('HSET', KEYS[6], ARGV[1], '1')
  if redis.call('PTTL', KEYS[6]) < tonumber(ARGV[4]) then
    redis.call('PEXPIRE', KEYS[6], ARGV[4])
  end
end
if value == ARGV[1] then
  local publish = ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH'
  if redis.call('DEL', KEYS[1], KEYS[4]) > 1 then
    local payload = ARGV[2]
    if KEYS[7] then
      local first, others = next_waiting(KEYS[7], ARGV[2])
      if others then
        -- The processes not named still wait: the next resignation must announce itself too.
        local left = redis.call('PTTL', KEYS[7])
        if left > 0 then
          redis.call('SET', KEYS[4], '1', 'PX', string.format('%d', left))
        end
      end
      if first then
        payload = ARGV[2] .. '>' .. first
        local grace = tonumber(ARGV[5] or '')
        if grace and KEYS[8] then
          redis.call('SET', KEYS[8], first, 'PX', string.format('%d', grace))
        end
      end
    end
    redis.call(publish, KEYS[3], payload)
  end
  redis.call('DEL', KEYS[2])
  redis.call(publish, KEYS[5], ARGV[2])
  return 1
elseif value then
  return -1
end
return 0
