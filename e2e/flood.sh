#!/usr/bin/env bash
# The flood: the demo's sale under ten times the crowd it is sized for, all in its first second,
# with the waiting room off and then on, back to back on the same stack, stock and crowd.
#
#   FLOOD=1 bash e2e/demo.sh      (the same: the demo hands over to this script)
#
# For each of the two sales: a fresh campaign (its own database and topic) opening START_IN s
# later, the order writer and the gateway, and `seckill-load --flood`: USERS accounts send their
# token request over the first FLOOD_SPREAD_MS of the sale (SCRIPT_PERCENT of them, the scripts,
# all at the start instant) and their orders as soon as they hold a token; the sale's Redis is
# sampled every 100 ms (INFO commandstats, the stock) beside the gateway's reservation calls.
# The second sale's campaign has `[waiting_room] admit_per_sec = ADMIT_PER_SEC`. Each report
# (text and JSON under .stack/flood/{off,on}) has every invariant of the demo, then the two side
# by side with the room's targets as PASS/MISS lines: a missed target is reported, a broken
# invariant fails the run (exit non-zero).
# Knobs (environment): STOCK (1000), ADMIT_PER_SEC (500: the crowd a second the sale is sized
# for), USERS (10 x ADMIT_PER_SEC), REQUESTS_PER_USER (2), SCRIPT_PERCENT (10), FLOOD_SPREAD_MS
# (1000), FLOOD_LEAD_MS (0: the crowd arrives after the start; 1000: in the pre-queue's last
# second, the scripts still at T-0), START_DRAW_MS (1000: the room's start draw; 0: none),
# ROOM_FIRST (0; 1: with the room on, each account's first token request without the work, as
# the buyer's page sends it, instead of the captcha first),
# POW_BITS (8), START_IN (10), PAY_WINDOW_SECS (60),
# GATEWAY_PORT (8080), WRITER_PORT (8081), PROFILE (release), REDIS_URL (the stack's Redis).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
STOCK=${STOCK:-1000}
ADMIT_PER_SEC=${ADMIT_PER_SEC:-500}
USERS=${USERS:-$((10 * ADMIT_PER_SEC))}
REQUESTS_PER_USER=${REQUESTS_PER_USER:-2}
SCRIPT_PERCENT=${SCRIPT_PERCENT:-10}
FLOOD_SPREAD_MS=${FLOOD_SPREAD_MS:-1000}
FLOOD_LEAD_MS=${FLOOD_LEAD_MS:-0}
START_IN=${START_IN:-10}
PAY_WINDOW_SECS=${PAY_WINDOW_SECS:-60}
export PAY_WINDOW_SECS
GATEWAY_PORT=${GATEWAY_PORT:-8080}
WRITER_PORT=${WRITER_PORT:-8081}
PROFILE=${PROFILE:-release}

log() { printf '%s flood: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

log "bringing the stack up"
bash e2e/stack.sh up
# shellcheck disable=SC1091
. "${SECKILL_STACK_DIR:-.stack}/env"
SECKILL_REDIS_URL=${REDIS_URL:-$SECKILL_REDIS_URL}
export SECKILL_REDIS_URL

# shellcheck source=e2e/lib.sh
source e2e/lib.sh
log "building $PROFILE binaries"
build_all "$PROFILE"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$([[ "$PROFILE" == release ]] && echo release || echo debug)"

FLOOD_DIR="$ROOT/.stack/flood"
rm -rf "$FLOOD_DIR"
mkdir -p "$FLOOD_DIR"
SECKILL_GATEWAY_KEY=$(random_key flood-gateway-key-)
SECKILL_PAYMENT_KEY=$(random_key flood-payment-key-)
export SECKILL_GATEWAY_KEY SECKILL_PAYMENT_KEY
edge_keys flood

PIDS=()
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  PIDS=()
}
trap stop_all EXIT

status=0
# flood_sale NAME [ADMIT_PER_SEC]: one sale under the flood, the room on when ADMIT_PER_SEC is given.
flood_sale() {
  local name=$1 admit=${2:-} run="$FLOOD_DIR/$1" id
  mkdir -p "$run"
  id="flood$name$(date -u +%H%M%S)"
  sale_create "$run" "$id" "$STOCK" "$(date -u -d "+$START_IN seconds" +%Y-%m-%dT%H:%M:%SZ)" \
    "$WRITER_PORT" "$BIN" >"$run/setup.log" 2>&1 || { cat "$run/setup.log"; return 1; }
  local room=()
  if [[ -n "$admit" ]]; then
    room_table "$run/campaigns/$id.toml" "$admit"
    room=(--admit-per-sec "$admit")
    [[ ${ROOM_FIRST:-0} == 1 ]] && room+=(--flood-room-first)
  fi
  "$BIN/order-writer" --conf "$run/order-writer.toml" serve >"$run/order-writer.log" 2>&1 &
  PIDS+=($!)
  local writer=$!
  gateway_conf "$run" gateway "$GATEWAY_PORT" "$id" "$WRITER_PORT"
  "$BIN/gateway" --conf "$run/gateway.toml" --lua-dir "$ROOT/lua" >"$run/gateway.log" 2>&1 &
  PIDS+=($!)
  local gateway=$!
  wait_port order-writer "$WRITER_PORT" "$run/order-writer.log"
  wait_port gateway "$GATEWAY_PORT" "$run/gateway.log"
  log "room ${name}: campaign $id, $USERS accounts on stock $STOCK${admit:+, admit_per_sec $admit}"
  local rc=0
  "$BIN/seckill-load" --flood --campaign "$id" --gateway "http://127.0.0.1:$GATEWAY_PORT" \
    --users "$USERS" --requests-per-user "$REQUESTS_PER_USER" --concurrency 256 \
    --script-percent "$SCRIPT_PERCENT" --flood-spread-ms "$FLOOD_SPREAD_MS" --flood-lead-ms "$FLOOD_LEAD_MS" \
    "${room[@]}" --writer "http://127.0.0.1:$WRITER_PORT" \
    --metrics "gateway=http://127.0.0.1:$((GATEWAY_PORT + 1000))/metrics" \
    --metrics "order-writer=http://127.0.0.1:$((WRITER_PORT + 1000))/metrics" \
    --process "gateway=$gateway" --process "order-writer=$writer" \
    --process "redis-server=$(stack_pid redis)" \
    --pg-url "$(sale_db_url "$id")" --redis-url "$SECKILL_REDIS_URL" \
    --json "$run/report.json" | tee "$run/report.txt" || rc=$?
  "$BIN/order-writer" --conf "$run/order-writer.toml" reconcile "$id" >"$run/reconcile.log" 2>&1 || rc=1
  sed -n 's/^  differences: /reconcile differences: /p' "$run/reconcile.log" | tail -n 1
  stop_all
  return "$rc"
}

flood_sale off || status=$?
flood_sale on "$ADMIT_PER_SEC" || status=$?
echo
flood_summary "$FLOOD_DIR/off/report.json" "$FLOOD_DIR/on/report.json" | tee "$FLOOD_DIR/summary.txt" || status=1
log "reports: $FLOOD_DIR/{off,on}/report.{txt,json}, $FLOOD_DIR/summary.txt"
exit "$status"
