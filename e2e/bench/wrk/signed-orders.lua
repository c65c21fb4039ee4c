-- presign's signed orders replayed (one line per order, tab-separated, e2e/bench/src/bin/presign.rs).
-- Its arguments after `--`: "good" or "bad" (bad forges each signature), wrk's thread count,
-- the orders file; each wrk thread sends its own share, round robin. Prints P50_US and P99_US.
local id, reqs, i = 0, {}, 0
function setup(thread) id = id + 1; thread:set("tid", id) end
function init(args)
  local bad, threads, k = args[1] == "bad", tonumber(args[2]), 0
  for line in io.lines(args[3]) do
    k = k + 1
    if k % threads == tid - 1 then
      local path, auth, dev, ts, nonce, sig = line:match("^(.-)\t(.-)\t(.-)\t(.-)\t(.-)\t(.-)$")
      if bad then sig = (sig:sub(1, 1) == "0" and "1" or "0") .. sig:sub(2) end
      reqs[#reqs + 1] = wrk.format("POST", path, { ["Authorization"] = auth, ["X-Device-Id"] = dev,
        ["X-Timestamp"] = ts, ["X-Nonce"] = nonce, ["X-Signature"] = sig }, nil)
    end
  end
end
function request() i = i + 1; return reqs[(i - 1) % #reqs + 1] end
function done(summary, latency, requests)
  io.write(string.format("P50_US %d\nP99_US %d\n", latency:percentile(50), latency:percentile(99)))
end
