-- admit.lua: counts a first admission of a campaign's waiting room in the current second, across
-- every gateway process, and says whether a late one goes through. A gateway that stalled and
-- then answers the pile of presentations it owes finds their turns passed; admitting them all at
-- once would send the sale more than admit_per_sec in that second, and N gateways that stall
-- together N times that. So a late first admission (a backlog's) goes through only while this
-- second's first admissions, on time or late, on every gateway, are under admit_per_sec; an on-time
-- one always does (the schedule already paces those) and is counted.
--
-- The gateway numbers the second from its own clock so that the key can be named in KEYS
-- (Cluster-safe: it carries the campaign's hash tag).
--
-- KEYS[1]  STRING  sk:{c}:admitted:<second>  first admissions in this second (expires after 3 s)
-- ARGV[1]  late           "1": a backlog's admission (past its promise by a second or more); "0": on time
-- ARGV[2]  admit_per_sec  the campaign's rate (a positive integer)
-- Returns 1 when admitted (counted), 0 when a late one must wait for the next second (not counted).

local admitted = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[1] == '1' and admitted >= tonumber(ARGV[2]) then
  return 0
end
if redis.call('INCR', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], 3000)
end
return 1
