#!/usr/bin/env bash
# What the access log and the metrics cost on the sold-out path, in one run: four gateways of
# the same release build, the same sold-out campaign (local flag, no Redis call), the same wrk
# load, one after the other and again in a second round (ABCD ABCD), so drift of the shared
# machine falls on every variant alike:
#
#   off      no [admin], no [access_log]           (the logging phase returns at once)
#   metrics  [admin] on                            (counters and histograms per request)
#   log      [access_log] to a file, combined lines (the default; one line formatted and queued per request)
#   both     [admin] and [access_log]
#
# For each: requests/s, p50/p99, and the gateway's CPU time per request (user + system, from
# /proc, the writer thread of the access log included); then each variant against `off`. The
# access log's own counters (written, dropped) are read from /metrics of `both`, so a figure
# bought by dropping lines would show.
#
# Usage: e2e/bench/observe.sh          Env: DURATION (10s), THREADS (2), CONNECTIONS (100),
#                                           ROUNDS (2), SECKILL_REDIS_URL (the stack's Redis)
# Needs: the stack's Redis (e2e/stack.sh up), wrk, redis-cli, curl, python3.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
if [[ -z "${SECKILL_REDIS_URL:-}" && -f .stack/env ]]; then
  # shellcheck disable=SC1091
  source .stack/env
fi
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-100}
ROUNDS=${ROUNDS:-2}

# shellcheck source=e2e/lib.sh
source e2e/lib.sh
need_packages wrk:wrk curl:curl
for tool in wrk redis-cli curl python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (apt-get install wrk redis-tools curl)" >&2; exit 1; }
done
bench_redis
build_all release
# The edge's keys for this run (each gateway's [defense]); the login key also signs the one
# buyer's login JWT that sets the sold-out flag.
edge_keys obs

