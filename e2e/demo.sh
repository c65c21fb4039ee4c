#!/usr/bin/env bash
# The main job: a real flash sale on the local stack, and the report of what happened.
#
#   bash e2e/demo.sh
#
# Brings the stack up (installing what is missing), builds release binaries, creates a fresh
# campaign whose window is open now, publishes its stock (PostgreSQL -> Redis), starts the
# order writer and the gateway, sends a crowd of simulated buyers at the gateway, waits for
# every queued reservation to settle, prints the report and the reconciliation, and stops what
# it started. Every buyer speaks the full protocol: a login JWT (the demo plays the shop's auth
# service with a key of its own), the captcha's proof of work, a campaign token, signed orders.
# Knobs (environment): STOCK (1000), USERS (20000), REQUESTS_PER_USER (2), POW_BITS (8),
# CONCURRENCY (256), GATEWAY_PORT (8080), WRITER_PORT (8081), PROFILE (release; the test
# command runs a small sale with PROFILE=debug, reusing the binaries its tests built).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
STOCK=${STOCK:-1000}
USERS=${USERS:-20000}
REQUESTS_PER_USER=${REQUESTS_PER_USER:-2}
CONCURRENCY=${CONCURRENCY:-256}
GATEWAY_PORT=${GATEWAY_PORT:-8080}
PROFILE=${PROFILE:-release}
WRITER_PORT=${WRITER_PORT:-8081}

log() { printf '%s demo: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

log "bringing the stack up"
bash e2e/stack.sh up
# shellcheck disable=SC1091
. .stack/env

log "building $PROFILE binaries"
# shellcheck source=e2e/lib.sh
source e2e/lib.sh
build_all "$PROFILE"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$( [[ "$PROFILE" == release ]] && echo release || echo debug )"

RUN="$ROOT/.stack/demo"
rm -rf "$RUN"
mkdir -p "$RUN/campaigns"
ID="sale$(date -u +%Y%m%d%H%M%S)"
DB="demo_$ID"
PG_BASE=${SECKILL_PG_ADMIN_URL%/*}
SECKILL_GATEWAY_KEY=$(random_key demo-gateway-key-)
export SECKILL_GATEWAY_KEY
# The edge's master key, and the key of the shop's auth service the demo plays (the crowd's
# login JWTs are minted with it, as the shop would).
edge_keys demo
SECKILL_PAYMENT_KEY=$(random_key demo-payment-key-)
export SECKILL_PAYMENT_KEY

# A campaign open from a minute ago for an hour, with this run's stock.
cat >"$RUN/campaigns/$ID.toml" <<TOML
id = "$ID"
sku = "SKU-DEMO-PHONE"
stock = $STOCK
per_user_limit = 1
price_cents = 99900
starts_at = "$(date -u -d '-1 minute' +%Y-%m-%dT%H:%M:%SZ)"
ends_at = "$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)"
pay_window_secs = 900

[limits]
max_inflight = 4096
# The simulated crowd comes from one loopback address: a per-address polling limit sized for
# one buyer would throttle all of them (real buyers each have their own).
result_per_sec = 0
device_per_sec = 5
user_per_sec = 5

# Every defense on; a small proof of work so the crowd's own hashing stays a minor share.
[defense]
captcha = "pow"
pow_bits = ${POW_BITS:-8}
token_ttl_secs = 120
timestamp_window_secs = 30

[eligibility]
min_level = 1
TOML

# The repository's conf files, pointed at this run's ports, database, topic and folders.
sed -e "s#^listen = .*#listen = \"127.0.0.1:$GATEWAY_PORT\"#" \
    -e "s#^url = \"redis://.*#url = \"$SECKILL_REDIS_URL\"#" \
    -e "s#^upstreams = \\[\"127.0.0.1:8081\"\\]#upstreams = [\"127.0.0.1:$WRITER_PORT\"]#" \
    -e "s#^brokers = .*#brokers = [\"$SECKILL_KAFKA_BROKER\"]#" \
    -e "s#^topic = .*#topic = \"reservations.$ID\"#" \
    conf/server.toml >"$RUN/server.toml"
sed -e "s#^listen = .*#listen = \"127.0.0.1:$WRITER_PORT\"#" \
    -e "s#^redis_url = .*#redis_url = \"$SECKILL_REDIS_URL\"#" \
    -e "s#^postgres_url = .*#postgres_url = \"$PG_BASE/$DB\"#" \
    -e "s#^brokers = .*#brokers = [\"$SECKILL_KAFKA_BROKER\"]#" \
    -e "s#^topic = .*#topic = \"reservations.$ID\"#" \
    -e "s#^lua_dir = .*#lua_dir = \"$ROOT/lua\"#" \
    -e "s#^migrations_dir = .*#migrations_dir = \"$ROOT/sql\"#" \
    conf/order-writer.toml >"$RUN/order-writer.toml"

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}
trap cleanup EXIT

wait_port() { # name port log
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "$1 did not listen on 127.0.0.1:$2 within 20 s; its log:" >&2
  tail -n 40 "$3" >&2
  exit 1
}

log "creating database $DB, topic and campaign $ID (stock $STOCK)"
psql "$SECKILL_PG_ADMIN_URL" -qc "CREATE DATABASE $DB" >/dev/null
OW=("$BIN/order-writer" --config "$RUN/order-writer.toml")
"${OW[@]}" migrate
"${OW[@]}" topic create
"${OW[@]}" campaign publish "$ID"

log "starting the order writer and the gateway"
"${OW[@]}" serve >"$RUN/order-writer.log" 2>&1 &
PIDS+=($!)
wait_port order-writer "$WRITER_PORT" "$RUN/order-writer.log"
"$BIN/gateway" --conf "$RUN/server.toml" --lua-dir "$ROOT/lua" >"$RUN/gateway.log" 2>&1 &
PIDS+=($!)
wait_port gateway "$GATEWAY_PORT" "$RUN/gateway.log"
log "gateway      http://127.0.0.1:$GATEWAY_PORT  (log $RUN/gateway.log)"
log "order writer http://127.0.0.1:$WRITER_PORT  (log $RUN/order-writer.log)"
log "redis $SECKILL_REDIS_URL  postgres $PG_BASE/$DB  kafka $SECKILL_KAFKA_BROKER"

log "the sale: $USERS users x $REQUESTS_PER_USER requests, $CONCURRENCY in flight, stock $STOCK"
status=0
"$BIN/seckill-load" --gateway "http://127.0.0.1:$GATEWAY_PORT" --campaign "$ID" \
  --users "$USERS" --requests-per-user "$REQUESTS_PER_USER" --concurrency "$CONCURRENCY" \
  --pg-url "$PG_BASE/$DB" --redis-url "$SECKILL_REDIS_URL" --json "$RUN/report.json" || status=$?

log "reconciliation"
"${OW[@]}" reconcile "$ID" || status=$?
log "report: $RUN/report.json"
exit "$status"
