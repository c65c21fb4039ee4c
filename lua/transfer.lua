-- transfer.lua: moves stock between two buckets of a campaign with hot-stock buckets
-- (protocol/src/keys.rs, Bucket). A transfer is two calls, one per bucket (each bucket is its own
-- hash slot): "give" on the bucket the units leave, then "take" on the bucket they join, both
-- under one transfer id. Both sides keep a ledger of every transfer id (`sent`, `received`), so a
-- transfer whose "take" never ran (the caller died between the two calls) is seen and finished by
-- the order writer's sweeper, and a "take" sent twice adds once. In flight, the units are in
-- neither stock: never sold twice, at worst sold a little later.
--
-- Used by the gateway when a buyer's home bucket is short (the units move to the buyer's bucket,
-- where their per-user limit and nonces live), and by `order-writer campaign rebalance`.
--
-- KEYS: 1 meta  2 stock  3 ledger (`sent` for "give", `received` for "take") of this bucket
-- ARGV[1] = "give": 2 transfer id  3 to bucket index  4 qty wanted  5 "half" or ""
--   Takes min(stock, wanted) units out of the stock; with "half", at least half of the stock
--   (rounded up), so that one move serves the next buyers too. Records
--   `sent[id] = "<to> <qty> <ms>"` (Redis time). The same id again gives nothing more.
--   Returns {given, remaining}: given = 0 when the stock is empty (nothing recorded).
-- ARGV[1] = "take": 2 transfer id  3 qty  4 replenish channel  5 campaign id
--   Adds qty to the stock once per transfer id (`received[id] = qty`) and sends a replenish
--   message: a gateway that saw every bucket empty while these units were in flight clears its
--   sold-out flag. Returns {1, remaining} when added now, {0, remaining} when added before,
--   {-4, 0} for a bad quantity.

local stock_key, ledger = KEYS[2], KEYS[3]
local mode, id = ARGV[1], ARGV[2]
local current = function() return tonumber(redis.call('GET', stock_key) or '0') end

if mode == 'give' then
  local before = redis.call('HGET', ledger, id)
  if before then
    local qty = string.match(before, '^%S+ (%S+)')
    return {tonumber(qty) or 0, current()}
  end
  local stock = current()
  local wanted = tonumber(ARGV[4]) or 0
  if ARGV[5] == 'half' then
    wanted = math.max(wanted, math.ceil(stock / 2))
  end
  local given = math.min(stock, wanted)
  if given <= 0 then
    return {0, stock}
  end
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local remaining = redis.call('DECRBY', stock_key, given)
  redis.call('HSET', ledger, id, ARGV[3] .. ' ' .. given .. ' ' .. now_ms)
  return {given, remaining}
end

if mode == 'take' then
  local qty = tonumber(ARGV[3])
  if not qty or qty < 1 or qty ~= math.floor(qty) then
    return {-4, 0}
  end
  if redis.call('HSETNX', ledger, id, qty) == 0 then
    return {0, current()}
  end
  local remaining = redis.call('INCRBY', stock_key, qty)
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  return {1, remaining}
end
return redis.error_reply('transfer.lua: unknown mode ' .. tostring(mode))
