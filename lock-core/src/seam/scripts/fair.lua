
local function refused(reply, what, key)
  if string.find(reply.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply('WRONGTYPE fair-lock ' .. what .. ' ' .. key .. ' is not a sorted set')
  end
  return reply
end
