
local token = ARGV[1]
local fencing = ARGV[3] == '1'
-- The fencing counter is read (and checked as INCRBY would) only on the paths that grant: before the lock key is set.
local holder, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The floor of a fence this call draws: the caller's, or the server's clock in µs (5.3).
local fence_floor = tonumber(ARGV[4] or '') or (tonumber(t[1]) * 1000000 + tonumber(t[2]))
local dead = redis.pcall('ZRANGEBYSCORE', KEYS[4], '-inf', now)
if dead.err then
  return refused(dead, 'heartbeats', KEYS[4])
end
-- A read-write lock's writer: live readers keep it busy (read only; expired readers are purged by the readers'
-- scripts), and their last expiry is how long.
local readers_ttl = false
if KEYS[8] then
  local last = redis.pcall('ZRANGE', KEYS[8], -1, -1, 'WITHSCORES')
  if last.err then
    return refused(last, 'readers', KEYS[8])
  end
  if last[2] and tonumber(last[2]) > now then
    readers_ttl = tonumber(last[2]) - now
  end
end
local busy = holder or readers_ttl
-- Who heads the queue matters only when the lock is free (or a purge may change the head). While it is busy, our
-- own place is read instead, which checks the queue's type before any write as well (it is needed below anyway).
local head, placed = {}, nil
if busy and #dead == 0 then
  placed = redis.pcall('ZSCORE', KEYS[3], token)
  if type(placed) == 'table' then
    return refused(placed, 'queue', KEYS[3])
  end
else
  head = redis.pcall('ZRANGE', KEYS[3], 0, 0)
  if head.err then
    return refused(head, 'queue', KEYS[3])
  end
end
local before = head[1]
if #dead > 0 then
  for _, waiter in ipairs(dead) do
    redis.call('ZREM', KEYS[3], waiter)
    redis.pcall('HDEL', KEYS[7], waiter)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  head = redis.call('ZRANGE', KEYS[3], 0, 0)
end
local first = head[1]
if holder == token then
  -- A retry of a grant whose reply was lost: the caller's validity runs from this request, so the key must live at
  -- least as long from now (the first grant's PX may have run partly down while the caller waited to retry).
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not fencing then
    return {1}
  end
  local current, refused = read_counter(KEYS[2])
  if refused then
    return refused
  end
  return {1, granted_fence(KEYS[2], current, fence_floor, ARGV[10])}
end
if not busy and (not first or first == token) then
  local current, refused = false, nil
  if fencing then
    current, refused = read_counter(KEYS[2])
    if refused then
      return refused
    end
  end
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  if first then
    redis.call('ZREM', KEYS[3], token)
    redis.call('ZREM', KEYS[4], token)
    redis.pcall('HDEL', KEYS[7], token)
  end
  -- A read-write lock's writer taking the lock while readers wait (they left the mark): they waited for a waiting
  -- writer's place and know no expiry of this hold; told, they look again and wait for it (a writer that dies holding
  -- announces nothing). The mark stays for this writer's release.
  if KEYS[8] and redis.call('PTTL', KEYS[6]) ~= -2 then
    redis.call(ARGV[8] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[7])
  end
  if not fencing then
    return {1}
  end
  return {1, advance(KEYS[2], current, fence_floor, ARGV[10])}
end
local tell = not busy and first and first ~= before
local function announce()
  redis.call(ARGV[8] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[7] .. ' ' .. waiter_id(first))
end
local pttl = -2
if holder then
  pttl = redis.call('PTTL', KEYS[1])
  local refused = awaited(KEYS[6], pttl)
  if refused then
    return refused
  end
elseif readers_ttl then
  pttl = readers_ttl
end
if ARGV[6] ~= '1' then
  if tell then
    announce()
  end
  return {0, pttl, -1}
end
local expiry = string.format('%d', now + tonumber(ARGV[5]))
if placed == nil then
  placed = redis.call('ZSCORE', KEYS[3], token)
end
if not placed then
  if ARGV[9] ~= '' then
    -- Before the place is written: a key of another type under the grants' name is refused with nothing written.
    local noted = redis.pcall('HSET', KEYS[7], token, ARGV[9])
    if type(noted) == 'table' then
      if string.find(noted.err, 'WRONGTYPE', 1, true) then
        return redis.error_reply('WRONGTYPE fair-lock grants ' .. KEYS[7] .. ' is not a hash')
      end
      return noted
    end
  end
  local ticket = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= ticket then
    ticket = tonumber(last[2]) + 1
  end
  redis.call('ZADD', KEYS[3], string.format('%d', ticket), token)
end
redis.call('ZADD', KEYS[4], expiry, token)
local reply = {0, pttl, 0}
for i = 11, #ARGV do
  if redis.call('ZSCORE', KEYS[4], ARGV[i]) then
    redis.call('ZADD', KEYS[4], expiry, ARGV[i])
    if not busy and ARGV[i] == first then
      tell = true
    end
  else
    reply[#reply + 1] = ARGV[i]
  end
end
if tell then
  announce()
end
local latest = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[3], latest[2])
redis.call('PEXPIREAT', KEYS[4], latest[2])
if ARGV[9] ~= '' then
  redis.call('PEXPIREAT', KEYS[7], latest[2])
end
reply[3] = redis.call('ZRANK', KEYS[3], token)
return reply
