#!/usr/bin/env bash
# Gateway benchmark, in one run, same load tool (wrk), threads, connections and duration:
#
#   (a) reservations/s: the whole client protocol's order, POST /seckill/<c>/<path>/order with a
#       campaign token, device, timestamp, nonce and request signature, every request a distinct
#       buyer (signed beforehand by e2e/bench/src/bin/presign.rs, after a captcha and token per buyer;
#       its tokens/s is printed too), stock larger than the run, answered 202 QUEUED by the
#       gateway itself, which produces each record to a topic of its own on the stack's broker
#       in the background (the produce's CPU is in the gateway's figures);
#   (b) sold-out short circuit/s: an order on a sold-out campaign (local flag, no Redis);
#   (g) the same, for (a)'s signed orders sent to the sold-out campaign: the same request bytes
#       (token, device, timestamp, nonce, signature headers) answered SOLD_OUT, the peer of (f);
#   (f) the same signed orders as (a) with a forged signature: BAD_SIGNATURE after every check
#       but the script (token, path, timestamp, the HMAC), the cost of a refused bot request;
#   (h) one of those tokens replayed with forged signatures (a bot with one stolen token);
#   (t) the token endpoint with the proof of work: captcha + token per buyer (presign, which
#       solves each challenge as a client would) at pow_bits 8 and 16, tokens/s and the
#       gateway's CPU per token (the client's hashing shares the same two cores);
#   (a1) the same as (a) with a second gateway, the same conf but `batch_max = 1` (a reserve.lua
#       call per order, the path before batching), on its own signed orders, in the same run:
#       (a)/(a1) is what batching gives (reservations/s, p99, CPU per reservation);
#   (c) the ceiling of (a)'s Redis step: redis-benchmark EVALSHA of lua/reserve.lua, with its
#       nonce key;
#   (c1), (c32) the same script's ceiling through the project's client (target/release/
#       reserve-ceiling: one master, $CONNECTIONS connections, distinct buyers with nonces) at 1
#       and 32 orders per call, with Redis's script µs and process CPU µs per reservation;
#       (c32)/(c) is what batching raises the Redis step's ceiling to (target >= 2.5);
#   (r1), (r100) releases of lua/release.lua, 1 and 100 per call, one call at a time on one
#       connection (the order writer's closer); (r100)/(r1) target >= 10;
#   with BASE_REV=<git revision>, (c1), (c32), (r1) and (r100) again with that revision's lua/
#       (e.g. the parent commit's scripts beside today's, on the same machine minute);
#   (d) the peer of (b): Debian nginx answering a static `return 410`;
#   (e) the floor under (b): the same Pingora server answering a fixed 410 of the same shape
#       from request_filter with no checks (e2e/bench/src/bin/pingora_floor.rs), in the gateway's
#       layout ($THREADS services of one thread on SO_REUSEPORT, `[server] workers`), so the gap
#       between (b) and (d) splits into Pingora's share, (e)/(d), and ours, (b)/(e);
#   (e1) the same floor in the old layout, one service of $THREADS threads (what (e) was
#       before `[server] workers`), so the layouts compare in one run;
#
# plus (b) and (e) again, alternating, ROUNDS times, with the medians of their ratios (answers/s
# and CPU per answer), p50/p99 of (a) and (b), the gateway's peak RSS (VmHWM) during a run at
# 1,000 connections beside the floor's (and the gateway's over the whole run), and the CPU time per request of each server process in (a) and (b) (gateway,
# Redis, the nginx upstream; wrk is left out), which shows where the two shared cores go, and
# the floor's own in (e).
# Targets: (b) >= 1.0 x (d); (b) >= 0.9 x (e) and the gateway's CPU per sold-out answer <= 1.5 x
# the floor's (medians of the alternating rounds); (b) >= 1.0 x (e1); (a) >= 0.6 x (b); RSS at
# 1,000 connections < 64 MiB.
# Ratios hold across machines, absolute numbers don't.
#
# Usage: e2e/bench/gateway.sh          Env: DURATION (10s), THREADS (2), CONNECTIONS (100),
#                                           ROUNDS (3: the alternating (b)/(e) pairs),
#                                           PROFILE (a run's letter, e.g. f: a perf profile of
#                                           the gateway during that run, its top symbols printed),
#                                           BUYERS (150000: signed orders for (a), at least
#                                           its requests), SECKILL_REDIS_URL (the stack's Redis),
#                                           BASE_REV (none: the scripts to measure beside today's),
#                                           QUICK (set: only (a), (a1) and (b), with the gateway's
#                                           CPU by thread, then stop), PERF_DATA (a file to keep
#                                           PROFILE's perf.data in, for perf report --children),
#                                           BASE_GATEWAY (another gateway binary, e.g. the parent
#                                           commit's: (a0), (a) through it, in the same run),
#                                           PERF_CALL_GRAPH (PROFILE's stacks: fp, or dwarf for
#                                           whole stacks through the frame-pointer-less code),
#                                           FLOOR (the floor's binary, by default
#                                           target/release/pingora_floor: e.g. one built with
#                                           another profile, beside GATEWAY built the same way),
#                                           GATEWAY (the binary of (a), (a1) and the rest; by
#                                           default target/release/gateway: swap the two to
#                                           run them in the other order)
# Needs: the stack's Redis (e2e/stack.sh up), wrk, nginx (nginx-light), redis-benchmark.
# shellcheck source=e2e/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_env SECKILL_REDIS_URL
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-100}
ROUNDS=${ROUNDS:-3}
bench_tools wrk:wrk nginx:nginx-light redis-benchmark:redis-tools -- redis-cli python3
bench_redis
build_all release

