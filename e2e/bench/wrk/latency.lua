-- A POST as one user (bench/observe.sh); prints P50_US and P99_US at the end.
wrk.method = "POST"
wrk.headers["x-user-id"] = "bench-user"
function done(summary, latency, requests)
  io.write(string.format("P50_US %d\nP99_US %d\n", latency:percentile(50), latency:percentile(99)))
end
