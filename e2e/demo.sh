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
# wave. Then the report (text, JSON and an HTML page), the invariants, the reconciliation, the
# audit of the winners and the crowd (`order-writer campaign audit`, from the gateways' JSON
# access logs) and the real sale's report (`order-writer campaign report`: from PostgreSQL,
# Redis, the reconciliation, the audit and the gateways' metrics, .stack/demo/sale-report.html,
# linked from report.html), judged by e2e/sale_judge.py (hot users' and bots' devices flagged, no
# buyer's; the two reports agree); it stops what it started and exits non-zero when an invariant
# or a judgement breaks.
# What it leaves: the stack's servers it started (Redis, PostgreSQL, Kafka; it says so at the end,
# `bash e2e/stack.sh down` stops them); its sale (database, topic, Redis keys) stays for its report until the next demo,
# which deletes it (SALE_CLEANUP=older, e2e/lib.sh sales_cleanup); SALE_CLEANUP=all deletes it
# at the end, none keeps every demo's.
# Knobs (environment): STOCK (1000), USERS (50000), REQUESTS_PER_USER (4), HOT_USERS (50),
# BOTS_PER_KIND (250), POW_BITS (8),
# CONCURRENCY (256), START_IN (15), PAY_WINDOW_SECS (60), GATEWAY_PORT (8080), WRITER_PORT
# (8081; the demo's stand-in login for the buyer's page on GATEWAY_PORT + 5), PROFILE (release; the test command runs a small sale with PROFILE=debug, reusing the
# binaries its tests built).
# The deployment (defaults: one Redis, one gateway, one order writer):
#   REDIS_URL  the Redis of the sale: the stack's single Redis (SECKILL_REDIS_URL), or a Redis
#              Cluster, e.g. "$SECKILL_REDIS_CLUSTER_URL" after `e2e/stack.sh up cluster`
#   GATEWAYS   gateway processes (1): the Nth listens on GATEWAY_PORT + 10 x (N - 1); the crowd
#              spreads its requests over all of them, round robin, as an L4 balancer would
#   WRITERS    order writers (1 or 2): two split the topic's partitions (`serve --partitions`
#              0,1 and 2,3), the second on WRITER_PORT + 10; each gateway's result queries go
#              to both
#   BUCKETS    the campaign's stock buckets (1): above 1, `buckets = BUCKETS` in its file
# The rest of the shop: a shop route (demo-login's /shop page) on each gateway, and one client
# reading it every 10 ms for the whole run; the report gives its p50/p99 and errors before the
# window opens, during the tokens and the burst, and after (target: p99 during <= 3x before).
#   SHED_AT_LAG_MS  the gateways' [sale] shed_at_lag_ms (conf/server.toml's, 0: off): the sale's
#              costly endpoints answer TRY_LATER while the gateway's threads run this late, so the
#              shop keeps its latency; a second client reads the shop page straight (no gateway)
#              beside the first, the floor of the same run
#   GATEWAY_NICE  the gateways' nice value (0; -10 as root runs them before the crowd and the stack
#              when the cores are short: a measurement of what the shop waits for)
#   GIVE_UP_PERCENT  the share of buyers who give up on a TRY_LATER or SERVICE_DEGRADED answer (0);
#              the others resend their signed order as the buyer's page does (web/app.js)
#   ADMISSION  off: the gateways' [redis] admission = false (no adaptive limit at the reservation
#              step; for a measurement beside the default only)
#   BATCH_MAX  the gateways' [redis] batch_max (conf/server.toml's; 1: a reserve.lua call per
#              order, for a run before/after batching)
# FLOOD=1: the flood instead (e2e/flood.sh, its own knobs): ten times the crowd the sale is sized
# for in its first second, the waiting room off beside on, same stock and crowd, back to back.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[[ ${FLOOD:-0} != 1 ]] || exec bash e2e/flood.sh
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
GATEWAYS=${GATEWAYS:-1}
WRITERS=${WRITERS:-1}
BUCKETS=${BUCKETS:-1}
export BUCKETS
[[ $GATEWAYS =~ ^[1-9]$ ]] || { echo "demo: GATEWAYS must be 1 to 9" >&2; exit 2; }
[[ $WRITERS == 1 || $WRITERS == 2 ]] || { echo "demo: WRITERS must be 1 or 2" >&2; exit 2; }

