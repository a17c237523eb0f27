
local token = ARGV[1]
local writer, refused = lock_value(KEYS[1])
if refused then
  return refused
end
local mine, head
mine, refused = rw_read('ZSCORE', 'readers', KEYS[2], token)
if refused then
  return refused
end
head, refused = rw_read('ZRANGE', 'writer queue', KEYS[3], 0, 0)
if refused then
  return refused
end
local now = rw_now()
local expiry = string.format('%d', now + tonumber(ARGV[2]))
if writer == token then
  if ARGV[3] ~= '1' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
  redis.call('DEL', KEYS[1])
  redis.call('ZADD', KEYS[2], expiry, token)
  rw_expire_readers()
  if not head[1] and redis.call('DEL', KEYS[6]) > 0 then
    redis.call(ARGV[5] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[5], ARGV[4])
  end
  return 1
end
if mine and tonumber(mine) > now then
  redis.call('ZADD', KEYS[2], 'XX', expiry, token)
  rw_expire_readers()
  return 1
end
return 0
