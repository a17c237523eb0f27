
local token = ARGV[1]
local writer, refused = lock_value(KEYS[1])
if refused then
  return refused
end
local mine, beat, head
mine, refused = rw_read('ZSCORE', 'readers', KEYS[2], token)
if refused then
  return refused
end
beat, refused = rw_read('ZSCORE', 'writer heartbeats', KEYS[4], token)
if refused then
  return refused
end
head, refused = rw_read('ZRANGE', 'writer queue', KEYS[3], 0, 1)
if refused then
  return refused
end
local now = rw_now()
local outcome = 0
if writer == token then
  redis.call('DEL', KEYS[1])
  writer = false
  outcome = 1
elseif mine then
  redis.call('ZREM', KEYS[2], token)
  outcome = tonumber(mine) > now and 1 or 2
elseif writer then
  outcome = -1
end
local left = redis.call('ZREM', KEYS[3], token)
if beat then
  redis.call('ZREM', KEYS[4], token)
end
if outcome == 0 and left == 1 then
  -- A waiting writer's place, given back: released (so the caller wakes a reader of its own process it held back).
  outcome = 1
end
if (outcome == 1 or outcome == 2) and not writer then
  local first = head[1]
  if first == token then
    first = head[2]
  end
  local publish = ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH'
  if first then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    if not (last[2] and tonumber(last[2]) > now) then
      redis.call(publish, KEYS[5], ARGV[2] .. ' ' .. waiter_id(first))
    end
  elseif redis.call('DEL', KEYS[6]) > 0 then
    redis.call(publish, KEYS[5], ARGV[2])
  end
end
return outcome
