-- The release of a lock nobody waits for, at the cost of a compare-and-delete: two keys and one argument, where
-- `release` carries the channel, the waiting processes, the origin and the pub/sub flag for the wake-up that
-- follows a contended release. The mark (section 6.2) says whether anyone waits (read with `PTTL`, which the
-- minimal ACL user has: -2 when absent); when it is there nothing is done, and the client releases with `release`,
-- which wakes them. The GET's refusal is read inline: a function defined here would be created again on every call.
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' then
  -- A key of another type (another library's lock) holds the lock; any other refusal (an ACL's) is the reply.
  if string.find(value.err, 'WRONGTYPE', 1, true) then
    return -1
  end
  return value
end
if value == ARGV[1] then
  if redis.call('PTTL', KEYS[2]) ~= -2 then
    return 2
  end
  redis.call('DEL', KEYS[1])
  return 1
elseif value then
  return -1
end
return 0