bench_work gw-bench
GW_PID=""
GW1_PID=""
GW0_PID=""
NGINX_PID=""
RUN=$(date +%s)$$
OPEN="bench-open-$RUN"
SOLD="bench-sold-$RUN"
RB="bench-rb-$RUN"
BUYERS=${BUYERS:-150000}
# The edge's keys for this run (the gateway's [defense]); the login key also signs the buyers'
# login JWTs in presign.
edge_keys bench

bench_cleanup() {
  [[ -n "$NGINX_PID" ]] && kill "$NGINX_PID" 2>/dev/null || true
  for c in "$OPEN" "$SOLD" "$RB" "$POW8" "$POW16"; do
    # shellcheck disable=SC2046
    "${RCLI[@]}" del $(campaign_keys "$c") >/dev/null 2>&1 || true
  done
}

GW_PORT=$(free_port)
NGINX_410=$(free_port)
NGINX_202=$(free_port)
FLOOR_PORT=$(free_port)
GATEWAY=${GATEWAY:-target/release/gateway}
FLOOR=${FLOOR:-target/release/pingora_floor}

# --- nginx: the static 410 peer (d) and the trivial upstream (202) for (a) ---
mkdir -p "$WORK/nginx/tmp"
fill e2e/bench/conf/nginx.conf WORKERS="$THREADS" DIR="$WORK/nginx" SERVERS="  default_type application/json;
  server { listen 127.0.0.1:$NGINX_410; location / { return 410 '{\"code\":\"SOLD_OUT\",\"message\":\"sold out\",\"request_id\":\"\"}'; } }
  server { listen 127.0.0.1:$NGINX_202; location / { return 202 '{\"code\":\"QUEUED\"}'; } }" >"$WORK/nginx/nginx.conf"
nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
for _ in $(seq 50); do [[ -s "$WORK/nginx/nginx.pid" ]] && break; sleep 0.1; done
NGINX_PID=$(cat "$WORK/nginx/nginx.pid")

# --- Redis: publish the campaigns with lua/publish.lua (the same script the order writer runs) ---
publish() { # campaign total
  # shellcheck disable=SC2046
  "${RCLI[@]}" --eval lua/publish.lua $(campaign_keys "$1") , 1 "$2" 1 SKU-BENCH 100 1 >/dev/null
}
publish "$OPEN" 100000000
publish "$SOLD" 0
publish "$RB" 100000000

# --- the gateway (release) ---
mkdir -p "$WORK/conf/campaigns"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/conf/key"
POW8="bench-pow8-$RUN"
POW16="bench-pow16-$RUN"
bench_campaign "$WORK/conf/campaigns/$OPEN.toml" "$OPEN" 100000000 0
bench_campaign "$WORK/conf/campaigns/$SOLD.toml" "$SOLD" 0 0
bench_campaign "$WORK/conf/campaigns/$POW8.toml" "$POW8" 100000000 8
bench_campaign "$WORK/conf/campaigns/$POW16.toml" "$POW16" 100000000 16
fill e2e/bench/conf/gateway.toml PORT="$GW_PORT" WORKERS="$THREADS" REDIS_URL="$REDIS_URL" UPSTREAM_PORT="$NGINX_202" TOPIC="bench-$RUN" \
  BROKER="${SECKILL_KAFKA_BROKER:-127.0.0.1:19092}" DEFENSE="$(defense_table)" >"$WORK/conf/server.toml"
# The topic, created the way an operator does: `order-writer topic create` (only Kafka is used).
fill e2e/bench/conf/topic-create.toml REDIS_URL="$REDIS_URL" KEY="$WORK/conf/key" TOPIC="bench-$RUN" \
  BROKER="${SECKILL_KAFKA_BROKER:-127.0.0.1:19092}" >"$WORK/ow.toml"
