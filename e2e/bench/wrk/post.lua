-- A plain POST; prints P50_US, P99_US and ERRORS at the end (bench/proxy.sh).
function request() return wrk.format("POST", nil, nil, nil) end
function done(summary, latency, requests)
  io.write(string.format("P50_US %d\nP99_US %d\nERRORS %d\n", latency:percentile(50), latency:percentile(99),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
