#!/usr/bin/env bash
# Result polling against order writing: the order writer's drain rate of COUNT queued
# reservations, once alone and once under a flood of result polls (wrk), and their ratio.
#
# Each run gets its own database, topic and campaign, starts `order-writer serve` (release
# build) on them, and lets `drain-probe` (e2e/bench/src/bin/drain-probe.rs) reserve COUNT units through
# the real reservation script, produce the records to the topic and time them into PostgreSQL
# orders. In the flood run, wrk polls GET /seckill/<campaign>/result/<id> on the same order
# writer from before the drain starts until it ends (straight to the writer: through a gateway
# only polls carrying their request's result token get this far). The polled id is unknown, the dearest
# answer: Redis outbox, PostgreSQL, Redis released hash, NOT_FOUND; all of it runs on the result
# query's own pool (result_pool_size) and Redis client, apart from the writer's. Target: the
# flood run keeps at least 80% of the quiet run's rate. On one small machine wrk and the servers
# share the cores, so part of any gap is CPU, not connections; FLOOD_CONNECTIONS and
# FLOOD_THREADS size the flood.
#
# Usage: e2e/bench/polling.sh [COUNT]           (default 20000)
#   Env: SECKILL_PG_ADMIN_URL, SECKILL_REDIS_URL, SECKILL_KAFKA_BROKER (defaults: the stack's),
#        PARTITIONS (4), RESULT_POOL_SIZE (4), FLOOD_THREADS (1), FLOOD_CONNECTIONS (64).
# Needs: the stack (e2e/stack.sh up), wrk, psql, curl.
# shellcheck source=e2e/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_env SECKILL_PG_ADMIN_URL
COUNT=${1:-20000}
PARTITIONS=${PARTITIONS:-4}
RESULT_POOL_SIZE=${RESULT_POOL_SIZE:-4}
FLOOD_THREADS=${FLOOD_THREADS:-1}
FLOOD_CONNECTIONS=${FLOOD_CONNECTIONS:-64}
ADMIN=${SECKILL_PG_ADMIN_URL:-postgres://postgres@127.0.0.1:5440/postgres}
REDIS_URL=${SECKILL_REDIS_URL:-redis://127.0.0.1:6390}
BROKER=${SECKILL_KAFKA_BROKER:-127.0.0.1:19092}
[[ "$COUNT" =~ ^[0-9]+$ && "$COUNT" -ge 100 ]] || { echo "COUNT must be a number >= 100" >&2; exit 2; }

bench_tools wrk:wrk curl:curl -- psql python3
build_all release
OW=target/release/order-writer
PROBE=target/release/drain-probe

bench_work polling-bench
OW_PID=""
WRK_PID=""
DBS=()
bench_cleanup() {
  [[ -n "$WRK_PID" ]] && kill "$WRK_PID" 2>/dev/null && wait "$WRK_PID" 2>/dev/null || true
  [[ -n "$OW_PID" ]] && kill "$OW_PID" 2>/dev/null && wait "$OW_PID" 2>/dev/null || true
  for db in "${DBS[@]}"; do psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; done
}
export SECKILL_GATEWAY_KEY="bench-gateway-key-$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')"
export SECKILL_PAYMENT_KEY="bench-payment-key-$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')"

# run LABEL FLOOD(0|1): sets RATE to the drain rate (orders/s).
run() {
  local label=$1 flood=$2 tag db topic campaign port dir
  tag=$(od -An -tx4 -N4 /dev/urandom | tr -d ' \n')
  db="polling_$tag"; topic="polling-$tag"; campaign="poll-$tag"; port=$(free_port)
  dir="$WORK/$label"; mkdir -p "$dir/campaigns"
  psql "$ADMIN" -qc "CREATE DATABASE $db" >/dev/null
  DBS+=("$db")
  local pg="${ADMIN%/*}/$db"
  fill e2e/bench/conf/polling-writer.toml PORT="$port" REDIS_URL="$REDIS_URL" PG="$pg" ROOT="$ROOT" \
    RESULT_POOL_SIZE="$RESULT_POOL_SIZE" BROKER="$BROKER" TOPIC="$topic" PARTITIONS="$PARTITIONS" >"$dir/order-writer.toml"
  fill e2e/bench/conf/polling-campaign.toml ID="$campaign" STOCK="$COUNT" >"$dir/campaigns/$campaign.toml"
  "$OW" -c "$dir/order-writer.toml" migrate >"$dir/admin.log" 2>&1
  "$OW" -c "$dir/order-writer.toml" topic create >>"$dir/admin.log" 2>&1
  "$OW" -c "$dir/order-writer.toml" campaign publish "$campaign" >>"$dir/admin.log" 2>&1
  "$OW" -c "$dir/order-writer.toml" serve >"$dir/serve.log" 2>&1 &
  OW_PID=$!
  local i
  for i in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break
    kill -0 "$OW_PID" 2>/dev/null || { cat "$dir/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  if [[ "$flood" == 1 ]]; then
    wrk -t"$FLOOD_THREADS" -c"$FLOOD_CONNECTIONS" -d600s \
      "http://127.0.0.1:$port/seckill/$campaign/result/not-a-request-$tag" >"$dir/wrk.log" 2>&1 &
    WRK_PID=$!
    sleep 2
  fi
  "$PROBE" --campaign "$campaign" --count "$COUNT" --topic "$topic" --partitions "$PARTITIONS" \
    --pg-url "$pg" >"$dir/probe.log" 2>&1 || { cat "$dir/probe.log" >&2; exit 1; }
  if [[ -n "$WRK_PID" ]]; then
    kill -INT "$WRK_PID"; wait "$WRK_PID" 2>/dev/null || true; WRK_PID=""
    echo "  flood: $(grep -E 'Requests/sec' "$dir/wrk.log" || echo 'no wrk summary') ($FLOOD_THREADS thread(s), $FLOOD_CONNECTIONS connections)"
  fi
  kill "$OW_PID"; wait "$OW_PID" 2>/dev/null || true; OW_PID=""
  echo "  $label: $(grep -E '^drained' "$dir/probe.log")"
  RATE=$(awk '/^RATE/ {print $2}' "$dir/probe.log")
}

echo "== result polling vs order writing: $COUNT reservations, $PARTITIONS partitions, result_pool_size $RESULT_POOL_SIZE =="
RATE=""
run quiet 0
quiet=$RATE
run flood 1
flooded=$RATE
python3 e2e/bench/py/polling_verdict.py "$quiet" "$flooded"
