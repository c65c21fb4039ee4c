-- room.lua: a buyer's place in a campaign's waiting room, across every gateway process. No process
-- runs in the background: the gateway computes who is served from the time since the start; this
-- script only hands out places, once per buyer.
--
-- Before the start (ARGV[2] < ARGV[3], and the pre-queue not closed yet), an arrival gets the next
-- pre-queue arrival number ("a<n>"); the gateway turns it into a position once the pre-queue's size
-- is known, by a keyed shuffle (so arriving at T-0 is worth no more than arriving at T-5 min). The
-- first call at or after the start closes the pre-queue: its size is frozen, and positions after
-- it are given first come, first served ("p<n>", from size + 1 on), never at or below the serving
-- position the gateway sends (ARGV[4]): a buyer arriving at a quiet moment is not admitted in a
-- burst with the capacity nobody used before.
--
-- A buyer keeps their place: asking again answers the same one (no re-roll of a shuffled place, no
-- second position from one account), unless ARGV[5] names that very place (its session is over):
-- then the buyer joins again at the back.
--
-- KEYS[1]  HASH  sk:{c}:room        fields: pre (pre-queue arrivals so far), size (the pre-queue's
--                                    size, once closed), next (the last position given)
-- KEYS[2]  HASH  sk:{c}:room:users  user -> "a<n>" or "p<n>"
-- ARGV[1]  the user
-- ARGV[2]  now, unix ms (the gateway's clock)
-- ARGV[3]  the campaign's start, unix ms
-- ARGV[4]  the serving position now (positions up to it are admitted or were)
-- ARGV[5]  a place to replace ("p<n>": the buyer's session there is over), or ""
-- ARGV[6]  unix ms at which both keys expire (the campaign's end plus a ticket's life)
-- Returns {place, size, issued}: the buyer's place, the pre-queue's size once closed (-1 while
-- open), and the places given so far (the last position given once closed, else the pre-queue's
-- arrivals): the queue's length is issued minus the serving position.

local user, now, start = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local place = redis.call('HGET', KEYS[2], user)
local size = redis.call('HGET', KEYS[1], 'size')

local function close()
  local n = tonumber(redis.call('HGET', KEYS[1], 'pre') or '0')
  redis.call('HSET', KEYS[1], 'size', n, 'next', n)
  return tostring(n)
end

if (not place) or place == ARGV[5] then
  if now < start and not size then
    place = 'a' .. redis.call('HINCRBY', KEYS[1], 'pre', 1)
  else
    if not size then
      size = close()
    end
    local p = redis.call('HINCRBY', KEYS[1], 'next', 1)
    local floor = tonumber(ARGV[4])
    if p <= floor then
      p = floor + 1
      redis.call('HSET', KEYS[1], 'next', p)
    end
    place = 'p' .. p
  end
  redis.call('HSET', KEYS[2], user, place)
  redis.call('PEXPIREAT', KEYS[1], ARGV[6])
  redis.call('PEXPIREAT', KEYS[2], ARGV[6])
elseif now >= start and not size then
  size = close()
end

local issued = size and redis.call('HGET', KEYS[1], 'next') or redis.call('HGET', KEYS[1], 'pre')
return {place, tonumber(size or '-1'), tonumber(issued or '0')}