target/release/order-writer -c "$WORK/ow.toml" topic create
RUST_LOG=warn "$GATEWAY" --conf "$WORK/conf/server.toml" --lua-dir lua >"$WORK/gateway.log" 2>&1 &
GW_PID=$!
bench_started "$GW_PID"
# (a1)'s gateway: the same conf, one reserve.lua call per order.
GW1_PORT=$(free_port)
sed -e "s/^listen = .*/listen = \"127.0.0.1:$GW1_PORT\"/" -e 's/^pool_size = 4$/pool_size = 4\nbatch_max = 1/' \
  "$WORK/conf/server.toml" >"$WORK/conf/server1.toml"
RUST_LOG=warn "$GATEWAY" --conf "$WORK/conf/server1.toml" --lua-dir lua >"$WORK/gateway1.log" 2>&1 &
GW1_PID=$!
bench_started "$GW1_PID"
# (a0)'s gateway: the same conf through another build (BASE_GATEWAY), e.g. the parent commit's.
if [[ -n "${BASE_GATEWAY:-}" ]]; then
  GW0_PORT=$(free_port)
  sed -e "s/^listen = .*/listen = \"127.0.0.1:$GW0_PORT\"/" "$WORK/conf/server.toml" >"$WORK/conf/server0.toml"
  RUST_LOG=warn "$BASE_GATEWAY" --conf "$WORK/conf/server0.toml" --lua-dir lua >"$WORK/gateway0.log" 2>&1 &
  GW0_PID=$!
  bench_started "$GW0_PID"
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GW0_PORT/" && break; sleep 0.1; done
fi
FLOOR_WORKERS=$THREADS "$FLOOR" "127.0.0.1:$FLOOR_PORT" "$THREADS" >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
bench_started "$FLOOR_PID"
# (e1): the same floor in the old layout, one service of $THREADS threads.
FLOOR1_PORT=$(free_port)
"$FLOOR" "127.0.0.1:$FLOOR1_PORT" "$THREADS" >"$WORK/floor1.log" 2>&1 &
FLOOR1_PID=$!
bench_started "$FLOOR1_PID"
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$FLOOR1_PORT/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$FLOOR_PORT/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GW_PORT/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GW1_PORT/" && break; sleep 0.1; done

# (a) and (f): the signed orders, one per buyer, each thread its own share; "bad" forges each
# signature. The rest: a plain POST (e2e/bench/wrk/plain.lua).
signed_orders_wrk "$WORK/orders.lua"

