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
-- Mode "aside" (the writer's compensation of a reservation the database refused for want of
-- stock): the units are set aside whatever the switch. The database had none left, so Redis
-- counted a unit the sale does not have (Redis came back from an older disk, say): given back to
-- the stock it would be sold again and refused again, once per buyer, until reconcile ran.
-- adopt.lua takes from the units set aside first (the orders Redis lost are what they stand for).
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
-- into the stock. Reads and writes once per call, not once per request (as reserve.lua): the
-- ledger and the buyers' holdings (one HMGET each), meta's pause switch, the stock; then one
-- HSET of the ledger (also for an undo that found nothing), one HSET and one HDEL of holdings, one HDEL of the outbox and of the
-- claims, one ZREM, the stats and the stock once each. Only an undo reads per request (its
-- outbox record, its claim, its nonce). e2e/crowd/tests/script_oracle.rs holds this script to the
-- one-command-per-write script it replaced.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
--       9.. the nonce keys of the requests that have one ("undo" only), in the requests' order
-- ARGV: 1 replenish channel  2 campaign id (the replenish message)
--       then 5 values per request (request i at 3 + 5 * (i - 1)): request id, user id,
--       quantity, mode ("", "undo" or "aside"), "1" when the request has a nonce key ("" otherwise)
-- Returns 2 values per request, in the requests' order, {code, remaining, code, remaining, ...}:
--    1  released into the stock: remaining stock after the increment
--    3  released aside (pause_replenish is on, or mode "aside"): current remaining stock
--    0  already released: current remaining stock
--    2  "undo" and the outbox holds nothing for this request id: current remaining stock; the
--       request id is finished (in the ledger with 0 units, unless there already), so that its
--       reservation call, should Redis run it after this undo, reserves nothing (reserve.lua)
--    5  "undo" refused: the entry is claimed; nothing changed
--   -4  bad quantity

local meta, stock_key, bought, outbox, pending, released, stats, claims =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

-- The requests, parsed once: {request id, user, qty, mode, nonce key}.
local requests = {}
do
  local next_nonce = 9
  for i = 3, #ARGV - 4, 5 do
    local nonce
    if ARGV[i + 4] == '1' then
      nonce = KEYS[next_nonce]
      next_nonce = next_nonce + 1
    end
    requests[#requests + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], nonce}
  end
end

-- HMGET of many fields, in runs of at most 1,000 (Lua's stack bounds `unpack`).
local function hmget(key, fields)
  local out = {}
  for from = 1, #fields, 1000 do
    local part = redis.call('HMGET', key, unpack(fields, from, math.min(from + 999, #fields)))
    for j = 1, #part do
      out[from + j - 1] = part[j]
    end
  end
  return out
end

-- The call's state of the bucket, read once and written once at its end (one write per key, not
-- one per request): the ledger, what each buyer holds, the entries released, the stock.
local done = {} -- request id -> released before or in this call
local held = {} -- user -> units held (read at first sight)
local touched = {} -- the users this call released units of, in order
local gone = {} -- request id -> its outbox, pending and claims entries are deleted by this call
local ledger, dropped = {}, {} -- HSET released arguments; request ids whose entries go
local count, qty_back, qty_aside = 0, 0, 0
local paused = redis.call('HGET', meta, 'pause_replenish') == '1'
local stock -- read at first need
local function current()
  if not stock then
    stock = tonumber(redis.call('GET', stock_key) or '0')
  end
  return stock + qty_back
end
do
  local ids, users = {}, {}
  for n, r in ipairs(requests) do
    ids[n] = r[1]
    if r[4] ~= 'undo' then
      users[#users + 1] = r[2]
    end
  end
  local l, h = hmget(released, ids), hmget(bought, users)
  for n, id in ipairs(ids) do
    if l[n] then
      done[id] = true
    end
  end
  for n, user in ipairs(users) do
    held[user] = tonumber(h[n] or '0')
  end
end

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

-- Marks a request id finished in the ledger with 0 units, when it is not there yet: an undo
-- that found nothing to release. reserve.lua reserves nothing for a request id in the ledger,
-- so the order's call, when Redis runs it after its undo (sent again after NOSCRIPT, TRYAGAIN
-- or MOVED), is a no-op.
local function finish(request_id)
  if not done[request_id] then
    done[request_id] = true
    ledger[#ledger + 1], ledger[#ledger + 2] = request_id, 0
  end
end

local function release(request_id, user, qty, mode, nonce)
  qty = tonumber(qty)
  if mode == 'undo' then
    local record = not gone[request_id] and redis.call('HGET', outbox, request_id)
    if not record then
      forget_nonce(nonce, request_id)
      finish(request_id)
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

  if done[request_id] then
    return {0, current()}
  end
  done[request_id] = true
  ledger[#ledger + 1], ledger[#ledger + 2] = request_id, qty

  if held[user] == nil then
    held[user] = tonumber(redis.call('HGET', bought, user) or '0')
  end
  if not touched[user] then
    touched[user] = true
    touched[#touched + 1] = user
  end
  held[user] = held[user] - qty
  gone[request_id] = true
  dropped[#dropped + 1] = request_id
  count = count + 1

  if paused or mode == 'aside' then
    qty_aside = qty_aside + qty
    return {3, current()}
  end
  qty_back = qty_back + qty
  return {1, current()}
end

local answers = {}
for _, r in ipairs(requests) do
  local out = release(r[1], r[2], r[3], r[4], r[5])
  local at = #answers
  answers[at + 1], answers[at + 2] = out[1], out[2]
end

-- The call's writes, one command per key (in runs of at most 1,000 arguments, as `hmget`).
local function write(command, key, args)
  for from = 1, #args, 1000 do
    redis.call(command, key, unpack(args, from, math.min(from + 999, #args)))
  end
end
write('HSET', released, ledger)
if count > 0 then
  local holding, empty = {}, {}
  for _, user in ipairs(touched) do
    if held[user] <= 0 then
      empty[#empty + 1] = user
    else
      holding[#holding + 1], holding[#holding + 2] = user, held[user]
    end
  end
  write('HSET', bought, holding)
  write('HDEL', bought, empty)
  write('HDEL', outbox, dropped)
  write('ZREM', pending, dropped)
  write('HDEL', claims, dropped)
  redis.call('HINCRBY', stats, 'released_count', count)
  redis.call('HINCRBY', stats, 'released_qty', qty_back + qty_aside)
  if qty_aside > 0 then
    redis.call('HINCRBY', stats, 'aside_qty', qty_aside)
  end
  if qty_back > 0 then
    redis.call('INCRBY', stock_key, qty_back)
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
end
return answers
