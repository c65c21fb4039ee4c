-- reserve.lua: atomic reservations of one campaign bucket, one or many orders per call. For
-- each order, in the order sent: the campaign's global limits (when the order carries them,
-- counted here rather than in a call of their own), the nonce, dedupe (per-user limit), stock
-- check, decrement, and an outbox record. Never lets stock go below zero. Each order is decided
-- exactly as if it were sent in a call of its own, after the orders before it; one order's
-- refusal (bad quantity, replay, limit) never changes its neighbours' answers
-- (e2e/crowd/tests/script_oracle.rs holds this script to the one-command-per-write script it replaced).
--
-- KEYS (all share the bucket's hash tag, see protocol/src/keys.rs):
--   1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
--   9.. per order, in the orders' order: its nonce key when it has one (see "Nonce" below), then
--       2 keys per global limit rule it carries (see "Global limits" below): the rule's counter
--       of the current window, then that of the previous window
--   (6 is only read, 7 not touched here, 8 only by a safe retry; every script takes the same
--   eight keys first)
--
-- Reads and writes once per call, not once per order: what the call's buyers hold and whether
-- the outbox and the `released` ledger have its request ids (one HMGET each), the stock (GET),
-- meta and TIME; then, for all
-- the call's reservations together, one DECRBY of the stock, one HSET of the buyers' holdings,
-- one HSET of the records, one ZADD to `pending` (the sweeper's index by age). In between the
-- call's state lives in Lua tables. Per order there remains its nonce (one SET) and its record's
-- text. Why: inside a script Redis spends its time per command run and per number made text
-- (a printf each), not per call, so a batch is only cheaper per order when each order runs fewer
-- commands (figures: docs/benchmarks-journal.md, "One write per key per call").
-- No counters: reconciliation derives what was reserved from `bought` (Σ bought = reserved -
-- released + re-taken).
-- ARGV:
--   1 campaign id
--   2 the caller's bucket count (its campaign file's `buckets`, 1 without buckets): it must be
--     meta `buckets` (absent: 1), or the caller's home buckets are not the published ones and
--     its records would be acked, released and swept in the wrong bucket (-6).
--   then per order, 8 values and 3 per global limit rule it carries:
--     request id, user id, quantity,
--     nonce TTL in seconds ("": the order has no nonce and no key among KEYS[9..]),
--     request fingerprint (with a nonce only, no spaces),
--     fall over: "1": a bucket of a campaign with buckets, and other buckets may still give
--       stock to this one (lua/transfer.lua): a short stock answers 3 instead of 0 and the
--       nonce is forgotten, so that the same request may come again once stock moved here.
--       "": the last word.
--     the number of global limit rules r ("" or "0": none),
--     the order's origin for the audit: JSON members spliced into its record after "qty" as
--       they are (protocol::record::Origin::fragment: ',"client_ip":"...","device":"...",
--       "registered_at":N', each when known), "" for none; absent (the call's last value) is ""
--     then r times:
--       the rule's max (in this bucket), its window in ms, ms into its current window
-- Meta `buckets` (written by publish.lua on a campaign with buckets) goes into the record, so
-- that whoever reads it finds the buyer's home bucket (protocol::keys::Bucket::of_user).
-- Returns 3 values per order, in the orders' order: {code, n, record, code, n, record, ...}:
--    1  reserved: remaining stock after the decrement, record = the outbox JSON
--    0  sold out: remaining (0, or less than the quantity asked for)
--   -1  limit reached: the quantity this user already holds
--   -2  duplicate request id (in the outbox, or finished: in the `released` ledger): 0
--   -3  campaign not published (or not READY/LIVE): 0
--   -4  bad quantity (below 1 or above the per-user limit): the limit
--   -5  replay: the nonce was used by another request (another fingerprint): 0
--   -6  the caller's bucket count (ARGV[2]) is not the published one: the published count
--    2  safe retry of a reserved request: 0, record = that request's id
--    3  this bucket is short (fall over "1" only): remaining; nothing written, nonce forgotten
--   -7  over a global limit: n = the rule (1..r, in the order sent), record = ms until that
--       rule's current window ends; nothing else read or written, the nonce not spent
--   A refusal answered again from the nonce (below) comes as {code, n, "again"}: the first
--   answer, not a fact of now (stock may have come back since), so nobody acts on it but the
--   buyer (the gateway never sets its sold-out flag from it).
--
-- Nonce: one SET NX with a TTL (>= the timestamp window) before anything else of its order,
-- holding "<fingerprint> <request id>". Taken already: another fingerprint is a replay (-5);
-- the same fingerprint is the same signed request sent again (a client whose connection
-- dropped): it gets the first answer, QUEUED with the first request id (2), or the first
-- refusal again (marked "again"), which the script appends to the value (" <code> <n>", TTL
-- kept). A safe retry answered QUEUED claims the first request's outbox entry (claims[id] =
-- "retry", unless already claimed): the first call's answer may be late, and its gateway's undo
-- (release.lua "undo"), running after this retry, must leave a reservation the buyer was told
-- is QUEUED. Nothing else is read or written for a retry or a replay.
--
-- Finished request ids: a request id in the `released` ledger was released or undone
-- (release.lua; an undo that found nothing leaves it there with 0 units). A call that runs it
-- again (sent again by the Redis client after `NOSCRIPT`, `TRYAGAIN` or `MOVED`, after its order
-- gave up and was undone) reserves nothing: -2 before anything else of the order is read or
-- written, its nonce untouched, so the buyer told "nothing was reserved" holds nothing and may
-- send the same signed request again as a new attempt (it gets a new request id).
--
-- Global limits (a campaign's [[global_limit]] rules, counted across every gateway): checked for
-- each order that carries them right after its nonce, in arrival order within the call. An
-- order whose nonce is spent already (a safe retry, a replay) is answered from the nonce and
-- counts in no rule: resending the same signed order after a lost answer is safe under every
-- rule. A fresh nonce is taken back (DEL) when a rule refuses the order. Each rule is a sliding
-- window over two fixed-window counters: the estimate is the current window's count plus the
-- previous window's count weighted by the share of it the sliding window still covers (prev * (window - into) / window + cur). The order goes on when
-- every rule's estimate + 1 stays within its max; then, and only then, each rule's current
-- counter counts it (INCR, expiring after two windows), whatever the reservation then answers
-- (a request is counted, not a sale). An order over a rule counts nowhere (-7). The caller
-- numbers the windows from its own clock, so that the keys can be named in KEYS; the counters
-- carry the bucket's hash tag (protocol::global_limit: a rule by user counts in the buyer's home
-- bucket with its whole max, the other rules with the bucket's share of it).

local meta, stock_key, bought, outbox, pending, released, claims =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[8]
local campaign = ARGV[1]

-- Read once per call: only this script changes meta during it (READY -> LIVE, kept in `state`).
local m = redis.call('HMGET', meta, 'state', 'limit', 'sku', 'price_cents', 'price_version', 'stock_version',
  'buckets')
local state, limit = m[1], tonumber(m[2])
local published = tonumber(m[7]) or 1
local now_ms -- the call's TIME, read at its first reservation
local now_text -- the same as text (a number made text costs a printf in Redis's Lua: done once)
local tail -- the record's fields that are the same for every order of the call: ',"campaign":...}'

-- The orders, parsed once: {request id, user, qty, ttl, fingerprint, fall over, nonce key, r, k, a,
-- origin}
-- (r global limit rules, their keys from KEYS[k], their arguments from ARGV[a]).
local orders = {}
do
  local k = 9 -- the next order's first key
  local i = 3 -- the next order's first argument
  while i + 6 <= #ARGV do
    local nonce_key
    if ARGV[i + 3] ~= '' then
      nonce_key = KEYS[k]
      k = k + 1
    end
    local r = tonumber(ARGV[i + 6]) or 0
    orders[#orders + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], nonce_key, r, k,
      i + 8, ARGV[i + 7] or ''}
    k = k + 2 * r
    i = i + 8 + 3 * r
  end
end

-- The call's state of the bucket, read once and written once at its end (one write per key, not
-- one per order): what each buyer holds, which request ids the outbox has, the stock.
local held, known, finished = {}, {}, {}
local stock -- read at the first stock check
local taken = 0 -- units this call reserved
local holders, records, scored = {}, {}, {} -- HSET bought, HSET outbox, ZADD pending arguments
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
-- Whether the bucket sells to this caller at all, decided once for every order of the call (only
-- READY -> LIVE changes `state` during it): nil, or the refusal every order gets.
local closed
if (state ~= 'READY' and state ~= 'LIVE') or not limit then
  closed = {-3, 0, ''}
