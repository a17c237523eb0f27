
if KEYS[6] then
  local kind = redis.call('TYPE', KEYS[6]).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE given-back candidacies ' .. KEYS[6] .. ' is not a hash')
  end
end
if KEYS[8] then
  local kind = redis.call('TYPE', KEYS[8]).ok
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE election promise ' .. KEYS[8] .. ' holds a value that is not a promise')
  end
end
local value, refused_lock = lock_value(KEYS[1])
if refused_lock then
  return refused_lock
end
if value ~= ARGV[1] and KEYS[6] then
  redis.call('HSET', KEYS[6], ARGV[1], '1')
  if redis.call('PTTL', KEYS[6]) < tonumber(ARGV[4]) then
    redis.call('PEXPIRE', KEYS[6], ARGV[4])
  end
end
if value == ARGV[1] then
  local publish = ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH'
  if redis.call('DEL', KEYS[1], KEYS[4]) > 1 then
    local payload = ARGV[2]
    if KEYS[7] then
      local first, others = next_waiting(KEYS[7], ARGV[2])
      if others then
        -- The processes not named still wait: the next resignation must announce itself too.
        local left = redis.call('PTTL', KEYS[7])
        if left > 0 then
          redis.call('SET', KEYS[4], '1', 'PX', string.format('%d', left))
        end
      end
      if first then
        payload = ARGV[2] .. '>' .. first
        local grace = tonumber(ARGV[5] or '')
        if grace and KEYS[8] then
          redis.call('SET', KEYS[8], first, 'PX', string.format('%d', grace))
        end
      end
    end
    redis.call(publish, KEYS[3], payload)
  end
  redis.call('DEL', KEYS[2])
  redis.call(publish, KEYS[5], ARGV[2])
  return 1
elseif value then
  return -1
end
return 0
