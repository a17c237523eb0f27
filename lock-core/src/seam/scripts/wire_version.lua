-- The protocol version of the keys under a prefix (see lock_core::wire): the version found at KEYS[1], after writing
-- ours (ARGV[1], no TTL) where there was none. A script rather than SET NX GET, which needs Redis 7.0 (a single
-- server may run 5.0). Reply: nil (ours written) or the version found; WRONGTYPE for a key of another type.
local found = redis.call('GET', KEYS[1])
if not found then
  redis.call('SET', KEYS[1], ARGV[1])
end
return found
