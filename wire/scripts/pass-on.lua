
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

if type(redis.pcall('ZREM', KEYS[3], ARGV[1])) == 'table' then
  return 0
end
if redis.call('PTTL', KEYS[1]) ~= -2 then
  return 0
end
local first = next_waiting(KEYS[3], ARGV[1])
if KEYS[4] then
  local promised = redis.pcall('GET', KEYS[4])
  if promised == ARGV[1] then
    local left = redis.call('PTTL', KEYS[4])
    if first and left > 0 then
      redis.call('SET', KEYS[4], first, 'PX', string.format('%d', left))
    else
      redis.call('DEL', KEYS[4])
    end
  end
end
local payload = first and (ARGV[1] .. '>' .. first) or ARGV[1]
redis.call(ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2], payload)
return first and 1 or 0
