
local refused = sem_types()
if refused then
  return refused
end
local fencing = ARGV[5] == '1'
local current = false
if fencing then
  current, refused = read_counter(KEYS[5])
  if refused then
    return refused
  end
end
local now = sem_now()
local ttl = tonumber(ARGV[3])
purge(now)
local stored = redis.call('GET', KEYS[4])
if stored and stored ~= ARGV[4] then
  return {-1, tonumber(stored)}
end
local grant = redis.call('HGET', KEYS[3], ARGV[1])
if grant then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + ttl), ARGV[1])
  gc()
  local reply = {1, tonumber(string.match(grant, '^(%-?%d+);'))}
  for slot in string.gmatch(string.match(grant, ';(.*)$') or '', '%d+') do
    table.insert(reply, tonumber(slot))
  end
  return reply
end
local n, limit = tonumber(ARGV[2]), tonumber(ARGV[4])
if redis.call('HLEN', KEYS[2]) + n > limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = -1
  if first[2] then
    wait = math.max(tonumber(first[2]) - now, 0)
  end
  local marked = awaited(KEYS[6], wait)
  if marked then
    return marked
  end
  return {0, wait, limit - redis.call('HLEN', KEYS[2])}
end
local slots = {}
local slot = 0
while #slots < n and slot < limit do
  if not redis.call('HGET', KEYS[2], string.format('%d', slot)) then
    table.insert(slots, slot)
  end
  slot = slot + 1
end
local fence = -1
if fencing then
  fence = advance(KEYS[5], current, tonumber(ARGV[6] or '') or clock_floor(), ARGV[7])
end
for _, s in ipairs(slots) do
  redis.call('HSET', KEYS[2], string.format('%d', s), ARGV[1])
end
redis.call('HSET', KEYS[3], ARGV[1], string.format('%d', fence) .. ';' .. table.concat(slots, ','))
redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
redis.call('SET', KEYS[4], ARGV[4])
gc()
local reply = {1, fence}
for _, s in ipairs(slots) do
  table.insert(reply, s)
end
return reply
