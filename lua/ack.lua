-- ack.lua: the order writer's acknowledgement, after the orders' transaction committed.
-- Removes each committed reservation from the outbox, the pending set and the claims, and counts
-- it once. Idempotent: a request id that is no longer in the outbox (acked before, or released)
-- is skipped, so redelivered records never count twice.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
-- ARGV: request ids
-- Returns the number of request ids acknowledged now.

local outbox, pending, stats, claims = KEYS[4], KEYS[5], KEYS[7], KEYS[8]
local n = 0
for i = 1, #ARGV do
  if redis.call('HDEL', outbox, ARGV[i]) == 1 then
    redis.call('ZREM', pending, ARGV[i])
    redis.call('HDEL', claims, ARGV[i])
    n = n + 1
  end
end
if n > 0 then
  redis.call('HINCRBY', stats, 'acked_count', n)
end
return n
