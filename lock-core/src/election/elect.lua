
local current, refused = read_counter(KEYS[2])
if refused then
  return refused
end
local kind = redis.call('TYPE', KEYS[4]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE leader record ' .. KEYS[4] .. ' is not a hash')
end
if KEYS[6] then
  kind = redis.call('TYPE', KEYS[6]).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE given-back candidacies ' .. KEYS[6] .. ' is not a hash')
  end
  if redis.call('HGET', KEYS[6], ARGV[1]) then
    -- This candidacy was given back before this request arrived: it elects nobody and leaves no record.
    return {0, -2}
  end
end
local promised = false
if KEYS[8] then
  kind = redis.call('TYPE', KEYS[8]).ok
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE election promise ' .. KEYS[8] .. ' holds a value that is not a promise')
  end
  promised = redis.call('GET', KEYS[8])
end
local holder, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
if holder == ARGV[1] then
  -- A retried election: lock and record live the lease from this request (the caller's validity runs from it).
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  local term = granted_fence(KEYS[2], current, tonumber(ARGV[3] or '') or clock_floor(), ARGV[10])
  if not current then
    -- A term drawn anew: the record names it, as observers read the term there.
    redis.call('HSET', KEYS[4], 'term', string.format('%d', term))
  end
  return {1, term}
end
local me = ARGV[8] or ''
-- Marks the election as awaited for `pttl` and lines this process up; a refusal (a key of another type) to return.
local function wait_in_line(pttl)
  if KEYS[7] then
    return line_up(KEYS[7], KEYS[3], me, pttl)
  end
  return awaited(KEYS[3], pttl)
end
if holder then
  local pttl = redis.call('PTTL', KEYS[1])
  local refused = wait_in_line(pttl)
  if refused then
    return refused
  end
  return {0, pttl}
end
local grace = tonumber(ARGV[9] or '')
-- Whether it is this process's turn: the election is promised to it, or it is first in line. Its process, not its
-- candidacy: a try that does not line up (try_campaign) is as much that process's as a waiting campaign's, and a
-- campaign cut off after lining up leaves its process first in line with nothing waiting to take the promise.
local turn = false
if grace and KEYS[7] and KEYS[9] then
  local left = false
  if promised and promised ~= ARGV[6] then
    left = redis.call('PTTL', KEYS[8])
  elseif promised then
    turn = true
  else
    local firsts = redis.pcall('ZRANGE', KEYS[7], 0, 0)
    local first = type(firsts) == 'table' and not firsts.err and firsts[1]
    turn = first == ARGV[6]
    if first and not turn then
      -- The leader's lease ran out with processes waiting: the first of them is promised the election.
      redis.call('ZREM', KEYS[7], first)
      redis.call('SET', KEYS[8], first, 'PX', string.format('%d', grace))
      redis.call(ARGV[7] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[9], ARGV[6] .. '>' .. first)
      left = grace
    end
  end
  if left then
    local refused = wait_in_line(left)
    if refused then
      return refused
    end
    return {0, left}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local term = advance(KEYS[2], current, tonumber(ARGV[3] or '') or clock_floor(), ARGV[10])
if KEYS[7] and (me ~= '' or turn) then
  redis.pcall('ZREM', KEYS[7], ARGV[6])
end
if promised then
  redis.call('DEL', KEYS[8])
end
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'id', ARGV[4], 'value', ARGV[5], 'term', string.format('%d', term), 'token', ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
redis.call(ARGV[7] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[6])
return {1, term}
