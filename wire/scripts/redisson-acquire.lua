
-- The counter at `key` as INCRBY would accept it (a decimal integer, no spaces, no exponent, no hex, within 64
-- bits), not as Lua's tonumber reads it; nil and a WRONGTYPE reply otherwise. Read before the lock key is set, so a
-- counter INCRBY would refuse never leaves a lock key behind.
local function read_counter(key)
  local current = redis.pcall('GET', key)
  if type(current) == 'table' or (current and not (string.match(current, '^%-?%d+$') and #current <= 18)) then
    return nil, redis.error_reply('WRONGTYPE fencing counter ' .. key .. ' does not hold an integer')
  end
  return current
end
local function advance(key, current, floor)
  local step = floor - (tonumber(current) or 0)
  if step < 1 then
    step = 1
  end
  return redis.call('INCRBY', key, string.format('%d', step))
end

-- Redisson's RLock layout: the hash KEYS[1], field ARGV[1] -> hold count, the lease as its TTL. A free lock (no key)
-- is granted; a retry of our own grant (our field is there) gets the same grant, its lease from this request; anything
-- else (Redisson's holder, or a key of another type) holds it. With fencing, the token is drawn from KEYS[2], the
-- counter Redisson's RFencedLock increments, read (and checked as INCRBY would) before anything is written.
local fencing = ARGV[3] == '1'
local current = false
if fencing then
  local refused
  current, refused = read_counter(KEYS[2])
  if refused then
    return refused
  end
end
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not fencing then
    return {1}
  end
  local now = redis.call('TIME')
  return {1, advance(KEYS[2], current, tonumber(now[1]) * 1000000 + tonumber(now[2]))}
end
if kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not fencing then
    return {1}
  end
  return {1, tonumber(current)}
end
return {0, redis.call('PTTL', KEYS[1])}
