#!/usr/bin/env bash
# The buyer's page in a real browser: Debian's Chromium driven by playwright-core (npm, pinned in
# e2e/browser/package-lock.json), against a real gateway, order writer and the demo's stand-in
# login on the local stack. What e2e/test.sh runs as its "browser" phase.
#
#   bash e2e/browser.sh
#
# Installs what is missing (chromium and a CJK font from Debian, the npm packages with `npm
# ci`), uses the stack of the environment (SECKILL_REDIS_URL, ...; else brings .stack up), builds
# the debug binaries, creates three campaigns in one fresh database and topic:
#   <run>open   opens OPEN_IN (40) seconds after setup, stock 100, a blacklist with `blocked-1`
#   <run>sold   open, no stock
#   <run>crowd  open, stock 5 (20 browsers buy at once)
#   <run>room   open, stock 10, a waiting room admitting 1 buyer a second (3 browsers queue)
#   <run>preq   the same room, opening PREQ_IN (OPEN_IN + 20) seconds after setup, its pre-queue
#               open from 10 minutes before (2 browsers join it before the start)
#   <run>draw   the same room without a pre-queue, opening DRAW_IN (PREQ_IN + 35) seconds after
#               setup, with a start draw of 10 s (2 browsers click in it)
#   <run>live   open, stock 10: paused by the live view's test (the order writer's /view/ID of an
#               open, a sold-out and a paused campaign)
# starts the order writer, the gateway (its shop route /login goes to demo-login) and
# demo-login, runs the tests (e2e/browser/*.test.mjs, node's test runner), then stops what it
# started, drops the database, deletes the topic and the campaigns' Redis keys. Screenshots of
# each state are saved in .stack/browser/shots/. Knobs: GATEWAY_PORT (18280; the writer on +1,
# demo-login on +5), OPEN_IN, PREQ_IN, DRAW_IN, BROWSER_TESTS (the test files to run, default all
# of e2e/browser/).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=e2e/lib.sh
source e2e/lib.sh
# shellcheck source=e2e/page.sh
source e2e/page.sh

GATEWAY_PORT=${GATEWAY_PORT:-18280}
WRITER_PORT=$((GATEWAY_PORT + 1))
LOGIN_PORT=$((GATEWAY_PORT + 5))
OPEN_IN=${OPEN_IN:-40}
PREQ_IN=${PREQ_IN:-$((OPEN_IN + 20))}
DRAW_IN=${DRAW_IN:-$((PREQ_IN + 35))}