log() { printf '%s demo: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

log "bringing the stack up"
# shellcheck source=e2e/lib.sh
source e2e/lib.sh
require_rust # the one thing not installed here: it says how to get it
# The servers down now are started for the demo and left running for its report: said at the end.
mapfile -t STARTED < <(bash e2e/stack.sh stopped redis postgres kafka)
bash e2e/stack.sh up
# shellcheck disable=SC1091
. .stack/env
# The sale's Redis; e2e/lib.sh writes it into every conf file. STACK_REDIS_URL: the single one,
# where earlier demos' keys may be (sales_cleanup).
STACK_REDIS_URL=$SECKILL_REDIS_URL
SECKILL_REDIS_URL=${REDIS_URL:-$SECKILL_REDIS_URL}
export SECKILL_REDIS_URL

log "building $PROFILE binaries"
# shellcheck source=e2e/page.sh
source e2e/page.sh
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
  sales_cleanup end sale "$ID"
}
trap cleanup EXIT

# The window opens START_IN seconds from now: the crowd gets its tokens, then idles until the
# gateway's clock says open (its early birds knock before).
STARTS_AT=$(date -u -d "+$START_IN seconds" +%Y-%m-%dT%H:%M:%SZ)
sales_cleanup start sale "$ID"
log "creating database, topic and campaign $ID (stock $STOCK, opens $STARTS_AT)"
sale_create "$RUN" "$ID" "$STOCK" "$STARTS_AT" "$WRITER_PORT" "$BIN"
# The audit (order-writer campaign audit, docs/operations.md "Audit"): the crowd comes from one
# loopback address, so addresses say nothing here; devices do.
printf '\n[audit]\nexempt = ["127.0.0.0/8"]\n' >>"$RUN/order-writer.toml"
OW=("$BIN/order-writer" --conf "$RUN/order-writer.toml")

# The crowd's arguments for every process it watches and scrapes.
CROWD=()
# The audit's and the real sale's report's: each gateway's access log and metrics.
AUDIT_INPUTS=()
GATEWAY_METRICS=()
log "starting $WRITERS order writer(s) and $GATEWAYS gateway(s)"
if ((WRITERS == 1)); then
  "${OW[@]}" serve >"$RUN/order-writer.log" 2>&1 &
  PIDS+=($!)
  CROWD+=(--process "order-writer=$!")
  WRITER_PORTS=("$WRITER_PORT")
else
  # The second writer: the same file on its own ports; each consumes half of the partitions.
  WRITER_PORTS=("$WRITER_PORT" "$((WRITER_PORT + 10))")
  sed -e "s#^listen = \"127.0.0.1:$WRITER_PORT\"#listen = \"127.0.0.1:${WRITER_PORTS[1]}\"#" \
    -e "s#^listen = \"127.0.0.1:$((WRITER_PORT + 1000))\"#listen = \"127.0.0.1:$((WRITER_PORTS[1] + 1000))\"#" \
    "$RUN/order-writer.toml" >"$RUN/order-writer-2.toml"
  "${OW[@]}" serve --partitions 0,1 >"$RUN/order-writer.log" 2>&1 &
  PIDS+=($!)
  CROWD+=(--process "order-writer=$!")
  "$BIN/order-writer" --conf "$RUN/order-writer-2.toml" serve --partitions 2,3 >"$RUN/order-writer-2.log" 2>&1 &
  PIDS+=($!)
  CROWD+=(--process "order-writer-2=$!")
