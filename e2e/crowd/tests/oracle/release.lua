-- The oracle of e2e/crowd/tests/script_oracle.rs: lua/release.lua as it was before its writes were made once
-- per call (one command per key) instead of once per order. Kept unchanged below this note.
--
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
-- Many requests of one bucket in one call (the closer's closed orders): each released exactly as
-- in a call of its own, in order; one replenish message for the call when any unit went back
-- into the stock.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
--       9.. the nonce keys of the requests that have one ("undo" only), in the requests' order
-- ARGV: 1 replenish channel  2 campaign id (the replenish message)
--       then 5 values per request (request i at 3 + 5 * (i - 1)): request id, user id,
--       quantity, mode ("" or "undo"), "1" when the request has a nonce key ("" otherwise)
-- Returns 2 values per request, in the requests' order, {code, remaining, code, remaining, ...}:
--    1  released into the stock: remaining stock after the increment
--    3  released aside (pause_replenish is on): current remaining stock
--    0  already released: current remaining stock
--    2  "undo" and the outbox holds nothing for this request id: current remaining stock
--    5  "undo" refused: the entry is claimed; nothing changed
--   -4  bad quantity

local meta, stock_key, bought, outbox, pending, released, stats, claims =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local current = function() return tonumber(redis.call('GET', stock_key) or '0') end
local replenished = false

-- Forgets the request's nonce key when this request spent it ("<fingerprint> <request id>...").
local function forget_nonce(nonce, request_id)
  if not nonce then
    return
  end
  local v = redis.call('GET', nonce)
  if v and string.match(v, '^%S+ (%S+)') == request_id then
    redis.call('DEL', nonce)
  end
end

local function release(request_id, user, qty, mode, nonce)
  qty = tonumber(qty)
  if mode == 'undo' then
    local record = redis.call('HGET', outbox, request_id)
    if not record then
      forget_nonce(nonce, request_id)
      redis.call('HSETNX', released, request_id, 0) -- finished: its reservation call is a no-op
      return {2, current()}
    end
    if redis.call('HEXISTS', claims, request_id) == 1 then
      return {5, current()}
    end
    forget_nonce(nonce, request_id)
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
  replenished = true
  return {1, redis.call('INCRBY', stock_key, qty)}
end

local answers = {}
local next_nonce = 9
for i = 3, #ARGV - 4, 5 do
  local nonce
  if ARGV[i + 4] == '1' then
    nonce = KEYS[next_nonce]
    next_nonce = next_nonce + 1
  end
  local out = release(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], nonce)
  local at = #answers
  answers[at + 1], answers[at + 2] = out[1], out[2]
end
if replenished then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return answers
