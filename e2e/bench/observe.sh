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
# shellcheck source=e2e/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_env SECKILL_REDIS_URL
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-100}
ROUNDS=${ROUNDS:-2}
bench_tools wrk:wrk curl:curl -- redis-cli python3
bench_redis
build_all release
# The edge's keys for this run (each gateway's [defense]); the login key also signs the one
# buyer's login JWT that sets the sold-out flag.
edge_keys obs

bench_work gw-observe
RUN=$(date +%s)$$
SOLD="bench-obs-$RUN"
VARIANTS=(off metrics log both)
declare -A PID PORT ADMIN
bench_cleanup() {
  # shellcheck disable=SC2046
  "${RCLI[@]}" del $(campaign_keys "$SOLD") >/dev/null 2>&1 || true
}

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
    fill e2e/bench/conf/observe-gateway.toml PORT="${PORT[$v]}" WORKERS="$THREADS" REDIS_URL="$REDIS_URL" \
      UPSTREAM_PORT="$(free_port)" BROKER_PORT="$(free_port)" DEFENSE="$(defense_table)"
    if [[ $v == metrics || $v == both ]]; then printf '[admin]\nlisten = "127.0.0.1:%s"\n' "${ADMIN[$v]}"; fi
    if [[ $v == log || $v == both ]]; then printf '[access_log]\noutput = "access-%s.log"\n' "$v"; fi
  } >"$WORK/$v.toml"
  RUST_LOG=warn target/release/gateway --conf "$WORK/$v.toml" --lua-dir lua >"$WORK/$v.log" 2>&1 &
  PID[$v]=$!
  bench_started "${PID[$v]}"
done
for v in "${VARIANTS[@]}"; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${PORT[$v]}/" && break; sleep 0.1; done
done

HZ=$(getconf CLK_TCK)
declare -A REQS TICKS RPS_SUM P50_SUM P99_SUM
for v in "${VARIANTS[@]}"; do REQS[$v]=0; TICKS[$v]=0; RPS_SUM[$v]=0; P50_SUM[$v]=0; P99_SUM[$v]=0; done

echo "observe bench: sold-out path, wrk -t$THREADS -c$CONNECTIONS -d$DURATION, gateway threads=$THREADS, $ROUNDS rounds of ${VARIANTS[*]}"
for round in $(seq "$ROUNDS"); do
  for v in "${VARIANTS[@]}"; do
    url="http://127.0.0.1:${PORT[$v]}/seckill/$SOLD/order"
    # Sets (or renews) the flag; every request of the run is then answered without Redis.
    sold_out_flag "http://127.0.0.1:${PORT[$v]}" "$SOLD" "$WORK/sold.tsv" || exit 1
    before=$(cpu_ticks "${PID[$v]}")
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s e2e/bench/wrk/latency.lua "$url" >"$WORK/$v-$round.out" 2>&1
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
  python3 e2e/bench/py/observe_row.py "$v" "${RPS_SUM[$v]}" "${P50_SUM[$v]}" "${P99_SUM[$v]}" "${TICKS[$v]}" "${REQS[$v]}" \
    "${RPS_SUM[off]}" "${TICKS[off]}" "${REQS[off]}" "$HZ" "$ROUNDS"
done
m=$(curl -s "http://127.0.0.1:${ADMIN[both]}/metrics")
written=$(awk '/^seckill_gateway_access_log_lines_total / {print $2}' <<<"$m")
dropped=$(awk '/^seckill_gateway_access_log_dropped_total / {print $2}' <<<"$m")
lines=$(wc -l <"$WORK/access-both.log")
echo
echo "access log of 'both': $written lines written, $dropped dropped (queue full), $lines lines in the file; requests sent: ${REQS[both]} (+ warm-ups and the start probes)"
