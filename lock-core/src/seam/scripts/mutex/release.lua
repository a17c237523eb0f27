
local value, refused = lock_value(KEYS[1])
if refused then
  return refused
end
if value == ARGV[1] then
  if KEYS[5] then
    -- Another library's waiters block on this list (python-redis-lock's signal): signal it as its own release does.
    redis.call('DEL', KEYS[5])
    redis.call('LPUSH', KEYS[5], '1')
    redis.call('PEXPIRE', KEYS[5], '1000')
  end
  if ARGV[4] then
    -- Another library's waiters listen on the channel for this message, and leave no mark: announce every time.
    redis.call('DEL', KEYS[1], KEYS[3])
    redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2], ARGV[4])
    return 1
  end
  if redis.call('DEL', KEYS[1], KEYS[3]) > 1 then
    local first, others = next_waiting(KEYS[4], ARGV[2])
    if others then
      -- The processes not woken still wait: the next release must announce itself too.
      local left = redis.call('PTTL', KEYS[4])
      if left > 0 then
        redis.call('SET', KEYS[3], '1', 'PX', string.format('%d', left))
      end
    end
    local payload = first and (ARGV[2] .. '>' .. first) or ARGV[2]
    redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', KEYS[2], payload)
  end
  return 1
elseif value then
  return -1
end
return 0
