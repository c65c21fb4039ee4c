-- The oracle of e2e/crowd/tests/script_oracle.rs: lua/reserve.lua as it was before its writes were made once
-- per call (one command per key) instead of once per order. Kept unchanged below this note.
--
-- reserve.lua: atomic reservations of one campaign bucket, one or many orders per call. For
-- each order, in the order sent: the campaign's global limits (when the order carries them,
-- counted here rather than in a call of their own), the nonce, dedupe (per-user limit), stock
-- check, decrement, and an outbox record. Never lets stock go below zero. Each order is decided exactly as if it were sent in a
-- call of its own, after the orders before it; one order's refusal (bad quantity, replay, limit)
-- never changes its neighbours' answers. Batching only saves the per-call cost (one round trip,
-- one script run, one read of meta and of TIME for the whole batch).
--
-- KEYS (all share the bucket's hash tag, see protocol/src/keys.rs):
--   1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
--   9.. per order, in the orders' order: its nonce key when it has one (see "Nonce" below), then
--       2 keys per global limit rule it carries (see "Global limits" below): the rule's counter
--       of the current window, then that of the previous window
--   (6 is only read, 7 not touched here, 8 only by a safe retry; every script takes the same
--   eight keys first)
--
-- Writes, each paid for on every reservation (Redis CPU per call, INFO commandstats, same run:
-- 22.8 us with all of them; without the pending ZADD 18.7 us):
--   stock DECRBY, bought HINCRBY  the sale itself (stock and the per-user limit)
--   outbox HSET                   the promise behind a QUEUED answer (the record)
--   pending ZADD                  the sweeper's index by age: without it every sweep pass would
--                                 scan the whole outbox
-- No counters: reconciliation derives what was reserved from `bought` (Σ bought = reserved -
-- released + re-taken); two stats HINCRBYs cost 2.4 us a call (about 10%).
-- ARGV:
--   1 campaign id
--   2 the caller's bucket count (its campaign file's `buckets`, 1 without buckets): it must be
--     meta `buckets` (absent: 1), or the caller's home buckets are not the published ones and
--     its records would be acked, released and swept in the wrong bucket (-6).
--   then per order, 7 values and 3 per global limit rule it carries (since the audit's origin,
--   an 8th value after r, skipped here: the oracle's orders carry none, see lua/reserve.lua):
--     request id, user id, quantity,
--     nonce TTL in seconds ("": the order has no nonce and no key among KEYS[9..]),
--     request fingerprint (with a nonce only, no spaces),
--     fall over: "1": a bucket of a campaign with buckets, and other buckets may still give
--       stock to this one (lua/transfer.lua): a short stock answers 3 instead of 0 and the
--       nonce is forgotten, so that the same request may come again once stock moved here.
--       "": the last word.
--     the number of global limit rules r ("" or "0": none), then r times:
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
-- Global limits (a campaign's [[global_limit]] rules, counted across every gateway): checked
-- for each order that carries them right after its nonce (a safe retry or a replay, answered
-- from the nonce, counts in no rule; a fresh nonce is taken back when a rule refuses the order),
-- in arrival order within the call. Each rule is a sliding window over two fixed-window counters: the estimate is the
-- current window's count plus the previous window's count weighted by the share of it the
-- sliding window still covers (prev * (window - into) / window + cur). The order goes on when
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

local function reserve(request_id, user, qty_arg, fall_over)
  if (state ~= 'READY' and state ~= 'LIVE') or not limit then
    return {-3, 0, ''}
  end
  if tonumber(ARGV[2]) ~= published then
    return {-6, published, ''}
  end
  local qty = tonumber(qty_arg)
  if not qty or qty < 1 or qty > limit or qty ~= math.floor(qty) then
    return {-4, limit, ''}
  end

  local held = tonumber(redis.call('HGET', bought, user) or '0')
  if held + qty > limit then
    return {-1, held, ''}
  end

  local stock = tonumber(redis.call('GET', stock_key) or '0')
  if stock < qty then
    if fall_over == '1' then
      return {3, stock, ''}
    end
    return {0, stock, ''}
  end

  if redis.call('HEXISTS', outbox, request_id) == 1 then
    return {-2, 0, ''}
  end

  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local record = cjson.encode({
    request_id = request_id,
    campaign = campaign,
    user = user,
    sku = m[3],
    qty = qty,
    price_cents = tonumber(m[4]),
    price_version = tonumber(m[5]),
    stock_version = tonumber(m[6]),
    reserved_at_ms = now_ms,
    buckets = published,
  })

  local remaining = redis.call('DECRBY', stock_key, qty)
  redis.call('HINCRBY', bought, user, qty)
  redis.call('HSET', outbox, request_id, record)
  redis.call('ZADD', pending, now_ms, request_id)
  if state == 'READY' then
    redis.call('HSET', meta, 'state', 'LIVE')
    state = 'LIVE'
  end
  return {1, remaining, record}
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

-- One order: finished already (in the released ledger: nothing), its nonce (when it has one),
-- its global limit rules, then the reservation.
local function order(request_id, user, qty, ttl, fingerprint, fall_over, nonce_key, r, k, a)
  if redis.call('HEXISTS', released, request_id) == 1 then
    return {-2, 0, ''}
  end
  if not nonce_key then
    return r > 0 and over_limit(r, k, a) or reserve(request_id, user, qty, fall_over)
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
      if redis.call('HEXISTS', outbox, rid) == 1 then
        redis.call('HSETNX', claims, rid, 'retry')
      end
      return {2, 0, rid}
    end
    return {tonumber(code), tonumber(n), 'again'}
  end
  local out = reserve(request_id, user, qty, fall_over)
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
local k = 9 -- the next order's first key
local i = 3 -- the next order's first argument
while i + 6 <= #ARGV do
  local nonce_key
  if ARGV[i + 3] ~= '' then
    nonce_key = KEYS[k]
    k = k + 1
  end
  local r = tonumber(ARGV[i + 6]) or 0
  local out = order(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], nonce_key, r, k, i + 8)
  k = k + 2 * r
  i = i + 8 + 3 * r
  local at = #answers
  answers[at + 1], answers[at + 2], answers[at + 3] = out[1], out[2], out[3]
end
return answers
