
local writer, refused = lock_value(KEYS[1])
if refused then
  return refused
end
local now = string.format('%d', rw_now())
local readers, waiting
readers, refused = rw_read('ZRANGEBYSCORE', 'readers', KEYS[2], '(' .. now, '+inf')
if refused then
  return refused
end
waiting, refused = rw_read('ZRANGEBYSCORE', 'writer heartbeats', KEYS[4], '(' .. now, '+inf')
if refused then
  return refused
end
local _, refused_queue = rw_read('ZCARD', 'writer queue', KEYS[3])
if refused_queue then
  return refused_queue
end
return {writer and 1 or 0, #readers, #waiting}
