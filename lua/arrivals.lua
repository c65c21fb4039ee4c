-- arrivals.lua: counts one arrival (a token request) of a campaign in the current second, across
-- every gateway process, and answers the arrivals of this second and of the one before. The
-- gateway's proof of work asks more bits when the crowd grows ([[pow_level]]).
--
-- The gateway numbers the seconds from its own clock so that both keys can be named in KEYS
-- (Cluster-safe: both carry the campaign's hash tag).
--
-- KEYS[1]  STRING  sk:{c}:arrivals:<second>      the counter of this second (expires after 3 s)
-- KEYS[2]  STRING  sk:{c}:arrivals:<second - 1>  the counter of the second before
-- ARGV     none
-- Returns {this second's count, the previous second's count}.

local now = redis.call('INCR', KEYS[1])
if now == 1 then
  redis.call('PEXPIRE', KEYS[1], 3000)
end
return {now, tonumber(redis.call('GET', KEYS[2]) or '0')}
