
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
  -- Redisson's own clients increment this counter from 1: it never expires (no idle), whatever ours do.
  return {1, advance(KEYS[2], current, clock_floor(), nil)}
end
if kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not fencing then
    return {1}
  end
  return {1, tonumber(current)}
end
return {0, redis.call('PTTL', KEYS[1])}
