-- adopt.lua: reconciliation repair for an order that PostgreSQL holds but Redis does not account
-- for (an order without a reservation record, or a reservation released although its order is
-- live). Takes the order's quantity out of the sale again so the edge cannot sell it twice.
-- Idempotent by request id (marker field `adopted:<request id>` in stats).
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats
-- ARGV: 1 request id  2 user id  3 quantity
-- Returns {code, taken}:
--    1  adopted: `taken` units taken from the remaining stock (less than qty if stock was short)
--    0  adopted before: nothing changed
--   -4  bad quantity

local stock_key, bought, stats = KEYS[2], KEYS[3], KEYS[7]
local request_id, user = ARGV[1], ARGV[2]
local qty = tonumber(ARGV[3])
if not qty or qty < 1 or qty ~= math.floor(qty) then
  return {-4, 0}
end
if redis.call('HSETNX', stats, 'adopted:' .. request_id, qty) == 0 then
  return {0, 0}
end
local stock = tonumber(redis.call('GET', stock_key) or '0')
local take = math.min(stock, qty)
if take > 0 then
  redis.call('DECRBY', stock_key, take)
end
redis.call('HINCRBY', bought, user, qty)
redis.call('HINCRBY', stats, 'adopted_count', 1)
redis.call('HINCRBY', stats, 'adopted_qty', take)
return {1, take}
