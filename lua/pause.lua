-- pause.lua: applies a campaign's `pause_replenish` switch (seed: 暂停库存回补, 优先保证不超卖).
-- While it is on, release.lua sets released units aside instead of giving them back to the sale.
-- Turning it off returns every unit set aside to the stock at once, with a replenish message so
-- that the gateways clear their sold-out flags. Running it again changes nothing.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
-- ARGV: 1 "1" (pause) or "0" (resume)  2 replenish channel  3 campaign id
-- Returns {code, returned}:
--    1  applied: `returned` units moved from aside back into the stock (0 when pausing)
--   -3  the campaign is not published in Redis: nothing changed

local meta, stock_key, stats = KEYS[1], KEYS[2], KEYS[7]
if not redis.call('HGET', meta, 'state') then
  return {-3, 0}
end
if ARGV[1] == '1' then
  redis.call('HSET', meta, 'pause_replenish', '1')
  return {1, 0}
end
redis.call('HSET', meta, 'pause_replenish', '0')
local aside = tonumber(redis.call('HGET', stats, 'aside_qty') or '0')
if aside > 0 then
  redis.call('INCRBY', stock_key, aside)
  redis.call('HSET', stats, 'aside_qty', 0)
  redis.call('HINCRBY', stats, 'returned_qty', aside)
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return {1, aside}
