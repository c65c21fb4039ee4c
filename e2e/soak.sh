#!/usr/bin/env bash
# Hours of traffic, shortened: the shop through the gateway all along, a sale every SALE_EVERY
# seconds (token, burst, drain, pay, close, end), the gateway reloaded every minute, and one
# network fault per sale; every process, Redis and PostgreSQL sampled every 10 s. It fails on a
# lost promise (a sale's invariants, its reconcile), on a shop error, or on growth: a line
# fitted through the samples taken between two sales must rise less than its bound
# (e2e/crowd/src/soak/mod.rs BOUNDS: a floor plus a rate per hour, per kind of series).
#
#   bash e2e/soak.sh                      # SOAK_MINUTES=60, release binaries
#   SOAK_MINUTES=3 PROFILE=debug bash e2e/soak.sh   # what the test command runs
#
# Its own stack (like e2e/faults.sh): Redis SOAK_REDIS_PORT (6790), PostgreSQL SOAK_PG_PORT
# (5790), Kafka SOAK_KAFKA_PORT (19390), Toxiproxy SOAK_TOXIPROXY_PORT (18574) with its proxies
# on SOAK_PROXY_PORT + 1..4 (26500: the gateway to Redis and to the order writer, the writer to
# PostgreSQL and to Redis), under .stack/soak; the gateway on SOAK_GATEWAY_PORT (18780), the
# order writer + 1, the shop (demo-login's /shop page) + 5, their /metrics + 1000. Stopped at the
# end; its sales' database and topic stay for the report until the next soak.
# One long-lived gateway, order writer and shop; each sale is a campaign of its own in one
# database and topic: its file added and published, the gateway reloaded to sell it, the crowd
# (seckill-load: USERS users x 2 on STOCK units, PAY_WINDOW_SECS to pay, a resale wave), the
# fault 0.1 s into its burst, reconcile, then its end: its file removed, the gateway reloaded, its
# Redis keys deleted (PostgreSQL keeps its rows). The faults in turn: the gateway's Redis 50 ms
# ± 20 late, the writer's PostgreSQL black-holed 5 s, the gateway's Redis connections reset,
# the writer's Redis capped to 64 KB/s, the result queries 400 ms late, the writer paused 3 s
# (SIGSTOP), the gateway cut from Redis 2 s.
# The report: .stack/soak/run/report.{txt,json,html} (every series charted, its fitted line).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SOAK_MINUTES=${SOAK_MINUTES:-60}
[[ $SOAK_MINUTES =~ ^[1-9][0-9]*$ ]] || { echo "soak: SOAK_MINUTES must be a whole number of minutes" >&2; exit 2; }
# A sale every 3 minutes; in a run under 10 minutes, every minute (three sales in three).
SALE_EVERY=${SALE_EVERY:-$((SOAK_MINUTES >= 10 ? 180 : 60))}
PROFILE=${PROFILE:-release}
USERS=${USERS:-600}
STOCK=${STOCK:-150}
START_IN=${START_IN:-6}
export PAY_WINDOW_SECS=${PAY_WINDOW_SECS:-8}
GW_PORT=${SOAK_GATEWAY_PORT:-18780}
WRITER_PORT=$((GW_PORT + 1))
SHOP_PORT=$((GW_PORT + 5))