WORK=$(mktemp -d -t gw-observe.XXXXXX)
RUN=$(date +%s)$$
SOLD="bench-obs-$RUN"
VARIANTS=(off metrics log both)
declare -A PID PORT ADMIN
cleanup() {
  for v in "${VARIANTS[@]}"; do
    [[ -n "${PID[$v]:-}" ]] && kill "${PID[$v]}" 2>/dev/null && wait "${PID[$v]}" 2>/dev/null || true
  done
  # shellcheck disable=SC2046
  "${RCLI[@]}" del $(campaign_keys "$SOLD") >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# The campaign, published with no stock (lua/publish.lua, as the order writer does): the first
# order sets each gateway's sold-out flag, every later one is answered by the flag.
# shellcheck disable=SC2046
"${RCLI[@]}" --eval lua/publish.lua $(campaign_keys "$SOLD") , 1 0 1 SKU-BENCH 100 1 >/dev/null
mkdir -p "$WORK/campaigns"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/key"
bench_campaign "$WORK/campaigns/$SOLD.toml" "$SOLD" 0 0

# One server file per variant; Kafka and the order writer are closed ports (never used here).
for v in "${VARIANTS[@]}"; do
  PORT[$v]=$(free_port)
  ADMIN[$v]=$(free_port)
  {
    cat <<SERVER
[server]
listen = "127.0.0.1:${PORT[$v]}"
workers = $THREADS
[sale]
signing_key = "file:key"
campaigns_dir = "campaigns"
sold_out_ttl_ms = 60000
[redis]
url = "$REDIS_URL"
[order_writer]
upstreams = ["127.0.0.1:$(free_port)"]
health_check_interval_ms = 60000
[kafka]
brokers = ["127.0.0.1:$(free_port)"]
$(defense_table)
SERVER
    if [[ $v == metrics || $v == both ]]; then printf '[admin]\nlisten = "127.0.0.1:%s"\n' "${ADMIN[$v]}"; fi
    if [[ $v == log || $v == both ]]; then printf '[access_log]\noutput = "access-%s.log"\n' "$v"; fi
  } >"$WORK/$v.toml"
  RUST_LOG=warn target/release/gateway --conf "$WORK/$v.toml" --lua-dir lua >"$WORK/$v.log" 2>&1 &
  PID[$v]=$!
done
for v in "${VARIANTS[@]}"; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${PORT[$v]}/" && break; sleep 0.1; done
done

HZ=$(getconf CLK_TCK)
declare -A REQS TICKS RPS_SUM P50_SUM P99_SUM
for v in "${VARIANTS[@]}"; do REQS[$v]=0; TICKS[$v]=0; RPS_SUM[$v]=0; P50_SUM[$v]=0; P99_SUM[$v]=0; done
cat >"$WORK/latency.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["x-user-id"] = "bench-user"
function done(summary, latency, requests)
  io.write(string.format("P50_US %d\nP99_US %d\n", latency:percentile(50), latency:percentile(99)))
end
LUA

echo "observe bench: sold-out path, wrk -t$THREADS -c$CONNECTIONS -d$DURATION, gateway threads=$THREADS, $ROUNDS rounds of ${VARIANTS[*]}"
for round in $(seq "$ROUNDS"); do
  for v in "${VARIANTS[@]}"; do
    url="http://127.0.0.1:${PORT[$v]}/seckill/$SOLD/order"
    # Sets (or renews) the flag; every request of the run is then answered without Redis.
    sold_out_flag "http://127.0.0.1:${PORT[$v]}" "$SOLD" "$WORK/sold.tsv" || exit 1
    before=$(cpu_ticks "${PID[$v]}")
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s "$WORK/latency.lua" "$url" >"$WORK/$v-$round.out" 2>&1
    after=$(cpu_ticks "${PID[$v]}")
    n=$(awk '/requests in/ {print $1}' "$WORK/$v-$round.out")
    REQS[$v]=$((REQS[$v] + n))
    TICKS[$v]=$((TICKS[$v] + after - before))
    RPS_SUM[$v]=$(python3 -c "print(${RPS_SUM[$v]} + $(awk '/^Requests\/sec:/ {print $2}' "$WORK/$v-$round.out"))")
    P50_SUM[$v]=$((P50_SUM[$v] + $(awk '/^P50_US/ {print $2}' "$WORK/$v-$round.out")))
    P99_SUM[$v]=$((P99_SUM[$v] + $(awk '/^P99_US/ {print $2}' "$WORK/$v-$round.out")))
    non410=$(awk '/Non-2xx/ {print $NF}' "$WORK/$v-$round.out")
    echo "  round $round $v: $n requests (non-2xx, all should be 410: ${non410:-0})"
  done
done

printf '\n%-10s %12s %8s %8s %14s %12s %12s\n' variant "requests/s" "p50 ms" "p99 ms" "CPU us/req" "CPU vs off" "req/s vs off"
for v in "${VARIANTS[@]}"; do
  python3 - "$v" "${RPS_SUM[$v]}" "${P50_SUM[$v]}" "${P99_SUM[$v]}" "${TICKS[$v]}" "${REQS[$v]}" \
    "${RPS_SUM[off]}" "${TICKS[off]}" "${REQS[off]}" "$HZ" "$ROUNDS" <<'PY'
import sys
v, rps, p50, p99, t, n, rps0, t0, n0, hz, rounds = sys.argv[1:]
rounds = int(rounds); hz = int(hz)
cpu = int(t) * 1e6 / hz / max(1, int(n))
cpu0 = int(t0) * 1e6 / hz / max(1, int(n0))
print(f"{v:<10} {float(rps)/rounds:12.0f} {int(p50)/rounds/1000:8.2f} {int(p99)/rounds/1000:8.2f} "
      f"{cpu:14.2f} {cpu/cpu0:12.3f} {float(rps)/float(rps0):12.3f}")
PY
done
m=$(curl -s "http://127.0.0.1:${ADMIN[both]}/metrics")
written=$(awk '/^seckill_gateway_access_log_lines_total / {print $2}' <<<"$m")
dropped=$(awk '/^seckill_gateway_access_log_dropped_total / {print $2}' <<<"$m")
lines=$(wc -l <"$WORK/access-both.log")
echo
echo "access log of 'both': $written lines written, $dropped dropped (queue full), $lines lines in the file; requests sent: ${REQS[both]} (+ warm-ups and the start probes)"
