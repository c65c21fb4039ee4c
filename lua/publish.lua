-- publish.lua: load a campaign's stock into Redis and mark it READY, atomically.
-- Running it twice is harmless, and it never resets a campaign that is LIVE or has reservations:
-- restarting any process, or publishing again, never refills stock.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
-- ARGV: 1 stock version  2 total  3 per-user limit  4 sku  5 price cents  6 price version
--       7 buckets (campaign with buckets: how many; "" or "1" without)  8 this bucket's index
-- A campaign with B buckets is published once per bucket, each with its share of the stock as
-- `total` (protocol::scripts::bucket_shares); meta `buckets` and `bucket` say which it is.
-- Returns {code, state, stock_version}:
--    1  published (state READY)
--    0  already published with this stock version and untouched: nothing changed
--   -1  refused: the campaign is LIVE or has reservations; nothing changed

local meta, stock_key, bought, outbox, released = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]
local version = ARGV[1]

local cur = redis.call('HMGET', meta, 'state', 'stock_version')
-- A reservation makes the campaign LIVE, and leaves a buyer in `bought`, an entry in `outbox`
-- or (once released) one in the `released` ledger.
local reserved = redis.call('EXISTS', bought, outbox, released)
if cur[1] == 'LIVE' or reserved > 0 then
  return {-1, cur[1] or '', cur[2] or ''}
end
if cur[1] == 'READY' and cur[2] == version then
  return {0, 'READY', version}
end

redis.call('HSET', meta,
  'state', 'READY', 'stock_version', version, 'total', ARGV[2], 'limit', ARGV[3],
  'sku', ARGV[4], 'price_cents', ARGV[5], 'price_version', ARGV[6])
if tonumber(ARGV[7] or '') and tonumber(ARGV[7]) > 1 then
  redis.call('HSET', meta, 'buckets', ARGV[7], 'bucket', ARGV[8])
end
redis.call('SET', stock_key, ARGV[2])
return {1, 'READY', version}
