-- adopt.lua: reconciliation repair for an order that PostgreSQL holds but Redis does not account
-- for (an order without a reservation record, or a reservation released although its order is
-- live). Takes the order's quantity out of the sale again so the edge cannot sell it twice: from
-- the units set aside first (by pause_replenish, or by the writer for a reservation the database
-- refused for want of stock: the unit Redis counted that the sale does not have), then from the
-- stock.
--
-- The request id's release is struck from the `released` ledger: its order is live again, so a
-- later release of it (the order closes unpaid) must give the units back, not find them
-- "already released". Idempotent by request id (marker field `adopted:<request id>` in stats).
--
-- The repair's premise is re-checked here, atomically with the write, where Redis holds it: with
-- ARGV[4] = "released" (a DOUBLE_RELEASE), the request id must still be in the `released` ledger.
-- (The premise in PostgreSQL, that the order is live, is re-checked by the caller under the
-- order's row lock, held across this call.)
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
-- ARGV: 1 request id  2 user id  3 quantity  4 "released" or ""
-- Returns {code, taken}:
--    1  adopted: `taken` units taken (less than qty if the stock was short)
--    0  adopted before: nothing changed
--    2  ARGV[4] = "released" and the request id is not released (any more): nothing changed
--   -4  bad quantity

local stock_key, bought, released, stats = KEYS[2], KEYS[3], KEYS[6], KEYS[7]
local request_id, user = ARGV[1], ARGV[2]
local qty = tonumber(ARGV[3])
if not qty or qty < 1 or qty ~= math.floor(qty) then
  return {-4, 0}
end
if ARGV[4] == 'released' and redis.call('HEXISTS', released, request_id) == 0 then
  return {2, 0}
end
if redis.call('HSETNX', stats, 'adopted:' .. request_id, qty) == 0 then
  return {0, 0}
end
local aside = tonumber(redis.call('HGET', stats, 'aside_qty') or '0')
local from_aside = math.min(aside, qty)
if from_aside > 0 then
  redis.call('HINCRBY', stats, 'aside_qty', -from_aside)
end
local stock = tonumber(redis.call('GET', stock_key) or '0')
local from_stock = math.min(stock, qty - from_aside)
if from_stock > 0 then
  redis.call('DECRBY', stock_key, from_stock)
end
redis.call('HDEL', released, request_id)
redis.call('HINCRBY', bought, user, qty)
redis.call('HINCRBY', stats, 'adopted_count', 1)
redis.call('HINCRBY', stats, 'adopted_qty', from_aside + from_stock)
return {1, from_aside + from_stock}