HZ=$(getconf CLK_TCK)
REDIS_PID=$("${RCLI[@]}" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
# CPU microseconds per request of each process, over the run `label` (its wrk output).
cpu_per_request() { # label before_gw before_redis before_nginx
  local n
  n=$(awk '/requests in/ {print $1}' "$WORK/$1.out")
  python3 -c "
n = max(1, $n); hz = $HZ
gw, rd, ng = ($(cpu_ticks "$GW_PID") - $2), ($(cpu_ticks "$REDIS_PID") - $3), ($(cpu_ticks $NGINX_PIDS) - $4)
f = lambda t: t * 1e6 / hz / n
print(f'{f(gw):.1f} {f(rd):.1f} {f(ng):.1f}')"
}

# CPU microseconds per answer of PIDs since TICKS (their cpu_ticks before the run LABEL).
us_per_answer() { # ticks label pid...
  local t0=$1 label=$2
  shift 2
  python3 -c "print(f'{($(cpu_ticks "$@") - $t0) * 1e6 / $HZ / max(1, $(awk '/requests in/ {print $1}' "$WORK/$label.out")):.1f}')"
}

run_wrk() { # label url [connections] [script]
  local label=$1 url=$2 conns=${3:-$CONNECTIONS} script=${4:-e2e/bench/wrk/plain.lua} perf_pid=""
  shift $(($# < 4 ? $# : 4))
  if [[ "${PROFILE:-}" == "$label" ]]; then
    perf record -q -F 1999 --call-graph "${PERF_CALL_GRAPH:-fp}" -p "$GW_PID" -o "$WORK/perf.data" -- sleep "${DURATION%s}" >/dev/null 2>&1 &
    perf_pid=$!
  fi
  wrk -t"$THREADS" -c"$conns" -d"$DURATION" -s "$script" "$url" -- "$@" >"$WORK/$label.out" 2>&1
  if [[ -n "$perf_pid" ]]; then
    wait "$perf_pid" || true
    [[ -n "${PERF_DATA:-}" ]] && cp "$WORK/perf.data" "$PERF_DATA"
    perf report -i "$WORK/perf.data" --no-children --percent-limit 0.7 --stdio -g none 2>/dev/null |
      grep -v '^#' | grep -v '^$' | head -45 >"$WORK/profile.txt" || true
  fi
  local rps p50 p99 non2xx
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/$label.out")
  p50=$(awk '/^P50_US/ {print $2}' "$WORK/$label.out")
  p99=$(awk '/^P99_US/ {print $2}' "$WORK/$label.out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$WORK/$label.out")
  echo "$rps ${p50:-0} ${p99:-0} ${non2xx:-0}"
}

echo "gateway bench: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, gateway threads=$THREADS, nginx workers=$THREADS"
# The buyers' signed orders (captcha and token each, through this gateway), then one order to
# warm up (loads the script cache), and the sold-out flag of $SOLD.
# Each reservation run has buyers of its own (other users, other nonces; the same keys sign them
# for any gateway): $WORK/orders<suffix>.tsv, and one more sent first to PORT to warm it up.
presign_for() { # suffix port
  target/release/presign --base "http://127.0.0.1:$GW_PORT" --campaign "$OPEN" --users "$((BUYERS + 1))" \
    --out "$WORK/orders$1.tsv" >"$WORK/presign$1.out"
  head -n 1 "$WORK/orders$1.tsv" >"$WORK/warm$1.tsv"
  sed -i 1d "$WORK/orders$1.tsv"
  wrk -t1 -c1 -d1s -s "$WORK/orders.lua" "http://127.0.0.1:$2" -- good 1 "$WORK/warm$1.tsv" >/dev/null 2>&1
}
presign_for "" "$GW_PORT"
cat "$WORK/presign.out"
presign_for 1 "$GW1_PORT"
# The sold-out flag of $SOLD (lib.sh), set again before each run that relies on it.
mark_sold() { sold_out_flag "http://127.0.0.1:$GW_PORT" "$SOLD" "$WORK/sold1.tsv"; }
mark_sold

NGINX_PIDS="$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')"
# Run NAME (a, a1, a0): its buyers ($WORK/orders<suffix>.tsv) against the gateway PID on PORT.
# Sets <VAR>_RPS, _P50, _P99, _NON (wrk), <VAR>_CPU_GW, _CPU_REDIS, _CPU_NGINX (per request) and
# T<VAR> (the gateway's CPU per request by thread), VAR being NAME in capitals.
reservations_run() { # name suffix pid port
  local name=$1 var=${1^^} pid=$3 g r n t0 main=$GW_PID
  GW_PID=$pid # cpu_per_request reads the gateway's ticks from GW_PID
  read -r g r n <<<"$(cpu_ticks "$pid") $(cpu_ticks "$REDIS_PID") $(cpu_ticks $NGINX_PIDS)"
  t0=$(thread_ticks "$pid")
  read -r "${var}_RPS" "${var}_P50" "${var}_P99" "${var}_NON" <<<"$(run_wrk "$name" "http://127.0.0.1:$4" \
    "$CONNECTIONS" "$WORK/orders.lua" good "$THREADS" "$WORK/orders$2.tsv")"
  printf -v "T$var" '%s' "$(thread_cpu_per_request "$t0" "$(thread_ticks "$pid")" \
    "$(awk '/requests in/ {print $1}' "$WORK/$name.out")")"
  read -r "${var}_CPU_GW" "${var}_CPU_REDIS" "${var}_CPU_NGINX" <<<"$(cpu_per_request "$name" "$g" "$r" "$n")"
  GW_PID=$main
}
reservations_run a "" "$GW_PID" "$GW_PORT"
reserved=$("${RCLI[@]}" hlen "sk:{$OPEN}:bought") # buyers holding a unit (limit 1)
reservations_run a1 1 "$GW1_PID" "$GW1_PORT"
if [[ -n "$GW0_PID" ]]; then
  presign_for 0 "$GW0_PORT"
  reservations_run a0 0 "$GW0_PID" "$GW0_PORT"
fi
read -r g r n <<<"$(cpu_ticks "$GW_PID") $(cpu_ticks "$REDIS_PID") $(cpu_ticks $NGINX_PIDS)"
mark_sold
TB0=$(thread_ticks "$GW_PID")
read -r B_RPS B_P50 B_P99 B_NON <<<"$(run_wrk b "http://127.0.0.1:$GW_PORT/seckill/$SOLD/order")"
TB=$(thread_cpu_per_request "$TB0" "$(thread_ticks "$GW_PID")" "$(awk '/requests in/ {print $1}' "$WORK/b.out")")
read -r B_CPU_GW B_CPU_REDIS B_CPU_NGINX <<<"$(cpu_per_request b "$g" "$r" "$n")"
ratio() { python3 -c "print(f'{float($1)/float($2):.2f}')"; }
# The gateway's CPU per request by thread: where (a)'s cost goes beside (b)'s.
threads_report() {
  echo "gateway CPU us per request by thread:"
  echo "  (a)  $TA"
  echo "  (a1) $TA1"
  [[ -z "$GW0_PID" ]] || echo "  (a0) $TA0"
  echo "  (b)  $TB"
}
if [[ -n "${QUICK:-}" ]]; then
  # Only (a), (a1) and (b): the reservation's cost against the sold-out answer's, by thread.
  # One row of run VAR (A, A1, A0, B): its figures as reservations_run and (b) set them.
  quick_row() { # label var
    local rps=${2}_RPS p99=${2}_P99 gw=${2}_CPU_GW redis=${2}_CPU_REDIS non=${2}_NON
    printf '%-44s %12s %10.2f %10s %10s %10s\n' "$1" "${!rps}" "$(python3 -c "print(${!p99}/1000)")" \
      "${!gw}" "${!redis}" "${!non}"
  }
  printf '\n%-44s %12s %10s %10s %10s %10s\n' "" "requests/s" "p99 ms" "gw us/req" "redis us" "non-2xx"
  quick_row "(a) reservations" A
  quick_row "(a1) the same, batch_max = 1" A1
  [[ -z "$GW0_PID" ]] || quick_row "(a0) (a) through BASE_GATEWAY" A0
  quick_row "(b) sold-out short circuit" B
  threads_report
  [[ -z "$GW0_PID" ]] || echo "gateway CPU per reservation (a)/(a0) = $(ratio "$A_CPU_GW" "$A0_CPU_GW"), (a0)/(b) = $(ratio "$A0_CPU_GW" "$B_CPU_GW"); reservations/s (a)/(a0) = $(ratio "$A_RPS" "$A0_RPS")"
  for log in gateway gateway1; do
    echo "$log.log: $(grep -c WARN "$WORK/$log.log" || true) warnings$(grep -m1 WARN "$WORK/$log.log" | sed 's/^/; the first: /' | cut -c1-300)"
  done
  echo "gateway CPU per request: (a)/(b) = $(ratio "$A_CPU_GW" "$B_CPU_GW") (target <= 3), (a)/(a1) = $(ratio "$A_CPU_GW" "$A1_CPU_GW"); reservations/s (a)/(a1) = $(ratio "$A_RPS" "$A1_RPS")"
  if [[ -s "$WORK/profile.txt" ]]; then
    echo; echo "perf profile of the gateway during ($PROFILE), self time, top symbols:"; cat "$WORK/profile.txt"
  fi
  exit 0
fi
read -r g r n <<<"$(cpu_ticks "$GW_PID") $(cpu_ticks "$REDIS_PID") $(cpu_ticks $NGINX_PIDS)"
sed "s#^/seckill/$OPEN/#/seckill/$SOLD/#" "$WORK/orders.tsv" >"$WORK/sold.tsv"
mark_sold
read -r G_RPS G_P50 G_P99 _ <<<"$(run_wrk g "http://127.0.0.1:$GW_PORT" "$CONNECTIONS" "$WORK/orders.lua" good "$THREADS" "$WORK/sold.tsv")"
read -r G_CPU_GW G_CPU_REDIS G_CPU_NGINX <<<"$(cpu_per_request g "$g" "$r" "$n")"
read -r g r n <<<"$(cpu_ticks "$GW_PID") $(cpu_ticks "$REDIS_PID") $(cpu_ticks $NGINX_PIDS)"
read -r F_RPS F_P50 F_P99 _ <<<"$(run_wrk f "http://127.0.0.1:$GW_PORT" "$CONNECTIONS" "$WORK/orders.lua" bad "$THREADS" "$WORK/orders.tsv")"
read -r F_CPU_GW F_CPU_REDIS F_CPU_NGINX <<<"$(cpu_per_request f "$g" "$r" "$n")"
for _ in $(seq 64); do head -n 1 "$WORK/orders.tsv"; done >"$WORK/one.tsv" # a line for each wrk thread
read -r g r n <<<"$(cpu_ticks "$GW_PID") $(cpu_ticks "$REDIS_PID") $(cpu_ticks $NGINX_PIDS)"
read -r H_RPS H_P50 H_P99 _ <<<"$(run_wrk h "http://127.0.0.1:$GW_PORT" "$CONNECTIONS" "$WORK/orders.lua" bad "$THREADS" "$WORK/one.tsv")"
read -r H_CPU_GW _ _ <<<"$(cpu_per_request h "$g" "$r" "$n")"
# (c): EVALSHA of the same script, same connections; random request ids and users.
SHA=$("${RCLI[@]}" script load "$(cat lua/reserve.lua)")
C_N=$(python3 -c "print(max(100000, int(float('$A_RPS') * 3 * ${DURATION%s})))")
# shellcheck disable=SC2046
C_RPS=$(redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -c "$CONNECTIONS" --threads "$THREADS" -n "$C_N" \
  -r 100000000000 -q evalsha "$SHA" 9 $(campaign_keys "$RB") "sk:{$RB}:nonce:__rand_int__" "$RB" 1 __rand_int__ __rand_int__ 1 330 fp "" 0 |
  tr '\r' '\n' | awk '/requests per second/ {for (i=1;i<=NF;i++) if ($i=="requests") print $(i-1)}' | tail -1)
# (c1), (c32), (r1), (r100): reserve-ceiling, today's scripts (and BASE_REV's beside them).
ceiling() { # label [lua dir] -> the lines "<label> c1|c32|r1|r100 per-second redis-script-us redis-cpu-us"
  local out
  out=$(target/release/reserve-ceiling --redis "$REDIS_URL" --connections "$CONNECTIONS" --orders 50000 \
    --batches 1,32 --releases 1,100 ${2:+--lua "$2"})
  awk -v l="$1" '/^ *batch/ {part = (part == "" ? "c" : "r"); next}
    NF >= 5 && $1 ~ /^[0-9]+$/ {print l, part $1, $2, $3, (part == "c" ? $5 : $4)}' <<<"$out"
}
ceiling now >"$WORK/ceiling.txt"
if [[ -n "${BASE_REV:-}" ]]; then
  mkdir -p "$WORK/base"
  git archive "$BASE_REV" lua | tar -x -C "$WORK/base"
  ceiling base "$WORK/base/lua" >>"$WORK/ceiling.txt"
fi
ceil() { awk -v l="$1" -v r="$2" -v f="$3" '$1 == l && $2 == r {print $f}' "$WORK/ceiling.txt"; }
read -r D_RPS D_P50 D_P99 _ <<<"$(run_wrk d "http://127.0.0.1:$NGINX_410/")"
FLOOR_T0=$(cpu_ticks "$FLOOR_PID")
read -r E_RPS E_P50 E_P99 _ <<<"$(run_wrk e "http://127.0.0.1:$FLOOR_PORT/seckill/x/order")"
# The floor's own CPU per answer, as (b)'s is the gateway's: the issue's "<= 1.5x the floor's".
E_CPU=$(us_per_answer "$FLOOR_T0" e "$FLOOR_PID")
read -r E1_RPS E1_P50 E1_P99 _ <<<"$(run_wrk e1 "http://127.0.0.1:$FLOOR1_PORT/seckill/x/order")"
# (t): tokens with a real proof of work; the gateway's CPU per token from its ticks.
token_run() { # campaign users -> "tokens/s gateway-us-per-token"
  local before tps
  before=$(cpu_ticks "$GW_PID")
  target/release/presign --base "http://127.0.0.1:$GW_PORT" --campaign "$1" --users "$2" --out "$WORK/t.tsv" >"$WORK/t.out"
  tps=$(sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' "$WORK/t.out" | head -1)
  python3 -c "print('${tps:-0}', f'{($(cpu_ticks "$GW_PID") - $before) * 1e6 / $HZ / $2:.1f}')"
}
read -r T8_TPS T8_CPU <<<"$(token_run "$POW8" 4000)"
read -r T16_TPS T16_CPU <<<"$(token_run "$POW16" 1000)"
# (b) and (e) again, alternating, ROUNDS times: one pair of runs far apart in time says more
# about the shared machine than about the two; the medians of the rounds' ratios are the verdict.
for i in $(seq "$ROUNDS"); do
  mark_sold
  t=$(cpu_ticks "$GW_PID")
  read -r rb _ <<<"$(run_wrk "pb$i" "http://127.0.0.1:$GW_PORT/seckill/$SOLD/order")"
  cb=$(us_per_answer "$t" "pb$i" "$GW_PID")
  t=$(cpu_ticks "$FLOOR_PID")
  read -r re _ <<<"$(run_wrk "pe$i" "http://127.0.0.1:$FLOOR_PORT/seckill/x/order")"
  echo "$rb $cb $re $(us_per_answer "$t" "pe$i" "$FLOOR_PID")"
done >"$WORK/pairs.txt"
# RSS: the peak resident set of the whole run so far, then (the peak reset: clear_refs 5) the
# peak during a run at 1,000 connections of the sold-out answer, and the floor's in the same.
HWM_RUN_KB=$(awk '/^VmHWM/ {print $2}' "/proc/$GW_PID/status")
peak_at_1000() { # pid url -> kB
  echo 5 >"/proc/$1/clear_refs"
  run_wrk rss "$2" 1000 >/dev/null
  awk '/^VmHWM/ {print $2}' "/proc/$1/status"
}
mark_sold
HWM_KB=$(peak_at_1000 "$GW_PID" "http://127.0.0.1:$GW_PORT/seckill/$SOLD/order")
HWM_FLOOR_KB=$(peak_at_1000 "$FLOOR_PID" "http://127.0.0.1:$FLOOR_PORT/seckill/x/order")

BD=$(ratio "$B_RPS" "$D_RPS")
AB=$(ratio "$A_RPS" "$B_RPS")
verdict() { python3 -c "print('ok' if $1 else 'MISSED')"; }
printf '\n%-44s %12s %10s %10s\n' "" "requests/s" "p50 ms" "p99 ms"
printf '%-44s %12s %10.2f %10.2f\n' "(a) reservations (gateway + Redis + upstream)" "$A_RPS" "$(python3 -c "print($A_P50/1000)")" "$(python3 -c "print($A_P99/1000)")"
printf '%-44s %12s %10.2f %10.2f\n' "(a1) the same, batch_max = 1" "$A1_RPS" "$(python3 -c "print($A1_P50/1000)")" "$(python3 -c "print($A1_P99/1000)")"
printf '%-44s %12s %10.2f %10.2f\n' "(b) sold-out short circuit (gateway)" "$B_RPS" "$(python3 -c "print($B_P50/1000)")" "$(python3 -c "print($B_P99/1000)")"
printf '%-44s %12s %10.2f %10.2f\n' "(g) sold-out answer to (a)'s signed orders" "$G_RPS" "$(python3 -c "print($G_P50/1000)")" "$(python3 -c "print($G_P99/1000)")"
printf '%-44s %12s %10.2f %10.2f\n' "(h) forged, one token replayed" "$H_RPS" "$(python3 -c "print($H_P50/1000)")" "$(python3 -c "print($H_P99/1000)")"
printf '%-44s %12s %10.2f %10.2f\n' "(f) forged signature (BAD_SIGNATURE)" "$F_RPS" "$(python3 -c "print($F_P50/1000)")" "$(python3 -c "print($F_P99/1000)")"
printf '%-44s %12s\n' "(c) redis-benchmark EVALSHA reserve.lua" "$C_RPS"
for l in now base; do
  [[ -n "$(ceil "$l" c1 3)" ]] || continue
  printf '%-44s %12s %10s %10s   (%s scripts; Redis script / CPU us per reservation or release)\n' \
    "(c1) reserve-ceiling, 1 order per call" "$(ceil "$l" c1 3)" "$(ceil "$l" c1 4)" "$(ceil "$l" c1 5)" "$l"
  printf '%-44s %12s %10s %10s\n' "(c32) reserve-ceiling, 32 orders per call" "$(ceil "$l" c32 3)" "$(ceil "$l" c32 4)" "$(ceil "$l" c32 5)"
  printf '%-44s %12s %10s %10s\n' "(r1) release.lua, 1 per call" "$(ceil "$l" r1 3)" "$(ceil "$l" r1 4)" "$(ceil "$l" r1 5)"
  printf '%-44s %12s %10s %10s\n' "(r100) release.lua, 100 per call" "$(ceil "$l" r100 3)" "$(ceil "$l" r100 4)" "$(ceil "$l" r100 5)"
done
printf '%-44s %12s %10.2f %10.2f\n' "(d) nginx static return 410" "$D_RPS" "$(python3 -c "print($D_P50/1000)")" "$(python3 -c "print($D_P99/1000)")"
printf '%-44s %12s %10.2f %10.2f\n' "(e) Pingora floor: fixed 410, no checks" "$E_RPS" "$(python3 -c "print($E_P50/1000)")" "$(python3 -c "print($E_P99/1000)")"
printf '%-44s %12s %10.2f %10.2f\n' "(e1) the floor in one service of $THREADS threads" "$E1_RPS" "$(python3 -c "print($E1_P50/1000)")" "$(python3 -c "print($E1_P99/1000)")"
echo
printf '%-44s %10s %10s %10s\n' "CPU us per request" "gateway" "redis" "upstream"
printf '%-44s %10s %10s %10s\n' "(a) reservations" "$A_CPU_GW" "$A_CPU_REDIS" "$A_CPU_NGINX"
printf '%-44s %10s %10s %10s\n' "(a1) reservations, batch_max = 1" "$A1_CPU_GW" "$A1_CPU_REDIS" "$A1_CPU_NGINX"
printf '%-44s %10s %10s %10s\n' "(b) sold-out short circuit" "$B_CPU_GW" "$B_CPU_REDIS" "$B_CPU_NGINX"
printf '%-44s %10s\n' "(e) the Pingora floor (its own CPU)" "$E_CPU"
printf '%-44s %10s %10s %10s\n' "(g) sold-out, signed orders" "$G_CPU_GW" "$G_CPU_REDIS" "$G_CPU_NGINX"
printf '%-44s %10s %10s %10s\n' "(f) forged signature" "$F_CPU_GW" "$F_CPU_REDIS" "$F_CPU_NGINX"
printf '%-44s %10s\n' "(h) forged, one token replayed" "$H_CPU_GW"
echo
printf '%-44s %12s %10s\n' "(t) token endpoint with proof of work" "tokens/s" "gw us/token"
printf '%-44s %12s %10s\n' "    pow_bits 8 (~256 hashes per token)" "$T8_TPS" "$T8_CPU"
printf '%-44s %12s %10s\n' "    pow_bits 16 (~65,536 hashes per token)" "$T16_TPS" "$T16_CPU"
echo
echo "(a) reserved in Redis during the run: $((${reserved:-0} - 1)) (more (a) requests than that were safe retries of a signed order sent twice: raise BUYERS); non-2xx answers in (a): $A_NON; in (b) (all should be 410): $B_NON"
echo "tokens for (a): $(head -n 1 "$WORK/presign.out")"
threads_report
echo "gateway CPU per request: (a)/(b) = $(ratio "$A_CPU_GW" "$B_CPU_GW") (target <= 3), (f)/(b) = $(ratio "$F_CPU_GW" "$B_CPU_GW"), (f)/(g) = $(ratio "$F_CPU_GW" "$G_CPU_GW"), (h)/(g) = $(ratio "$H_CPU_GW" "$G_CPU_GW") (a refused bot request against a sold-out answer to the same bytes; target <= 1)"
echo "p99 (a)/(b) = $(ratio "$A_P99" "$B_P99") (target <= 2.5)"
echo "batching, same run: (a)/(a1) reservations/s = $(ratio "$A_RPS" "$A1_RPS") (target >= 1.4), p99 (a)/(a1) = $(ratio "$A_P99" "$A1_P99") (target <= 1), Redis CPU per reservation (a)/(a1) = $(ratio "$A_CPU_REDIS" "$A1_CPU_REDIS") (target <= 0.5), gateway CPU per reservation (a)/(a1) = $(ratio "$A_CPU_GW" "$A1_CPU_GW"); non-2xx in (a1): $A1_NON"
echo "(b)/(d) = $BD   target >= 1.0: $(verdict "$BD >= 1.0")"
echo "  of which Pingora's share (e)/(d) = $(ratio "$E_RPS" "$D_RPS"), ours (b)/(e) = $(ratio "$B_RPS" "$E_RPS") (one pair; the rounds below are the verdict); the floor's layouts (e)/(e1) = $(ratio "$E_RPS" "$E1_RPS")"
echo "gateway CPU per sold-out answer against the floor's, (b)/(e) = $(ratio "$B_CPU_GW" "$E_CPU") (one pair; the rounds below are the verdict)"
echo "(b)/(e1) = $(ratio "$B_RPS" "$E1_RPS")   target >= 1.0 (the sold-out answer against the floor's old layout): $(verdict "$B_RPS >= $E1_RPS")"
echo "(a)/(b) = $AB   target >= 0.6: $(verdict "$AB >= 0.6")"
echo "(a)/(c) = $(ratio "$A_RPS" "$C_RPS")   (share of the Redis ceiling)"
echo "batched script: (c32)/(c) = $(ratio "$(ceil now c32 3)" "$C_RPS") (target >= 2.5), (c32)/(c1) = $(ratio "$(ceil now c32 3)" "$(ceil now c1 3)"); releases (r100)/(r1) = $(ratio "$(ceil now r100 3)" "$(ceil now r1 3)") (target >= 10)"
if [[ -n "${BASE_REV:-}" ]]; then
  echo "  against $BASE_REV's scripts: (c32) $(ratio "$(ceil now c32 3)" "$(ceil base c32 3)"), Redis CPU per reservation at 32 $(ratio "$(ceil now c32 5)" "$(ceil base c32 5)"), (r100) today / (r1) then = $(ratio "$(ceil now r100 3)" "$(ceil base r1 3)")"
fi
echo "  gateway CPU per request (b)/(a) = $(ratio "$B_CPU_GW" "$A_CPU_GW")   (what (a)/(b) would be with Redis and the upstream on their own cores)"
if [[ -s "$WORK/profile.txt" ]]; then
  echo; echo "perf profile of the gateway during ($PROFILE), self time, top symbols:"; cat "$WORK/profile.txt"; echo
fi
python3 e2e/bench/py/pairs.py "$WORK/pairs.txt"
echo "gateway peak RSS (VmHWM) at 1,000 connections: $((HWM_KB / 1024)) MiB (the floor's: $((HWM_FLOOR_KB / 1024)) MiB)   target < 64: $(verdict "$HWM_KB < 65536")"
echo "  the gateway's peak over the whole run before it, (a)'s reservations and their Kafka queue included: $((HWM_RUN_KB / 1024)) MiB"
