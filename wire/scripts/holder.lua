
local function awaited(key, pttl)
  local ttl = string.format('%d', math.max(pttl, 0) + 1000)
  if redis.REDIS_VERSION_NUM then
    local marked = redis.pcall('SET', key, '1', 'PX', ttl, 'GET')
    if type(marked) == 'table' then
      return redis.error_reply('WRONGTYPE release mark ' .. key .. ' holds a value that is not a mark')
    end
  else
    redis.call('SET', key, '1', 'PX', ttl)
  end
end

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

-- A key of any type holds the lock (another library's lock may be a hash); a key gone means free.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return -2
end
local refused = line_up(KEYS[3], KEYS[2], ARGV[1], pttl)
if refused then
  return refused
end
return pttl
