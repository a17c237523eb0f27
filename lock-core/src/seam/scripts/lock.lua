
local function lock_value(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    return nil, redis.error_reply('WRONGTYPE lock key ' .. key .. ' holds a value that is not a lock')
  end
  return value
end
