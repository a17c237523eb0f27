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

local value, refused = lock_value(KEYS[1])
if refused then
  return refused
end
if value == ARGV[1] then
  if KEYS[5] then
    -- Another library's waiters block on this list (python-redis-lock's signal): signal it as its own release does.
    redis.call('DEL', KEYS[5])
    redis.call('LPUSH', KEYS[5], '1')
    redis.call('PEXPIRE', KEYS[5], '1000')
  end
  if ARGV[4] then
    -- Another library's waiters listen on the channel for this message, and leave no mark: announce every time.
    redis.call('DEL', KEYS[1], KEYS[3])
    redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2], ARGV[4])
    return 1
  end
  if redis.call('DEL', KEYS[1], KEYS[3]) > 1 then
    local first, others = next_waiting(KEYS[4], ARGV[2])
    if others then
      -- The processes not woken still wait: the next release must announce itself too.
      local left = redis.call('PTTL', KEYS[4])
      if left > 0 then
        redis.call('SET', KEYS[3], '1', 'PX', string.format('%d', left))
      end
    end
    local payload = first and (ARGV[2] .. '>' .. first) or ARGV[2]
    redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2], payload)
  end
  return 1
elseif value then
  return -1
end
return 0