log() { printf '%s soak: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

export SECKILL_STACK_DIR="$ROOT/.stack/soak/stack"
export SECKILL_REDIS_PORT=${SOAK_REDIS_PORT:-6790}
export SECKILL_PG_PORT=${SOAK_PG_PORT:-5790}
export SECKILL_KAFKA_PORT=${SOAK_KAFKA_PORT:-19390}
export SECKILL_TOXIPROXY_PORT=${SOAK_TOXIPROXY_PORT:-18574}
NET_PORT=${SOAK_PROXY_PORT:-26500}
LINKS=(gw-redis gw-writer writer-pg writer-redis)
# shellcheck source=e2e/lib.sh
source e2e/lib.sh
require_rust
TOXI="http://127.0.0.1:$SECKILL_TOXIPROXY_PORT"
# shellcheck source=e2e/stack/toxics.sh
source e2e/stack/toxics.sh
# shellcheck source=e2e/page.sh
source e2e/page.sh
log "building $PROFILE binaries"
build_all "$PROFILE"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$([[ "$PROFILE" == release ]] && echo release || echo debug)"

RUN="$ROOT/.stack/soak/run"
PIDS=()
cleanup() {
  local pid
  touch "$RUN/stop" 2>/dev/null || true
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  bash e2e/stack.sh down redis postgres kafka toxiproxy >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "bringing the soak's stack up under .stack/soak"
bash e2e/stack.sh down >/dev/null 2>&1 || true
bash e2e/stack.sh up redis postgres kafka toxiproxy
# shellcheck disable=SC1091
. "$SECKILL_STACK_DIR/env"
ID="soak$(date -u +%Y%m%d%H%M%S)"
sales_cleanup start soak "$ID"
rm -rf "$RUN"
mkdir -p "$RUN/sales"
SECKILL_GATEWAY_KEY=$(random_key soak-gateway-key-)
SECKILL_PAYMENT_KEY=$(random_key soak-payment-key-)
export SECKILL_GATEWAY_KEY SECKILL_PAYMENT_KEY
edge_keys soak

# --- the links, the long-lived processes ------------------------------------------------------

link_port() { # link
  local i
  for i in "${!LINKS[@]}"; do [[ ${LINKS[$i]} == "$1" ]] && echo $((NET_PORT + i + 1)); done
}
links() {
  local l up
  toxi POST /reset
  for l in "${LINKS[@]}"; do
    case $l in
      *-redis) up="127.0.0.1:$SECKILL_REDIS_PORT" ;;
      gw-writer) up="127.0.0.1:$WRITER_PORT" ;;
      writer-pg) up="127.0.0.1:$SECKILL_PG_PORT" ;;
    esac
    toxi POST /proxies "{\"name\":\"$l\",\"listen\":\"127.0.0.1:$(link_port "$l")\",\"upstream\":\"$up\"}"
  done
}

# The soak's database and topic (sale_create's, its first campaign the id itself, never sold),
# then the writer's and the gateway's confs through the proxies.
setup() {
  local r="127.0.0.1:$SECKILL_REDIS_PORT"
  sale_create "$RUN" "$ID" 1 "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$WRITER_PORT" "$BIN" >"$RUN/setup.log" 2>&1 ||
    { cat "$RUN/setup.log"; return 1; }
  rm "$RUN/campaigns/$ID.toml"
  sed -i -e "s#^redis_url = \"redis://$r\"#redis_url = \"redis://127.0.0.1:$(link_port writer-redis)\"#" \
    -e "s#^postgres_url = \"\\(.*\\)@127.0.0.1:$SECKILL_PG_PORT/#postgres_url = \"\\1@127.0.0.1:$(link_port writer-pg)/#" \
    "$RUN/order-writer.toml"
  gateway_conf "$RUN" gateway "$GW_PORT" "$ID" "$WRITER_PORT"
  sed -i -e "s#^url = \"redis://$r\"#url = \"redis://127.0.0.1:$(link_port gw-redis)\"#" \
    -e "s#^upstreams = \\[\"127.0.0.1:$WRITER_PORT\"\\]#upstreams = [\"127.0.0.1:$(link_port gw-writer)\"]#" \
    "$RUN/gateway.toml"
  demo_shop_route "$RUN/gateway.toml" "$SHOP_PORT"
  grep -q "127.0.0.1:$(link_port gw-redis)" "$RUN/gateway.toml" &&
    grep -q "127.0.0.1:$(link_port writer-pg)" "$RUN/order-writer.toml" ||
    { echo "soak: the confs do not name the proxies" >&2; return 1; }
}

start() { # name log command...: sets PID
  local name=$1 out=$2
  shift 2
  "$@" >"$out" 2>&1 &
  PID=$!
  PIDS+=("$PID")
}

