#!/usr/bin/env bash
# Result polling against order writing: the order writer's drain rate of COUNT queued
# reservations, once alone and once under a flood of result polls (wrk), and their ratio.
#
# Each run gets its own database, topic and campaign, starts `order-writer serve` (release
# build) on them, and lets `drain-probe` (e2e/src/bin/drain-probe.rs) reserve COUNT units through
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
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
if [[ -z "${SECKILL_PG_ADMIN_URL:-}" && -f .stack/env ]]; then
  # shellcheck disable=SC1091
  source .stack/env
fi
COUNT=${1:-20000}
PARTITIONS=${PARTITIONS:-4}
RESULT_POOL_SIZE=${RESULT_POOL_SIZE:-4}
FLOOD_THREADS=${FLOOD_THREADS:-1}
FLOOD_CONNECTIONS=${FLOOD_CONNECTIONS:-64}
ADMIN=${SECKILL_PG_ADMIN_URL:-postgres://postgres@127.0.0.1:5440/postgres}
REDIS_URL=${SECKILL_REDIS_URL:-redis://127.0.0.1:6390}
BROKER=${SECKILL_KAFKA_BROKER:-127.0.0.1:19092}
[[ "$COUNT" =~ ^[0-9]+$ && "$COUNT" -ge 100 ]] || { echo "COUNT must be a number >= 100" >&2; exit 2; }

# shellcheck source=e2e/lib.sh
source e2e/lib.sh
need_packages wrk:wrk curl:curl
for tool in wrk psql curl python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (bash e2e/stack.sh up installs it)" >&2; exit 1; }
done
build_all release
OW=target/release/order-writer
PROBE=target/release/drain-probe

WORK=$(mktemp -d -t polling-bench.XXXXXX)
OW_PID=""
WRK_PID=""
DBS=()
cleanup() {
  [[ -n "$WRK_PID" ]] && kill "$WRK_PID" 2>/dev/null && wait "$WRK_PID" 2>/dev/null || true
  [[ -n "$OW_PID" ]] && kill "$OW_PID" 2>/dev/null && wait "$OW_PID" 2>/dev/null || true
  for db in "${DBS[@]}"; do psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
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
  cat >"$dir/order-writer.toml" <<CONF
listen = "127.0.0.1:$port"
redis_url = "$REDIS_URL"
postgres_url = "$pg"
result_pool_size = $RESULT_POOL_SIZE
lua_dir = "$ROOT/lua"
migrations_dir = "$ROOT/sql"
gateway_key = "env:SECKILL_GATEWAY_KEY"
payment_key = "env:SECKILL_PAYMENT_KEY"

[kafka]
brokers = ["$BROKER"]
topic = "$topic"
partitions = $PARTITIONS

[sweeper]
# Far beyond the run: only the probe's own records reach the topic.
age_secs = 3600
CONF
  cat >"$dir/campaigns/$campaign.toml" <<CAMP
id = "$campaign"
sku = "SKU-$campaign"
stock = $COUNT
per_user_limit = 1
price_cents = 1999
starts_at = 2020-01-01T00:00:00Z
ends_at = 2099-01-01T00:00:00Z
pay_window_secs = 900
CAMP
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
python3 - "$quiet" "$flooded" <<'PY'
import sys
q, f = float(sys.argv[1]), float(sys.argv[2])
ratio = f / q
print(f"drain rate alone:       {q:10.0f} orders/s")
print(f"drain rate under flood: {f:10.0f} orders/s")
print(f"ratio: {ratio:.2f} ({'within' if ratio >= 0.8 else 'NOT within'} 20%)")
PY
