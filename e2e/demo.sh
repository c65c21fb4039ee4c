#!/usr/bin/env bash
# The main job: a real flash sale on the local stack, and the report of what happened.
#
#   bash e2e/demo.sh
#
# Brings the stack up (installing what is missing), builds release binaries, creates a fresh
# campaign whose window opens START_IN seconds later, publishes its stock (PostgreSQL -> Redis),
# starts the order writer and the gateway (their /metrics on port + 1000), and sends the crowd
# (seckill-load): early birds knock before the window opens, everyone idles until the gateway's
# clock says open, then all get a campaign token (login JWT played with the demo's own auth key,
# the captcha's proof of work, the token endpoint) and send their signed orders at once, mixed
# with hot users and bots; queued requests are polled until they settle, half of the winners pay,
# the other half's orders close after PAY_WINDOW_SECS and their stock is sold again to a resale
# wave. Then the report (text, JSON and an HTML page), the invariants, the reconciliation; it
# stops what it started and exits non-zero when an invariant breaks.
# Knobs (environment): STOCK (1000), USERS (50000), REQUESTS_PER_USER (4), POW_BITS (8),
# CONCURRENCY (256), START_IN (15), PAY_WINDOW_SECS (60), GATEWAY_PORT (8080), WRITER_PORT
# (8081), PROFILE (release; the test command runs a small sale with PROFILE=debug, reusing the
# binaries its tests built).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
STOCK=${STOCK:-1000}
USERS=${USERS:-50000}
REQUESTS_PER_USER=${REQUESTS_PER_USER:-4}
CONCURRENCY=${CONCURRENCY:-256}
START_IN=${START_IN:-15}
# Winners have this long to pay; half of them do, the other half's orders close and their stock
# is sold again to a resale wave of losers.
PAY_WINDOW_SECS=${PAY_WINDOW_SECS:-60}
export PAY_WINDOW_SECS
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
mkdir -p "$RUN"
ID="sale$(date -u +%Y%m%d%H%M%S)"
SECKILL_GATEWAY_KEY=$(random_key demo-gateway-key-)
export SECKILL_GATEWAY_KEY
# The edge's master key, and the key of the shop's auth service the demo plays (the crowd's
# login JWTs are minted with it, as the shop would).
edge_keys demo
SECKILL_PAYMENT_KEY=$(random_key demo-payment-key-)
export SECKILL_PAYMENT_KEY

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

# The window opens START_IN seconds from now: the crowd gets its tokens, then idles until the
# gateway's clock says open (its early birds knock before).
STARTS_AT=$(date -u -d "+$START_IN seconds" +%Y-%m-%dT%H:%M:%SZ)
log "creating database, topic and campaign $ID (stock $STOCK, opens $STARTS_AT)"
sale_create "$RUN" "$ID" "$STOCK" "$STARTS_AT" "$WRITER_PORT" "$BIN"
gateway_conf "$RUN" gateway "$GATEWAY_PORT" "$ID" "$WRITER_PORT"
OW=("$BIN/order-writer" --config "$RUN/order-writer.toml")

log "starting the order writer and the gateway"
"${OW[@]}" serve >"$RUN/order-writer.log" 2>&1 &
PIDS+=($!)
WRITER_PID=$!
wait_port order-writer "$WRITER_PORT" "$RUN/order-writer.log"
"$BIN/gateway" --conf "$RUN/gateway.toml" --lua-dir "$ROOT/lua" >"$RUN/gateway.log" 2>&1 &
PIDS+=($!)
GATEWAY_PID=$!
wait_port gateway "$GATEWAY_PORT" "$RUN/gateway.log"
log "gateway      http://127.0.0.1:$GATEWAY_PORT  metrics :$((GATEWAY_PORT + 1000))  (log $RUN/gateway.log)"
log "order writer http://127.0.0.1:$WRITER_PORT  metrics :$((WRITER_PORT + 1000))  (log $RUN/order-writer.log)"
log "redis $SECKILL_REDIS_URL  postgres $(sale_db_url "$ID")  kafka $SECKILL_KAFKA_BROKER"

log "the sale: $USERS users x $REQUESTS_PER_USER requests, $CONCURRENCY in flight, stock $STOCK"
status=0
"$BIN/seckill-load" --gateway "http://127.0.0.1:$GATEWAY_PORT" --campaign "$ID" \
  --users "$USERS" --requests-per-user "$REQUESTS_PER_USER" --concurrency "$CONCURRENCY" \
  --writer "http://127.0.0.1:$WRITER_PORT" --close-wait-secs "$((PAY_WINDOW_SECS + 60))" \
  --metrics "gateway=http://127.0.0.1:$((GATEWAY_PORT + 1000))/metrics" \
  --metrics "order-writer=http://127.0.0.1:$((WRITER_PORT + 1000))/metrics" \
  --process "gateway=$GATEWAY_PID" --process "order-writer=$WRITER_PID" \
  --process "redis-server=$(stack_pid redis)" --process "postgres=$(stack_pid postgres)" --process "tansu=$(stack_pid kafka)" \
  --pg-url "$(sale_db_url "$ID")" --redis-url "$SECKILL_REDIS_URL" \
  --json "$RUN/report.json" --html "$RUN/report.html" || status=$?

log "reconciliation"
"${OW[@]}" reconcile "$ID" || status=$?
log "report: $RUN/report.json, $RUN/report.html"
exit "$status"
