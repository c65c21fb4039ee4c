-- room.lua: a buyer's place in a campaign's waiting room, across every gateway process. No process
-- runs in the background: the gateway computes who is served from the time since the start; this
-- script only hands out places, once per buyer.
--
-- The windows are judged by when the request reached its gateway (ARGV[2], the gateway's clock
-- when it read the request's head), not by when the gateway got round to this call: an
-- overloaded gateway calls seconds late, and its buyers are still in the window they came in.
-- The claim is clamped to [TIME - CLAIM_MAX_MS, TIME], Redis's own clock: no gateway (a wrong
-- clock, a bad argument) can claim an arrival in the future, nor one earlier than the longest a
-- gateway keeps a token request before this call (protocol::timing::ARRIVAL_CLAIM_MAX_MS, the
-- same number: a test keeps them equal). Below, "the arrival" is the clamped one.
--
-- Three ways in, by the arrival and what is closed already:
-- - Before the start (the arrival < ARGV[3], and the pre-queue not closed yet), an arrival gets
--   the next pre-queue arrival number ("a<n>"); the gateway turns it into a position 1..size
--   once the pre-queue's size is known, by a keyed shuffle (so arriving at T-0 is worth no more
--   than arriving at T-5 min). The first call whose arrival is at or after the start closes the
--   pre-queue: its size is frozen.
-- - In the start draw, from the start to ARGV[7] (and the draw not closed yet), an arrival gets
--   the next draw arrival number ("d<n>"), shuffled the same way once the draw closes; so does
--   an earlier arrival that finds the pre-queue closed. The draw stays open until every arrival
--   in it can have been seen: the first call at or after ARGV[7] + CLAIM_MAX_MS on Redis's
--   clock closes it (no later call can claim an arrival before ARGV[7]); meanwhile an arrival
--   after ARGV[7] gets the next number after the draw ("q<n>": first come, first served, right
--   after the drawn places). At the close the draw's size M and the late ones' count L are
--   frozen, and its base too, the last position before the drawn ones: the pre-queue's size, or
--   the serving position the gateway sends (ARGV[4]) plus ceil((M + L) * ARGV[8] / ARGV[9]) if
--   that is higher. The drawn places are base + 1 .. base + M (by the shuffle), the late ones
--   base + M + n. Their buyers are asked back from the close, ARGV[9] a second by number (the
--   gateway tells each when); the last is asked back (M + L) / ARGV[9] s after the close, and by
--   then the serving line has moved ARGV[8] a second for that long: so no such place's turn
--   comes before its buyer is asked back, and they are served at the rate, not in a burst with
--   the capacity nobody used while the draw was open.
--   Without a start draw (ARGV[7] = ARGV[3]) nothing waits: the first call whose arrival is at
--   or after the start closes the pre-queue, and positions are first come, first served.
-- - After the draw, positions are given first come, first served ("p<n>", after the drawn ones),
--   never at or below the serving position the gateway sends (ARGV[4]): a buyer arriving at a
--   quiet moment is not admitted in a burst with the capacity nobody used before.
-- A closed pre-queue or draw is never opened again (an arrival in it that comes later than the
-- close goes to the next way in).
--
-- A buyer keeps their place: asking again answers the same one (no re-roll of a shuffled place, no
-- second position from one account), unless ARGV[5] names that very place as this script keeps
-- it (its session is over): then the buyer joins again at the back. A lottery's place stays in
-- its lottery's form ("a<n>", "d<n>", "q<n>") after the draw, so its renewal names it so; its
-- position ("p<n>", as the gateway computes it and a renewed ticket holds it) replaces nothing.
--
-- KEYS[1]  HASH  sk:{c}:room        fields: pre (pre-queue arrivals so far), size (the pre-queue's
--                                    size, once closed), drawn (start draw arrivals so far),
--                                    late (arrivals after the draw's window before its close),
--                                    dbase and dsize (the draw's base and size, once closed),
--                                    next (the last position given)
-- KEYS[2]  HASH  sk:{c}:room:users  user -> "a<n>", "d<n>", "q<n>" or "p<n>"
-- ARGV[1]  the user
-- ARGV[2]  the request's arrival, unix ms (the gateway's clock when it read the request's head;
--          clamped as above; not a number: TIME - CLAIM_MAX_MS)
-- ARGV[3]  the campaign's start, unix ms
-- ARGV[4]  the serving position now (positions up to it are admitted or were)
-- ARGV[5]  a place to replace, as KEYS[2] keeps it ("a<n>", "d<n>", "q<n>" or "p<n>": the buyer's
--          session there is over), or ""
-- ARGV[6]  unix ms at which both keys expire (the campaign's end plus a ticket's life)
-- ARGV[7]  the start draw's end, unix ms (the start plus start_draw_ms)
-- ARGV[8]  the room's admit_per_sec
-- ARGV[9]  the room's draw_return_per_sec (drawn buyers asked back a second)
-- Returns {place, size, issued, dbase, dsize}: the buyer's place, the pre-queue's size once closed
-- (-1 while open), the places given so far (the last position given once the draw is closed,
-- else the pre-queue's size plus the draw's and the late arrivals, else the pre-queue's
-- arrivals: the queue's length is issued minus the serving position), and the draw's base and
-- size once closed (-1 while open).

local CLAIM_MAX_MS = 4000

local user, start, draw_end = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[7])
local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local claimed = tonumber(ARGV[2])
if claimed == nil or claimed ~= claimed then
  claimed = 0
end
local arrived = math.max(math.min(claimed, clock), clock - CLAIM_MAX_MS)
local place = redis.call('HGET', KEYS[2], user)
local size = redis.call('HGET', KEYS[1], 'size')
local dbase = redis.call('HGET', KEYS[1], 'dbase')
local wrote = false

if arrived >= start and not size then
  size = tonumber(redis.call('HGET', KEYS[1], 'pre') or '0')
  redis.call('HSET', KEYS[1], 'size', size, 'next', size)
  wrote = true
end
local closes
if draw_end > start then
  closes = clock - CLAIM_MAX_MS >= draw_end
else
  closes = arrived >= draw_end
end
if closes and not dbase then
  local last = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
  local m = tonumber(redis.call('HGET', KEYS[1], 'drawn') or '0')
  local l = tonumber(redis.call('HGET', KEYS[1], 'late') or '0')
  local told = math.ceil((m + l) * tonumber(ARGV[8]) / math.max(1, tonumber(ARGV[9])))
  dbase = math.max(last, tonumber(ARGV[4]) + told)
  redis.call('HSET', KEYS[1], 'dbase', dbase, 'dsize', m, 'next', dbase + m + l)
  wrote = true
end

if (not place) or place == ARGV[5] then
  if not size then
    place = 'a' .. redis.call('HINCRBY', KEYS[1], 'pre', 1)
  elseif not dbase and arrived < draw_end then
    place = 'd' .. redis.call('HINCRBY', KEYS[1], 'drawn', 1)
  elseif not dbase then
    place = 'q' .. redis.call('HINCRBY', KEYS[1], 'late', 1)
  else
    local p = redis.call('HINCRBY', KEYS[1], 'next', 1)
    local floor = tonumber(ARGV[4])
    if p <= floor then
      p = floor + 1
      redis.call('HSET', KEYS[1], 'next', p)
    end
    place = 'p' .. p
  end
  redis.call('HSET', KEYS[2], user, place)
  wrote = true
end
if wrote then
  redis.call('PEXPIREAT', KEYS[1], ARGV[6])
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('PEXPIREAT', KEYS[2], ARGV[6])
  end
end

local issued
if dbase then
  issued = tonumber(redis.call('HGET', KEYS[1], 'next'))
elseif size then
  issued = tonumber(size) + tonumber(redis.call('HGET', KEYS[1], 'drawn') or '0')
    + tonumber(redis.call('HGET', KEYS[1], 'late') or '0')
else
  issued = tonumber(redis.call('HGET', KEYS[1], 'pre') or '0')
end
local dsize = dbase and redis.call('HGET', KEYS[1], 'dsize') or '-1'
return {place, tonumber(size or '-1'), issued, tonumber(dbase or '-1'), tonumber(dsize)}
