
local function line_up(waiting, mark, origin, pttl)
  if not origin or origin == '' then
    return awaited(mark, pttl)
  end
  -- Read first: a process already in line keeps its place (and a key of another type is refused before any write).
  local place = redis.pcall('ZSCORE', waiting, origin)
  if type(place) == 'table' then
    return redis.error_reply('WRONGTYPE waiting processes ' .. waiting .. ' holds a value that is not a sorted set')
  end
  local refused = awaited(mark, pttl)
  if refused or place then
    return refused
  end
  local now = redis.call('TIME')
  local at = tonumber(now[1]) * 1000000 + tonumber(now[2])
  redis.call('ZADD', waiting, string.format('%d', at), origin)
  redis.call('PEXPIRE', waiting, string.format('%d', math.max(pttl, 0) + 1000))
end
