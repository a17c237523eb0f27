-- A write to the caller's keys that only a holder of the newest fence may make (lock_core::fenced).
--
-- KEYS[1]  the guard: the highest fence this resource accepted, a decimal string without leading zeros
-- KEYS[2…] the keys the write touches (on Redis Cluster in the guard's slot)
-- ARGV[1]  the presented fence (decimal, no leading zeros: u64 printed by Rust)
-- ARGV[2]  the write: get | hget | hgetall | set | get-set | hset | del | incrby | rpush | xadd | observe (a read
--          counts as a write: once a holder has read, no older holder may change what it read)
-- ARGV[3…] its arguments
--
-- Reply: {1, the command's reply} when the fence is at least the guard's, which then becomes the presented fence;
-- {0, the guard's fence} when the presented one is below it, and nothing is written. A guard of another type, or
-- one holding anything but a fence, is refused as WRONGTYPE before any write.
--
-- The write runs before the guard moves, so a write the server refuses (a data key of another type, INCRBY on a
-- string that is not a number) leaves both unchanged: a script is not rolled back, so nothing may be written
-- before the last command that can fail. Fences are compared as decimal strings (longer is larger, then
-- lexically) so every u64 compares exactly; Lua's numbers are doubles and lose precision above 2^53.

local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' or (raw and not string.match(raw, '^%d+$')) then
  return redis.error_reply('WRONGTYPE fence guard ' .. KEYS[1] .. ' holds a value that is not a fence')
end

local presented = ARGV[1]
if raw and (#raw > #presented or (#raw == #presented and raw > presented)) then
  return {0, raw}
end

local write = ARGV[2]
local reply
if write == 'get' then
  reply = redis.pcall('GET', KEYS[2])
elseif write == 'hget' then
  reply = redis.pcall('HGET', KEYS[2], ARGV[3])
elseif write == 'hgetall' then
  reply = redis.pcall('HGETALL', KEYS[2])
elseif write == 'set' then
  reply = redis.pcall('SET', KEYS[2], ARGV[3])
elseif write == 'get-set' then
  reply = redis.pcall('SET', KEYS[2], ARGV[3], 'GET')
elseif write == 'hset' then
  reply = redis.pcall('HSET', KEYS[2], unpack(ARGV, 3))
elseif write == 'del' then
  reply = redis.pcall('DEL', unpack(KEYS, 2))
elseif write == 'incrby' then
  reply = redis.pcall('INCRBY', KEYS[2], ARGV[3])
elseif write == 'rpush' then
  reply = redis.pcall('RPUSH', KEYS[2], unpack(ARGV, 3))
elseif write == 'xadd' then
  reply = redis.pcall('XADD', KEYS[2], '*', unpack(ARGV, 3))
elseif write == 'observe' then
  reply = 0
else
  return redis.error_reply('ERR unknown fenced write ' .. write)
end
if type(reply) == 'table' and reply.err then
  -- The server's WRONGTYPE names no key; name the one the write touched, not the guard the call is routed by.
  if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds a value of another type for ' .. write)
  end
  return reply
end

if raw ~= presented then
  redis.call('SET', KEYS[1], presented)
end
return {1, reply}
