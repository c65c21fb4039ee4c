-- restock.lua: adds units to one bucket of a published campaign (`order-writer campaign
-- add-stock`), once per addition: the addition's ref is remembered in `stats`, so running it
-- again changes nothing. The bucket's share (meta `total`) grows with its stock, so the
-- reconciliation's equation holds; a replenish message clears the gateways' sold-out flags.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
-- ARGV: 1 the addition's ref  2 units (at least 1)  3 replenish channel  4 campaign id
-- Returns {code, units}:
--    1  added now
--    0  this ref was added before: nothing changed
--   -3  the campaign is not published in Redis: nothing changed

local meta, stock_key, stats = KEYS[1], KEYS[2], KEYS[7]
if not redis.call('HGET', meta, 'state') then
  return {-3, 0}
end
local qty = tonumber(ARGV[2])
if redis.call('HSETNX', stats, 'added:' .. ARGV[1], qty) == 0 then
  return {0, 0}
end
redis.call('INCRBY', stock_key, qty)
redis.call('HINCRBY', meta, 'total', qty)
redis.call('HINCRBY', stats, 'added_qty', qty)
redis.call('PUBLISH', ARGV[3], ARGV[4])
return {1, qty}
