
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
