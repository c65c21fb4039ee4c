-- admit.lua: counts a first admission of a campaign's waiting room in the current second, across
-- every gateway process, once per place, and says whether a late one goes through. A gateway that
-- stalled and then answers the pile of presentations it owes finds their turns passed; admitting
-- them all at once would send the sale more than admit_per_sec in that second, and N gateways that
-- stall together N times that. So a late first admission (a backlog's) goes through only while this
-- second's first admissions, on time or late, on every gateway, are under admit_per_sec; an on-time
-- one always does (the schedule already paces those) and is counted.
--
-- Once per place: the buyer's admitted place is kept (KEYS[2], user -> place). The same place
-- admitted again (its waiting ticket presented once more, on this gateway or another, or the buyer
-- asking without a ticket) goes through and is not counted again; so re-presenting a ticket cannot
-- fill a second's count and hold others back, and leaving the ticket off goes around nothing (the
-- gateway asks here for a request without a ticket too, with the place room.lua gave it).
--
-- The gateway numbers the second from its own clock so that the key can be named in KEYS
-- (Cluster-safe: both keys carry the campaign's hash tag).
--
-- KEYS[1]  STRING  sk:{c}:admitted:<second>  first admissions in this second (expires after 3 s)
-- KEYS[2]  HASH    sk:{c}:room:admitted      user -> the place admitted (`p<n>`)
-- ARGV[1]  late           "1": a backlog's admission (past its promise by a second or more); "0": on time
-- ARGV[2]  admit_per_sec  the campaign's rate (a positive integer)
-- ARGV[3]  user
-- ARGV[4]  place          as room.lua stores it (`p<n>`)
-- ARGV[5]  expire_at_ms   when KEYS[2] may go (the campaign's end plus a ticket's life; PEXPIREAT)
-- Returns 1 when admitted (counted), 2 when this place was admitted before (admitted again, not
-- counted), 0 when a late one must wait for the next second (not counted).

if redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[4] then
  return 2
end
local admitted = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[1] == '1' and admitted >= tonumber(ARGV[2]) then
  return 0
end
if redis.call('INCR', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], 3000)
end
if redis.call('HSET', KEYS[2], ARGV[3], ARGV[4]) == 1 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[5])
end
return 1
