-- The id a fair queue's announcements name a waiter by: the first 16 hex digits of the SHA-1 of its token (its
-- member in the queue). It tells the waiter's process that it is that waiter's turn without publishing the token,
-- which is a capability (whoever has it can release or extend the hold).
local function waiter_id(token)
  return string.sub(redis.sha1hex(token), 1, 16)
end