links
setup
start order-writer "$RUN/order-writer.log" "$BIN/order-writer" --conf "$RUN/order-writer.toml" serve
WRITER_PID=$PID
start shop "$RUN/shop.log" "$BIN/demo-login" --listen "127.0.0.1:$SHOP_PORT"
SHOP_PID=$PID
start gateway "$RUN/gateway.log" "$BIN/gateway" --conf "$RUN/gateway.toml" --lua-dir "$ROOT/lua"
GW_PID=$PID
wait_port order-writer "$WRITER_PORT" "$RUN/order-writer.log"
wait_port shop "$SHOP_PORT" "$RUN/shop.log"
wait_port gateway "$GW_PORT" "$RUN/gateway.log"
# The writer's PostgreSQL pools' size: its connections are judged within it (a pool fills to its
# size when PostgreSQL stalls, as in the second sale's fault, and keeps them).
PG_POOL=$(curl -s --max-time 5 "http://127.0.0.1:$((WRITER_PORT + 1000))/metrics" |
  awk '$1 == "seckill_writer_pg_connections_max" { print $2 }')
[[ $PG_POOL =~ ^[0-9]+$ ]] || { echo "soak: the order writer's /metrics does not say its pools' size" >&2; exit 1; }
echo warmup >"$RUN/phase"
start soak-watch "$RUN/watch.log" "$BIN/soak-watch" --out "$RUN" \
  --process "gateway=$GW_PID" --process "order-writer=$WRITER_PID" --process "shop=$SHOP_PID" \
  --peer "redis=$(link_port gw-redis)" --peer "writer-redis=$(link_port writer-redis)" \
  --peer "pg=$(link_port writer-pg)" --peer "results=$(link_port gw-writer)" \
  --peer "kafka=$SECKILL_KAFKA_PORT" --peer "shop=$SHOP_PORT" \
  --redis-url "$SECKILL_REDIS_URL" --database "sale_$ID" --shop "http://127.0.0.1:$GW_PORT/shop" \
  --phase-file "$RUN/phase" --stop-file "$RUN/stop" --sales-file "$RUN/sales.txt" \
  --max-secs $((SOAK_MINUTES * 60 + 900)) \
  --pool "order-writer/conns:pg=$PG_POOL" --pool "pg/connections=$PG_POOL"
WATCH_PID=$PID

# The gateway reloaded every minute (beside the reloads that add and remove each sale).
reloads() {
  local end=$1
  while ((SECONDS < end)) && [[ ! -e $RUN/stop ]]; do
    sleep 60
    kill -HUP "$GW_PID" 2>/dev/null || return 0
    echo "$(date -u +%H:%M:%S) reload" >>"$RUN/reloads.log"
  done
}

# --- one sale ---------------------------------------------------------------------------------

FAULTS=("gw-redis latency50 3" "writer-pg timeout 5" "gw-redis reset 1" "writer-redis bandwidth 2"
  "gw-writer latency400 2" "writer pause 3" "gw-redis partition 2")

fault() { # link kind secs
  if [[ $1 == writer ]]; then
    kill -STOP "$WRITER_PID"
    sleep "$3"
    kill -CONT "$WRITER_PID"
  else
    toxic_on "$1" "$2"
    sleep "$3"
    toxic_off "$1" "$2"
  fi
}

