#!/usr/bin/env bash
# The buyer's page's figures, in one run of a release gateway:
#
#   (p) GET /seckill/<c>/ (the page, gzipped) and (j) GET /seckill/<c>/app.js (its largest file),
#       as a CDN's miss would ask them: requests/s and the gateway's CPU per request;
#   (s) beside them, the same wrk against the sold-out path: one signed order on a sold-out
#       campaign (the local flag answers SOLD_OUT, no Redis), the cheapest order the gateway
#       answers. The page must cost about as much: a static answer from memory;
#   the page's bytes (plain and gzipped), the time from loading the page to an enabled button,
#   and the proof of work's time at 8, 12 and 16 bits in Chromium (the page's own Web Worker,
#   e2e/browser/figures.mjs) beside the Rust client's
#   (pow-time: protocol::pow::solve, what e2e/fixtures/src/client.rs runs).
#
# Usage: e2e/bench/page.sh        Env: DURATION (10s), THREADS (2), CONNECTIONS (50), ROUNDS (30)
# Needs: the stack's Redis and Kafka (e2e/stack.sh up; SECKILL_* from .stack/env), wrk, and the
# browser tests' Chromium and npm packages (installed when missing, e2e/page.sh).
# shellcheck source=e2e/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_env SECKILL_REDIS_URL
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-50}
ROUNDS=${ROUNDS:-30}
bench_tools wrk:wrk
bench_redis
# shellcheck source=e2e/page.sh
source e2e/page.sh
browser_install
build_all release
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"

bench_work page-bench
GW_PID=""
SOLD="bench-page-$(date +%s)$$"
edge_keys bench
bench_cleanup() {
  # shellcheck disable=SC2046
  "${RCLI[@]}" del $(campaign_keys "$SOLD") >/dev/null 2>&1 || true
}

# A sold-out campaign, published to Redis with lua/publish.lua (as the order writer does).
# shellcheck disable=SC2046
"${RCLI[@]}" --eval lua/publish.lua $(campaign_keys "$SOLD") , 1 0 1 SKU-BENCH 100 1 >/dev/null
GW_PORT=$(free_port)
mkdir -p "$WORK/conf/campaigns"
bench_campaign "$WORK/conf/campaigns/$SOLD.toml" "$SOLD" 0 0
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/conf/key"
fill e2e/bench/conf/page-gateway.toml PORT="$GW_PORT" WORKERS="$THREADS" REDIS_URL="$REDIS_URL" \
  BROKER="${SECKILL_KAFKA_BROKER:-127.0.0.1:19092}" DEFENSE="$(defense_table)" >"$WORK/conf/server.toml"
"$BIN/gateway" --conf "$WORK/conf/server.toml" --lua-dir "$ROOT/lua" >"$WORK/gateway.log" 2>&1 &
GW_PID=$!
bench_started "$GW_PID"
wait_port gateway "$GW_PORT" "$WORK/gateway.log"
BASE="http://127.0.0.1:$GW_PORT"

# The sold-out flag, and the signed order (s) sends again and again.
sold_out_flag "$BASE" "$SOLD" "$WORK/order.tsv"
signed_orders_wrk "$WORK/orders.lua"
# One copy of the order per wrk thread (each thread sends its share of the lines).
for _ in $(seq "$THREADS"); do cat "$WORK/order.tsv"; done >"$WORK/orders.tsv"

# wrk for DURATION with the gateway's CPU counted around it: "NAME req/s cpu_us_per_req p50 p99".
measure() { # name wrk-args...
  local name=$1 before after out reqs secs
  shift
  before=$(cpu_ticks "$GW_PID")
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$@")
  after=$(cpu_ticks "$GW_PID")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  secs=$(awk '/requests in/ {gsub("s,", "", $4); print $4}' <<<"$out")
  awk -v n="$name" -v r="$reqs" -v s="$secs" -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" \
    -v p50="$(awk '$1 == "50%" {print $2}' <<<"$out")" -v p99="$(awk '$1 == "99%" {print $2}' <<<"$out")" \
    'BEGIN { printf "%-34s %9.0f req/s  %6.1f us CPU/req  p50 %s p99 %s\n", n, r / s, t / hz * 1e6 / r, p50, p99 }'
}

echo "== the gateway's CPU per request (release, wrk -t$THREADS -c$CONNECTIONS -d$DURATION, same run) =="
for f in "" app.js; do
  curl -sf -o /dev/null -H 'Accept-Encoding: gzip' "$BASE/seckill/$SOLD/$f" || { echo "the page did not answer" >&2; exit 1; }
done
measure "(p) page, gzip" -H 'Accept-Encoding: gzip' "$BASE/seckill/$SOLD/"
measure "(j) app.js, gzip" -H 'Accept-Encoding: gzip' "$BASE/seckill/$SOLD/app.js"
measure "(s) sold-out order (local flag)" -s "$WORK/orders.lua" "$BASE" -- good "$THREADS" "$WORK/orders.tsv"

echo "== the page's bytes =="
total_plain=0
total_gz=0
for f in "" app.js pow.js page.css; do
  plain=$(curl -s "$BASE/seckill/$SOLD/$f" | wc -c)
  gz=$(curl -s -H 'Accept-Encoding: gzip' "$BASE/seckill/$SOLD/$f" | wc -c)
  printf '%-12s %6d bytes, %6d gzipped\n' "${f:-index.html}" "$plain" "$gz"
  total_plain=$((total_plain + plain))
  total_gz=$((total_gz + gz))
done
printf '%-12s %6d bytes, %6d gzipped\n' "all" "$total_plain" "$total_gz"

echo "== in Chromium: load to an enabled button; the proof of work in the page's Web Worker beside the Rust client ($ROUNDS challenges each) =="
BASE_URL="$BASE" CAMPAIGN="$SOLD" ROUNDS="$ROUNDS" node e2e/browser/figures.mjs
"$BIN/pow-time" --bits 8,12,16 --rounds "$ROUNDS"