log() { printf '%s browser: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# Writes campaign file DIR/ID.toml: opens at STARTS (RFC 3339), STOCK units, limit 1 per user,
# every edge defense on, no per-address rate (every browser comes from 127.0.0.1).
browser_campaign() { # dir id stock starts blacklist
  fill e2e/conf/browser-campaign.toml ID="$2" STOCK="$3" STARTS_AT="$4" ENDS_AT="$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)" \
    BLACKLIST_LINE="${5:+blacklist_file = \"$5\"}" >"$1/$2.toml"
}

browser_install

if [[ -z "${SECKILL_REDIS_URL:-}" ]]; then
  bash e2e/stack.sh up
  # shellcheck disable=SC1091
  . .stack/env
fi
log "building debug binaries"
build_all debug
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug"

RUN="$ROOT/.stack/browser"
rm -rf "$RUN"
mkdir -p "$RUN/shots"
RUN_ID="br$(date -u +%H%M%S)$((RANDOM % 100))"
SECKILL_GATEWAY_KEY=$(random_key browser-gateway-)
SECKILL_PAYMENT_KEY=$(random_key browser-payment-)
SECKILL_ADMIN_TOKEN=$(random_key browser-admin-)
export SECKILL_GATEWAY_KEY SECKILL_PAYMENT_KEY SECKILL_ADMIN_TOKEN
edge_keys browser

PIDS=()
DB_URL=$(sale_db_url "$RUN_ID")
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  # The sale's database and topic (sale_create's), then its campaigns' keys.
  "$BIN/sale-cleanup" --only "$RUN_ID" --redis "$SECKILL_REDIS_URL" >/dev/null || true
  if [[ $SECKILL_REDIS_URL == redis://* ]]; then
    local hostport=${SECKILL_REDIS_URL#redis://}
    hostport=${hostport%%/*}
    redis-cli -h "${hostport%:*}" -p "${hostport##*:}" --scan --pattern "sk:*$RUN_ID*" |
      xargs -r -n 100 redis-cli -h "${hostport%:*}" -p "${hostport##*:}" DEL >/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT

# The database, topic and order-writer file for the run (sale_create's), then the campaigns.
STARTS_AT=$(date -u -d "+$OPEN_IN seconds" +%Y-%m-%dT%H:%M:%SZ)
PREQ_AT=$(date -u -d "+$PREQ_IN seconds" +%Y-%m-%dT%H:%M:%SZ)
DRAW_AT=$(date -u -d "+$DRAW_IN seconds" +%Y-%m-%dT%H:%M:%SZ)
OPENED=$(date -u -d '-1 hour' +%Y-%m-%dT%H:%M:%SZ)
log "campaigns ${RUN_ID}open (opens $STARTS_AT), ${RUN_ID}sold, ${RUN_ID}crowd, ${RUN_ID}room, ${RUN_ID}preq (opens $PREQ_AT), ${RUN_ID}draw (opens $DRAW_AT)"
printf '# users refused by the browser test\nblocked-1\n' >"$RUN/campaigns.blacklist"
sale_create "$RUN" "$RUN_ID" 0 "$OPENED" "$WRITER_PORT" "$BIN" >/dev/null
rm "$RUN/campaigns/$RUN_ID.toml"
mv "$RUN/campaigns.blacklist" "$RUN/campaigns/blacklist"
browser_campaign "$RUN/campaigns" "${RUN_ID}open" 100 "$STARTS_AT" blacklist
browser_campaign "$RUN/campaigns" "${RUN_ID}sold" 0 "$OPENED" ""
browser_campaign "$RUN/campaigns" "${RUN_ID}crowd" 5 "$OPENED" ""
browser_campaign "$RUN/campaigns" "${RUN_ID}room" 10 "$OPENED" ""
# One buyer a second: three pages clicking at once wait about 1, 2 and 3 s.
printf '\n[waiting_room]\nadmit_per_sec = 1\n' >>"$RUN/campaigns/${RUN_ID}room.toml"
browser_campaign "$RUN/campaigns" "${RUN_ID}preq" 10 "$PREQ_AT" ""
printf '\n[waiting_room]\nadmit_per_sec = 1\npre_queue_secs = 600\n' >>"$RUN/campaigns/${RUN_ID}preq.toml"
browser_campaign "$RUN/campaigns" "${RUN_ID}draw" 10 "$DRAW_AT" ""
printf '\n[waiting_room]\nadmit_per_sec = 1\nstart_draw_ms = 10000\n' >>"$RUN/campaigns/${RUN_ID}draw.toml"
# The live view's own (paused by its test).
browser_campaign "$RUN/campaigns" "${RUN_ID}live" 10 "$OPENED" ""
for c in open sold crowd room preq draw live; do
  "$BIN/order-writer" --conf "$RUN/order-writer.toml" campaign publish "$RUN_ID$c" >/dev/null
done
# The gateway's admin listener, for the live view and the campaign commands of the tests (after
# the publishes above: the gateway is not up yet to show them).
fleet_table "$RUN/order-writer.toml" "$((GATEWAY_PORT + 1000))"
"$BIN/order-writer" --conf "$RUN/order-writer.toml" serve >"$RUN/order-writer.log" 2>&1 &
PIDS+=($!)
"$BIN/demo-login" --listen "127.0.0.1:$LOGIN_PORT" >"$RUN/demo-login.log" 2>&1 &
PIDS+=($!)
gateway_conf "$RUN" gateway "$GATEWAY_PORT" "$RUN_ID" "$WRITER_PORT"
demo_login_route "$RUN/gateway.toml" "$LOGIN_PORT"
"$BIN/gateway" --conf "$RUN/gateway.toml" --lua-dir "$ROOT/lua" >"$RUN/gateway.log" 2>&1 &
PIDS+=($!)
wait_port order-writer "$WRITER_PORT" "$RUN/order-writer.log"
wait_port demo-login "$LOGIN_PORT" "$RUN/demo-login.log"
wait_port gateway "$GATEWAY_PORT" "$RUN/gateway.log"

log "tests (node --test e2e/browser)"
# The two files side by side (their campaigns are their own): the page's tests run while the
# room's wait for their pre-queue and draw campaigns to open, so PREQ_IN and DRAW_IN are set
# for the room's tests alone (they assert their margins and say which knob to raise).
# shellcheck disable=SC2086 # BROWSER_TESTS: a list of files
BASE_URL="http://127.0.0.1:$GATEWAY_PORT" RUN_ID="$RUN_ID" \
  OPEN_AT_MS=$(($(date -u -d "$STARTS_AT" +%s) * 1000)) DB_URL="$DB_URL" \
  PREQ_AT_MS=$(($(date -u -d "$PREQ_AT" +%s) * 1000)) \
  DRAW_AT_MS=$(($(date -u -d "$DRAW_AT" +%s) * 1000)) \
  SHOTS="$RUN/shots" REPORT_HTML="${REPORT_HTML:-$ROOT/.stack/demo/report.html}" \
  SALE_REPORT_HTML="${SALE_REPORT_HTML:-$ROOT/.stack/demo/sale-report.html}" \
  WRITER_ADMIN="http://127.0.0.1:$((WRITER_PORT + 1000))" ORDER_WRITER="$BIN/order-writer" \
  WRITER_CONF="$RUN/order-writer.toml" \
  node --test --test-concurrency=2 ${BROWSER_TESTS:-e2e/browser/}
log "screenshots: $RUN/shots"