# Waits (60 s at most) until the crowd's log says TEXT.
wait_crowd() { # log pid text
  for _ in $(seq 1 600); do
    grep -q "$3" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Waits (the pay window + 60 s at most) until campaign CID has no order pending payment and every
# closed one's stock is back in Redis.
closed() { # cid
  local open="SELECT count(*) FROM orders WHERE campaign_id = '$1' AND (status = 'PENDING_PAYMENT' OR (status = 'CLOSED' AND NOT redis_released))"
  for _ in $(seq 1 $((2 * (PAY_WINDOW_SECS + 60)))); do
    [[ $(psql "$(sale_db_url "$ID")" -tAc "$open" 2>/dev/null) == 0 ]] && return 0
    sleep 0.5
  done
  return 1
}

# Sale N: its campaign added and published, the gateway reloaded, the crowd with the fault 0.1 s
# into its burst; once its orders are all paid or closed, reconcile, then its end. Appends its verdict line to RUN/sales.txt.
sale() { # n
  local n=$1 cid="${ID}n$1" dir="$RUN/sales/$1" f rc=0 diffs found keys
  read -r -a f <<<"${FAULTS[$(((n - 1) % ${#FAULTS[@]}))]}"
  mkdir -p "$dir"
  campaign_toml "$cid" "$STOCK" "$(date -u -d "+$START_IN seconds" +%Y-%m-%dT%H:%M:%SZ)" >"$RUN/campaigns/$cid.toml"
  "$BIN/order-writer" --conf "$RUN/order-writer.toml" campaign publish "$cid" >"$dir/publish.log" 2>&1
  kill -HUP "$GW_PID"
  "$BIN/seckill-load" --gateway "http://127.0.0.1:$GW_PORT" --campaign "$cid" --users "$USERS" \
    --requests-per-user 2 --concurrency 64 --hot-users 5 --bots-per-kind 10 --early-birds 10 \
    --writer "http://127.0.0.1:$WRITER_PORT" --close-wait-secs $((PAY_WINDOW_SECS + 40)) \
    --resale-users 50 --settle-secs 60 --pg-url "$(sale_db_url "$ID")" --redis-url "$SECKILL_REDIS_URL" \
    --json "$dir/report.json" >"$dir/crowd.log" 2>&1 &
  local crowd=$!
  if wait_crowd "$dir/crowd.log" "$crowd" "burst started"; then
    sleep 0.1
    fault "${f[@]}" >>"$dir/fault.log" 2>&1 || echo "the fault could not be made" >>"$dir/fault.log"
  fi
  wait "$crowd" || rc=$?
  found=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); c=r['codes']; print(f\"queued {c.get('QUEUED',0)}, orders at the crowd's end {r['checks']['orders']}, lost {len(r['checks']['queued_without_outcome'])}\")" "$dir/report.json" 2>/dev/null || echo "no report")
  [[ $found == queued\ [1-9]* ]] || rc=1 # a sale that sold nothing proves nothing
  # Its end, once every order is paid or closed and released (the closer's releases write to its
  # keys): the gateway stops selling it, its Redis keys go (its rows stay in PostgreSQL).
  closed "$cid" || { rc=1; found+="; orders still open at its end"; }
  "$BIN/order-writer" --conf "$RUN/order-writer.toml" reconcile "$cid" >"$dir/reconcile.log" 2>&1 || rc=1
  diffs=$(sed -n 's/^  differences: //p' "$dir/reconcile.log" | tail -n 1)
  [[ $diffs == 0 ]] || rc=1
  rm "$RUN/campaigns/$cid.toml"
  kill -HUP "$GW_PID"
  keys=$(redis-cli -p "$SECKILL_REDIS_PORT" --scan --pattern "*{$cid[}:/]*")
  xargs -r -n 100 redis-cli -p "$SECKILL_REDIS_PORT" del <<<"$keys" >/dev/null
  keys=$(grep -c . <<<"$keys" || true)
  printf '%s sale %d (%s: %s %s %s s): %s; reconcile differences %s; %s keys deleted at its end\n' \
    "$([[ $rc == 0 ]] && echo PASS || echo FAIL)" "$n" "$cid" "${f[0]}" "${f[1]}" "${f[2]}" "$found" "${diffs:-?}" "$keys" >>"$RUN/sales.txt"
  log "$(tail -n 1 "$RUN/sales.txt")"
}

# --- run ----------------------------------------------------------------------------------------

END=$((SECONDS + SOAK_MINUTES * 60))
log "$SOAK_MINUTES min: a sale every $SALE_EVERY s ($USERS users x 2 on $STOCK units), the gateway reloaded every minute, samples every 10 s"
reloads "$END" &
PIDS+=("$!")
n=0
while ((SECONDS < END)); do
  n=$((n + 1))
  next=$((SECONDS + SALE_EVERY))
  echo sale >"$RUN/phase"
  sale "$n"
  echo quiet >"$RUN/phase"
  while ((SECONDS < next && SECONDS < END)); do sleep 1; done
done
touch "$RUN/stop"
status=0
wait "$WATCH_PID" || status=$?
cat "$RUN/report.txt"
log "report: $RUN/report.html"
exit "$status"
