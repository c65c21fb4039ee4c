-- limit.lua: a campaign's global limits for one request, across every gateway process. Each rule
-- is a sliding window over two fixed-window counters: the estimate is the current window's count
-- plus the previous window's count weighted by the share of it the sliding window still covers
-- (prev * (window - into) / window + cur). A request passes when every rule's estimate stays
-- within its max; then, and only then, each rule's current counter counts it. A refused request
-- counts nowhere, so a client that keeps trying is not locked out for longer than the window.
--
-- The gateway numbers the windows from its own clock (window number = now / window), so that the
-- keys can be named in KEYS (Cluster-safe: every key carries the campaign's hash tag); gateways'
-- clocks disagreeing by a few ms shift a window's edge by as much, nothing else.
--
-- KEYS: per rule i (1..n), in the order of the campaign's [[global_limit]] rules:
--   2i-1  STRING counter of the current window   (sk:{c}:limit:<by>:<value>:<window number>)
--   2i    STRING counter of the previous window
-- ARGV: per rule i: 3i-2 max, 3i-1 window in ms, 3i ms into the current window
-- Returns {rule, retry_after_ms}:
--   {0, 0}   passed: every rule's current counter incremented (expiring after two windows)
--   {i, ms}  rule i is over its max: nothing counted; ms until its current window ends

local n = #KEYS / 2
for i = 1, n do
  local max, window, into = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  local cur = tonumber(redis.call('GET', KEYS[2 * i - 1]) or '0')
  local prev = tonumber(redis.call('GET', KEYS[2 * i]) or '0')
  local estimate = prev * (window - into) / window + cur
  if estimate + 1 > max then
    return {i, window - into}
  end
end
for i = 1, n do
  if redis.call('INCR', KEYS[2 * i - 1]) == 1 then
    redis.call('PEXPIRE', KEYS[2 * i - 1], 2 * tonumber(ARGV[3 * i - 1]))
  end
end
return {0, 0}
