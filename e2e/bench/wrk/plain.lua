-- A plain POST; prints P50_US and P99_US at the end.
function request() return wrk.format("POST", nil, nil, nil) end
function done(summary, latency, requests)
  io.write(string.format("P50_US %d\nP99_US %d\n", latency:percentile(50), latency:percentile(99)))
end