elseif tonumber(ARGV[2]) ~= published then
  closed = {-6, published, ''}
end
if not closed and #orders > 0 then
  local users, ids = {}, {}
  for n, o in ipairs(orders) do
    users[n], ids[n] = o[2], o[1]
  end
  local h, e, f = hmget(bought, users), hmget(outbox, ids), hmget(released, ids)
  for n, o in ipairs(orders) do
    held[o[2]] = tonumber(h[n] or '0')
    if e[n] then
      known[o[1]] = true
    end
    if f[n] then
      finished[o[1]] = true
    end
  end
end

local function reserve(request_id, user, qty_arg, fall_over, origin)
  if closed then
    return closed
  end
  local qty = tonumber(qty_arg)
  if not qty or qty < 1 or qty > limit or qty ~= math.floor(qty) then
    return {-4, limit, ''}
  end

  if held[user] + qty > limit then
    return {-1, held[user], ''}
  end

  if not stock then
    stock = tonumber(redis.call('GET', stock_key) or '0')
  end
  if stock - taken < qty then
    if fall_over == '1' then
      return {3, stock - taken, ''}
    end
    return {0, stock - taken, ''}
  end

  if known[request_id] then
    return {-2, 0, ''}
  end

  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    now_text = string.format('%d', now_ms)
    tail = ',' .. string.sub(cjson.encode({
      campaign = campaign,
      sku = m[3],
      price_cents = tonumber(m[4]),
      price_version = tonumber(m[5]),
      stock_version = tonumber(m[6]),
      reserved_at_ms = now_ms,
      buckets = published,
    }), 2)
  end
  local record = '{"request_id":' .. cjson.encode(request_id) .. ',"user":' .. cjson.encode(user) .. ',"qty":' ..
    (qty == 1 and '1' or string.format('%d', qty)) .. origin .. tail

  taken = taken + qty
  held[user] = held[user] + qty
  known[request_id] = true
  holders[#holders + 1], holders[#holders + 2] = user, held[user]
  records[#records + 1], records[#records + 2] = request_id, record
  scored[#scored + 1], scored[#scored + 2] = now_text, request_id
  return {1, stock - taken, record}
end

-- The global limit rules of one order: r rules, keys from KEYS[k], arguments from ARGV[a].
-- Returns nil when every rule passed (and counted the order), else {-7, rule, ms}.
local function over_limit(r, k, a)
  for i = 0, r - 1 do
    local max, window, into = tonumber(ARGV[a + 3 * i]), tonumber(ARGV[a + 3 * i + 1]), tonumber(ARGV[a + 3 * i + 2])
    local cur = tonumber(redis.call('GET', KEYS[k + 2 * i]) or '0')
    local prev = tonumber(redis.call('GET', KEYS[k + 2 * i + 1]) or '0')
    if prev * (window - into) / window + cur + 1 > max then
      return {-7, i + 1, window - into}
    end
  end
  for i = 0, r - 1 do
    if redis.call('INCR', KEYS[k + 2 * i]) == 1 then
      redis.call('PEXPIRE', KEYS[k + 2 * i], 2 * tonumber(ARGV[a + 3 * i + 1]))
    end
  end
  return nil
end

-- One order: its request id finished already (a call sent again after its undo: nothing), its
-- nonce (when it has one: a resent request or a replay is answered from it), its global limit
-- rules (r rules, keys from KEYS[k], arguments from ARGV[a]), then the reservation.
local function order(request_id, user, qty, ttl, fingerprint, fall_over, nonce_key, r, k, a, origin)
  if finished[request_id] then
    return {-2, 0, ''}
  end
  if not nonce_key then
    return r > 0 and over_limit(r, k, a) or reserve(request_id, user, qty, fall_over, origin)
  end
  local first = redis.call('SET', nonce_key, fingerprint .. ' ' .. request_id, 'NX', 'GET', 'EX', ttl)
  if not first and r > 0 then
    local over = over_limit(r, k, a)
    if over then
      redis.call('DEL', nonce_key)
      return over
    end
  end
  if first then
    local fp, rid, code, n = string.match(first, '^(%S+) (%S+) ?(%S*) ?(%S*)$')
    if fp ~= fingerprint then
      return {-5, 0, ''}
    end
    if code == nil or code == '' then
      -- The buyer is told QUEUED with this id: the reservation must stand. Claimed as 'retry'
      -- (claim.lua's ledger; an existing claim is kept), no undo can take it any more; the
      -- sweeper still produces it.
      if known[rid] or redis.call('HEXISTS', outbox, rid) == 1 then
        redis.call('HSETNX', claims, rid, 'retry')
      end
      return {2, 0, rid}
    end
    return {tonumber(code), tonumber(n), 'again'}
  end
  local out = reserve(request_id, user, qty, fall_over, origin)
  if out[1] == 3 then
    redis.call('DEL', nonce_key)
    return out
  end
  if out[1] ~= 1 then
    redis.call('SET', nonce_key, fingerprint .. ' ' .. request_id .. ' ' .. out[1] .. ' ' .. out[2], 'KEEPTTL')
  end
  return out
end

local answers = {}
for _, o in ipairs(orders) do
  local out = order(o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[9], o[10], o[11])
  local at = #answers
  answers[at + 1], answers[at + 2], answers[at + 3] = out[1], out[2], out[3]
end

-- The call's writes, one command per key (in runs of at most 1,000 arguments, as `hmget`).
local function write(command, key, args)
  for from = 1, #args, 1000 do
    redis.call(command, key, unpack(args, from, math.min(from + 999, #args)))
  end
end
if taken > 0 then
  redis.call('DECRBY', stock_key, taken)
  write('HSET', bought, holders)
  write('HSET', outbox, records)
  write('ZADD', pending, scored)
  if state == 'READY' then
    redis.call('HSET', meta, 'state', 'LIVE')
  end
end
return answers
