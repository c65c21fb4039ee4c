-- claim.lua: the producers of last resort claim outbox entries, so that they and the gateway's
-- undo (release.lua "undo") exclude each other: an entry is either undone before any claim (then
-- nothing produces it again) or claimed before the undo (then the undo leaves it, and it becomes
-- an order). A safe retry answered QUEUED claims an entry too (reserve.lua, claims[id] =
-- "retry"): the sweeper treats it as unclaimed (it produces it, and marks it "sweep"). Ages are
-- measured with Redis' own clock (TIME) against the times Redis wrote, never
-- against a caller's clock.
--
-- KEYS: 1 meta  2 stock  3 bought  4 outbox  5 pending  6 released  7 stats  8 claims
-- ARGV[1] = "sweep", 2 age ms, 3 most entries:
--   For the sweeper: every entry reserved, or last claimed, more than `age` ms ago is claimed
--   (`claims[id] = sweep`, pending score = now, so it is not produced again before another
--   `age`). Entries under repair are skipped; pending ids without an outbox record are dropped.
--   Returns the claimed records (outbox JSON strings), oldest first.
-- ARGV[1] = "repair", 2 request id:
--   For reconciliation: claims one entry (`claims[id] = repair`) and takes it out of the pending
--   set, so the sweeper no longer produces it while the repair decides.
--   Returns {code, reserved_at_ms, now_ms}: 1 claimed, 0 not in the outbox (0, now_ms).
-- ARGV[1] = "unrepair", 2 request id:
--   A repair that decided not to act gives the entry back to the sweeper (claim `sweep`, pending
--   score = now). Returns 1, or 0 when the entry is no longer in the outbox.

local outbox, pending, claims = KEYS[4], KEYS[5], KEYS[8]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[1]

if mode == 'sweep' then
  local cutoff = now_ms - tonumber(ARGV[2])
  local ids = redis.call('ZRANGEBYSCORE', pending, '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[3]))
  local out = {}
  for _, id in ipairs(ids) do
    local record = redis.call('HGET', outbox, id)
    if not record then
      redis.call('ZREM', pending, id)
    elseif redis.call('HGET', claims, id) ~= 'repair' then
      redis.call('HSET', claims, id, 'sweep')
      redis.call('ZADD', pending, now_ms, id)
      out[#out + 1] = record
    end
  end
  return out
end

local id = ARGV[2]
local record = redis.call('HGET', outbox, id)
if mode == 'repair' then
  if not record then
    return {0, 0, now_ms}
  end
  redis.call('HSET', claims, id, 'repair')
  redis.call('ZREM', pending, id)
  local ok, r = pcall(cjson.decode, record)
  local at = (ok and tonumber(r.reserved_at_ms)) or 0
  return {1, at, now_ms}
end
if mode == 'unrepair' then
  if not record then
    return 0
  end
  redis.call('HSET', claims, id, 'sweep')
  redis.call('ZADD', pending, now_ms, id)
  return 1
end
return redis.error_reply('claim.lua: unknown mode ' .. tostring(mode))
