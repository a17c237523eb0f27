
local lines_up = ARGV[6] and ARGV[6] ~= ''
local n = #KEYS / (lines_up and 4 or 3)
local fencing = ARGV[3] == '1'
-- One read of each key, which is also its type check (GET refuses a key of another type): nothing is written
-- until every key passed.
local values, counters = {}, {}
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  local value, refused = lock_value(lock)
  if refused then
    return refused
  end
  values[i] = value
  if fencing then
    local current, refused = read_counter(KEYS[2 * i])
    if refused then
      return refused
    end
    counters[i] = current
  end
end
for i = 1, n do
  if values[i] and values[i] ~= ARGV[1] then
    local pttl = redis.call('PTTL', KEYS[2 * i - 1])
    local refused = line_up(lines_up and KEYS[3 * n + i], KEYS[2 * n + i], lines_up and ARGV[6], pttl)
    if refused then
      return refused
    end
    return {0, i, pttl}
  end
end
local floor = fencing and (tonumber(ARGV[4] or '') or clock_floor())
local reply = {1}
for i = 1, n do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  if values[i] == ARGV[1] then
    redis.call('PEXPIRE', lock, ARGV[2])
    if fencing then
      reply[i + 1] = granted_fence(fence, counters[i], floor, ARGV[5])
    end
  else
    redis.call('SET', lock, ARGV[1], 'PX', ARGV[2])
    if fencing then
      reply[i + 1] = advance(fence, counters[i], floor, ARGV[5])
    end
  end
end
return reply
