-- release.lua: give a reservation's units back, at most once per request id. The `released` hash
-- (request id -> quantity) is the one per-request ledger every release path goes through: the
-- writer (the database refused a reservation), the closer (an unpaid order was closed),
-- reconciliation repairs, and the gateway's undo of a reservation whose answer never came back.
--
-- Where the units go: back into the stock, with a replenish message so that every gateway clears
-- its sold-out flag at once; or, while the campaign's `pause_replenish` switch is on (meta field,
-- written by pause.lua), aside: counted in stats `aside_qty`, and returned to the stock by
-- pause.lua when the switch is turned off.
--
-- Mode "undo" (the gateway's undo): user and quantity come from the outbox record. It is refused
-- when the entry is claimed: by a producer of last resort (the sweeper, a repair; claim.lua), the
-- record may already be on its way to an order; by a safe retry (reserve.lua), the buyer was told
-- QUEUED with this request id. Either way the reservation stands. With the order's nonce
-- key (KEYS[9]), an undo that leaves nothing held (released, or nothing was held) also forgets the
-- nonce when the request spent it: the buyer was answered SERVICE_DEGRADED ("nothing was
-- reserved"), so the same signed request sent again is a new attempt, not a safe retry of a
-- reservation that no longer exists.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
--       9 the order's nonce (optional, "undo" only)
-- ARGV: 1 request id  2 user id  3 quantity  4 mode ("" or "undo")  5 replenish channel
--       6 campaign id (the replenish message)
-- Returns {code, remaining}:
--    1  released into the stock: remaining stock after the increment
--    3  released aside (pause_replenish is on): current remaining stock
--    0  already released: current remaining stock
--    2  "undo" and the outbox holds nothing for this request id: current remaining stock
--    5  "undo" refused: the entry is claimed; nothing changed
--   -4  bad quantity

local meta, stock_key, bought, outbox, pending, released, stats, claims =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local request_id, user = ARGV[1], ARGV[2]
local qty = tonumber(ARGV[3])
local current = function() return tonumber(redis.call('GET', stock_key) or '0') end

-- Forgets the order's nonce (KEYS[9]) when this request spent it ("<fingerprint> <request id>...").
local function forget_nonce()
  local nonce = KEYS[9]
  if not nonce then
    return
  end
  local v = redis.call('GET', nonce)
  if v and string.match(v, '^%S+ (%S+)') == request_id then
    redis.call('DEL', nonce)
  end
end

if ARGV[4] == 'undo' then
  local record = redis.call('HGET', outbox, request_id)
  if not record then
    forget_nonce()
    return {2, current()}
  end
  if redis.call('HEXISTS', claims, request_id) == 1 then
    return {5, current()}
  end
  forget_nonce()
  local r = cjson.decode(record)
  user, qty = r.user, tonumber(r.qty)
end
if not qty or qty < 1 or qty ~= math.floor(qty) then
  return {-4, 0}
end

if redis.call('HSETNX', released, request_id, qty) == 0 then
  return {0, current()}
end

local held = redis.call('HINCRBY', bought, user, -qty)
if held <= 0 then
  redis.call('HDEL', bought, user)
end
redis.call('HDEL', outbox, request_id)
redis.call('ZREM', pending, request_id)
redis.call('HDEL', claims, request_id)
redis.call('HINCRBY', stats, 'released_count', 1)
redis.call('HINCRBY', stats, 'released_qty', qty)

if redis.call('HGET', meta, 'pause_replenish') == '1' then
  redis.call('HINCRBY', stats, 'aside_qty', qty)
  return {3, current()}
end
local remaining = redis.call('INCRBY', stock_key, qty)
redis.call('PUBLISH', ARGV[5], ARGV[6])
return {1, remaining}
