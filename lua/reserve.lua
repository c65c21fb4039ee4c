-- reserve.lua: one atomic reservation. Dedupe (per-user limit), stock check, decrement, and an
-- outbox record, in a single round trip. Never lets stock go below zero.
--
-- KEYS (all share the campaign's hash tag, see protocol/src/keys.rs):
--   1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
--   9 nonce (optional, see "Nonce" below)
--   (6 and 7 are not touched here, 8 only by a safe retry; every script takes the same eight
--   keys first)
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
--   1 campaign id  2 request id  3 user id  4 quantity
--   5 nonce TTL in seconds  6 request fingerprint (with KEYS[9] only; "" without)
--   7 "1": a bucket of a campaign with buckets, and other buckets may still give stock to this
--     one (lua/transfer.lua): a short stock answers 3 instead of 0 and the nonce is forgotten,
--     so that the same request may come again once stock moved here. "" or absent: the last word.
--   8 the caller's bucket count (its campaign file's `buckets`, 1 without buckets): it must be
--     meta `buckets` (absent: 1), or the caller's home buckets are not the published ones and
--     its records would be acked, released and swept in the wrong bucket (-6).
-- Meta `buckets` (written by publish.lua on a campaign with buckets) goes into the record, so
-- that whoever reads it finds the buyer's home bucket (protocol::keys::Bucket::of_user).
-- Returns {code, remaining, record}:
--    1  reserved: remaining stock after the decrement, record = the outbox JSON
--    0  sold out: remaining (0, or less than the quantity asked for)
--   -1  limit reached: the quantity this user already holds
--   -2  duplicate request id: 0
--   -3  campaign not published (or not READY/LIVE): 0
--   -4  bad quantity (below 1 or above the per-user limit): the limit
--   -5  replay: the nonce was used by another request (another fingerprint): 0
--   -6  the caller's bucket count (ARGV[8]) is not the published one: the published count
--    2  safe retry of a reserved request: 0, record = that request's id
--    3  this bucket is short (ARGV[7] = "1" only): remaining; nothing written, nonce forgotten
--   A refusal answered again from the nonce (below) comes as {code, n, "again"}: the first
--   answer, not a fact of now (stock may have come back since), so nobody acts on it but the
--   buyer (the gateway never sets its sold-out flag from it).
--
-- Nonce (KEYS[9]): one SET NX with a TTL (>= the timestamp window) before anything else,
-- holding "<fingerprint> <request id>". Taken already: another fingerprint is a replay (-5);
-- the same fingerprint is the same signed request sent again (a client whose connection
-- dropped): it gets the first answer, QUEUED with the first request id (2), or the first
-- refusal again (marked "again"), which the script appends to the value (" <code> <n>", TTL
-- kept). A safe retry answered QUEUED claims the first request's outbox entry (claims[id] =
-- "retry", unless already claimed): the first call's answer may be late, and its gateway's undo
-- (release.lua "undo"), running after this retry, must leave a reservation the buyer was told
-- is QUEUED. Nothing else is read or written for a retry or a replay.

local function reserve()
local meta, stock_key, bought, outbox, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local campaign, request_id, user = ARGV[1], ARGV[2], ARGV[3]
local qty = tonumber(ARGV[4])

local m = redis.call('HMGET', meta, 'state', 'limit', 'sku', 'price_cents', 'price_version', 'stock_version',
  'buckets')
local state, limit = m[1], tonumber(m[2])
if (state ~= 'READY' and state ~= 'LIVE') or not limit then
  return {-3, 0, ''}
end
local published = tonumber(m[7]) or 1
if tonumber(ARGV[8]) ~= published then
  return {-6, published, ''}
end
if not qty or qty < 1 or qty > limit or qty ~= math.floor(qty) then
  return {-4, limit, ''}
end

local held = tonumber(redis.call('HGET', bought, user) or '0')
if held + qty > limit then
  return {-1, held, ''}
end

local stock = tonumber(redis.call('GET', stock_key) or '0')
if stock < qty then
  if ARGV[7] == '1' then
    return {3, stock, ''}
  end
  return {0, stock, ''}
end

if redis.call('HEXISTS', outbox, request_id) == 1 then
  return {-2, 0, ''}
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
end
return {1, remaining, record}
end

-- Nonce block (KEYS[9], ARGV[5], ARGV[6]); without KEYS[9] the script only reserves.
local nonce_key = KEYS[9]
if not nonce_key then
  return reserve()
end
local fingerprint = ARGV[6]
local first = redis.call('SET', nonce_key, fingerprint .. ' ' .. ARGV[2], 'NX', 'GET', 'EX', ARGV[5])
if first then
  local fp, rid, code, n = string.match(first, '^(%S+) (%S+) ?(%S*) ?(%S*)$')
  if fp ~= fingerprint then
    return {-5, 0, ''}
  end
  if code == nil or code == '' then
    -- The buyer is told QUEUED with this id: the reservation must stand. Claimed as 'retry'
    -- (claim.lua's ledger; an existing claim is kept), no undo can take it any more; the
    -- sweeper still produces it.
    if redis.call('HEXISTS', KEYS[4], rid) == 1 then
      redis.call('HSETNX', KEYS[8], rid, 'retry')
    end
    return {2, 0, rid}
  end
  return {tonumber(code), tonumber(n), 'again'}
end
local out = reserve()
if out[1] == 3 then
  redis.call('DEL', nonce_key)
  return out
end
if out[1] ~= 1 then
  redis.call('SET', nonce_key, fingerprint .. ' ' .. ARGV[2] .. ' ' .. out[1] .. ' ' .. out[2], 'KEEPTTL')
end
return out