fi
# The demo's stand-in shop login, so a person can buy on the page by hand during the sale.
LOGIN_PORT=$((GATEWAY_PORT + 5))
"$BIN/demo-login" --listen "127.0.0.1:$LOGIN_PORT" >"$RUN/demo-login.log" 2>&1 &
PIDS+=($!)
UPSTREAMS=""
for i in "${!WRITER_PORTS[@]}"; do
  log_name=$( ((i == 0)) && echo order-writer || echo "order-writer-$((i + 1))")
  wait_port "$log_name" "${WRITER_PORTS[$i]}" "$RUN/$log_name.log"
  log "$log_name http://127.0.0.1:${WRITER_PORTS[$i]}  metrics :$((WRITER_PORTS[i] + 1000))  (log $RUN/$log_name.log)"
  CROWD+=(--metrics "$log_name=http://127.0.0.1:$((WRITER_PORTS[i] + 1000))/metrics")
  UPSTREAMS+="${UPSTREAMS:+, }\"127.0.0.1:${WRITER_PORTS[$i]}\""
done
for n in $(seq 1 "$GATEWAYS"); do
  name=$( ((n == 1)) && echo gateway || echo "gateway-$n")
  port=$((GATEWAY_PORT + 10 * (n - 1)))
  gateway_conf "$RUN" "$name" "$port" "$ID" "$WRITER_PORT"
  sed -i "s#^upstreams = .*#upstreams = [$UPSTREAMS]#" "$RUN/$name.toml"
  # The first batch_max is [redis]'s ([kafka] has one too).
  [[ -z "${BATCH_MAX:-}" ]] || sed -i "0,/^batch_max = /s#^batch_max = .*#batch_max = $BATCH_MAX#" "$RUN/$name.toml"
  [[ ${ADMISSION:-on} != off ]] || sed -i "0,/^batch_wait_us = /s#^\(batch_wait_us = .*\)#\1\nadmission = false#" "$RUN/$name.toml"
  [[ -z "${SHED_AT_LAG_MS:-}" ]] || sed -i "s#^shed_at_lag_ms = .*#shed_at_lag_ms = $SHED_AT_LAG_MS#" "$RUN/$name.toml"
  # Each order request's client, device and answer, for the audit (JSON lines; a queue that
  # holds the whole burst).
  printf '\n[access_log]\noutput = "%s"\nformat = "json"\nqueue = 2000000\n' "$RUN/$name-access.json" >>"$RUN/$name.toml"
  AUDIT_INPUTS+=(--access-log "$RUN/$name-access.json")
  GATEWAY_METRICS+=(--gateway-metrics "http://127.0.0.1:$((port + 1000))/metrics")
  demo_login_route "$RUN/$name.toml" "$LOGIN_PORT"
  # -- the rest of the shop during the sale --
  demo_shop_route "$RUN/$name.toml" "$LOGIN_PORT"
  # -- end of the shop --
  nice -n "${GATEWAY_NICE:-0}" "$BIN/gateway" --conf "$RUN/$name.toml" --lua-dir "$ROOT/lua" >"$RUN/$name.log" 2>&1 &
  PIDS+=($!)
  CROWD+=(--gateway "http://127.0.0.1:$port" --process "$name=$!")
  CROWD+=(--metrics "$name=http://127.0.0.1:$((port + 1000))/metrics")
  wait_port "$name" "$port" "$RUN/$name.log"
  log "$name http://127.0.0.1:$port  metrics :$((port + 1000))  (log $RUN/$name.log)"
