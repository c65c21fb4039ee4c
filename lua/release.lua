-- release.lua: give a reservation's stock back, at most once per request id.
-- Used when the database refuses a reservation (compensation), when an unpaid order is closed,
-- and by reconciliation repairs. Idempotent: a second call for the same request id changes nothing.
-- With ARGV[4] = "held" it releases only what the outbox holds for the request id (user and
-- quantity from the record): the gateway's undo of a reservation whose answer never came back.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats
-- ARGV: 1 request id  2 user id  3 quantity  [4 "held"]
-- Returns {code, remaining}:
--    1  released: remaining stock after the increment
--    0  already released: current remaining stock
--    2  "held" and the outbox holds nothing for this request id: current remaining stock
--   -4  bad quantity

local stock_key, bought, outbox, pending, released, stats = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local request_id, user = ARGV[1], ARGV[2]
local qty = tonumber(ARGV[3])
if ARGV[4] == 'held' then
  local record = redis.call('HGET', outbox, request_id)
  if not record then
    return {2, tonumber(redis.call('GET', stock_key) or '0')}
  end
  local r = cjson.decode(record)
  user, qty = r.user, tonumber(r.qty)
end
if not qty or qty < 1 or qty ~= math.floor(qty) then
  return {-4, 0}
end

if redis.call('HSETNX', released, request_id, qty) == 0 then
  return {0, tonumber(redis.call('GET', stock_key) or '0')}
end

local remaining = redis.call('INCRBY', stock_key, qty)
local held = redis.call('HINCRBY', bought, user, -qty)
if held <= 0 then
  redis.call('HDEL', bought, user)
end
redis.call('HDEL', outbox, request_id)
redis.call('ZREM', pending, request_id)
redis.call('HINCRBY', stats, 'released_count', 1)
redis.call('HINCRBY', stats, 'released_qty', qty)
return {1, remaining}