done
if [[ $SECKILL_REDIS_URL == redis-cluster://* ]]; then
  for pid in $(stack_pid cluster); do CROWD+=(--process "redis-server-$pid=$pid"); done
else
  CROWD+=(--process "redis-server=$(stack_pid redis)")
fi
wait_port demo-login "$LOGIN_PORT" "$RUN/demo-login.log"
log "the buyer's page: http://127.0.0.1:$GATEWAY_PORT/seckill/$ID/  (sign in first with the demo's stand-in login: http://127.0.0.1:$GATEWAY_PORT/login?next=/seckill/$ID/)"
log "redis $(redacted_url "$SECKILL_REDIS_URL")  postgres $(redacted_url "$(sale_db_url "$ID")")  kafka $SECKILL_KAFKA_BROKER"

log "the sale: $USERS users x $REQUESTS_PER_USER requests, $CONCURRENCY in flight, stock $STOCK"
status=0
HOT_USERS=${HOT_USERS:-50}
BOTS_PER_KIND=${BOTS_PER_KIND:-250}
"$BIN/seckill-load" "${CROWD[@]}" --campaign "$ID" \
  --users "$USERS" --requests-per-user "$REQUESTS_PER_USER" --concurrency "$CONCURRENCY" \
  --hot-users "$HOT_USERS" --bots-per-kind "$BOTS_PER_KIND" \
  --give-up-percent "${GIVE_UP_PERCENT:-0}" \
  --writer "http://127.0.0.1:$WRITER_PORT" --close-wait-secs "$((PAY_WINDOW_SECS + 60))" \
  --process "postgres=$(stack_pid postgres)" --process "kafka=$(stack_pid kafka)" \
  --pg-url "$(sale_db_url "$ID")" --redis-url "$SECKILL_REDIS_URL" \
  --shop "http://127.0.0.1:$GATEWAY_PORT/shop" --shop-direct "http://127.0.0.1:$LOGIN_PORT/shop" \
  --json "$RUN/report.json" --html "$RUN/report.html" || status=$?

log "reconciliation"
"${OW[@]}" reconcile "$ID" || status=$?
order_events_check "$ID" "$RUN"
log "order events ($ID's topic reservations.$ID.order-events): $EVENTS"
[[ $EVENTS_OK == 0 ]] || { log "the order events do not match the orders' transitions"; status=1; }

# What the campaign left, read back: the audit of its winners and crowd, and the real sale's
# report (PostgreSQL, Redis, reconciliation, audit, the gateways' metrics), then the judge: the
# hot users' and bots' devices flagged, no other buyer's, and the two reports agree.
log "audit and the real sale's report"
sleep 0.5 # the access logs' last lines (written every 100 ms)
"${OW[@]}" campaign audit "$ID" "${AUDIT_INPUTS[@]}" >"$RUN/audit.txt" || status=$?
"${OW[@]}" campaign audit "$ID" "${AUDIT_INPUTS[@]}" --json >"$RUN/audit.json" || status=$?
head -n 12 "$RUN/audit.txt"
"${OW[@]}" campaign report "$ID" --out "$RUN/sale-report.html" --json "$RUN/sale-report.json" \
  "${AUDIT_INPUTS[@]}" "${GATEWAY_METRICS[@]}" || status=$?
python3 e2e/sale_judge.py "$RUN/audit.json" "$RUN/report.json" "$RUN/sale-report.json" \
  --users "$USERS" --hot-users "$HOT_USERS" --bots-per-kind "$BOTS_PER_KIND" || status=$?
# The SERVICE_DEGRADED answers against the stack's Redis's forks to save or rewrite its
# append-only file (where a heavy sale's mostly come from: docs/benchmarks-journal.md).
REDIS_LOG="$ROOT/.stack/redis/redis.log"
if [[ -f $REDIS_LOG ]]; then
  for g in "$RUN"/gateway*.log; do
    { python3 e2e/bench/py/degraded_in_forks.py "$g" "$REDIS_LOG" || echo "(could not read the logs)"; } |
      while IFS= read -r line; do
        log "$(basename "$g" .log): $line"
      done
  done
fi
# The demo's report links the real sale's, beside it.
sed -i 's#</h1>#</h1><p><a href="sale-report.html">The real sale'"'"'s report</a>: the same sale as the campaign left it in PostgreSQL, Redis, the reconciliation, the audit and the gateways'"'"' metrics.</p>#' "$RUN/report.html"
log "report: $RUN/report.json, $RUN/report.html; the real sale's: $RUN/sale-report.html; audit: $RUN/audit.txt"
if ((${#STARTED[@]})); then
  log "left running: ${STARTED[*]} (started for this demo; data under .stack/). Stop them with: bash e2e/stack.sh down"
else
  log "the stack's servers were running before the demo and are left running"
fi
exit "$status"
