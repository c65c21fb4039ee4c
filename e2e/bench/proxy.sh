#!/usr/bin/env bash
# Shop-route proxy benchmark, in one run, same load tool (wrk), threads, connections, duration:
# a shop route proxied to a small upstream (an nginx answering a 13-byte body), through
#
#   (a) the gateway over plain HTTP, $THREADS workers of one thread (Nginx's worker layout)
#   (a1) the same gateway in the old layout: one worker of $THREADS threads
#   (b) Nginx proxy_pass, upstream keepalive, plain HTTP
#   (f) the proxy floor: the same Pingora server with a `ProxyHttp` that has only
#       `upstream_peer` (e2e/bench/src/bin/proxy_floor.rs), plain HTTP, and (g) the same floor
#       on one thread, and (w) the floor as $THREADS services of one thread each on the same
#       address (SO_REUSEPORT: Nginx's worker layout); in (g) and (w) no thread ever wakes
#       another: what Pingora costs without its cross-thread hand-overs (gateway/src/threads.rs)
#   (c) the gateway over TLS               (d) Nginx proxy_pass, upstream keepalive, TLS
#   (e) the upstream alone (the ceiling)
#   (s) the gateway's sold-out answer (a sold-out campaign's order, the local flag), when a
#       Redis is given (SECKILL_REDIS_URL or the stack's .stack/env), so a change of the proxied
#       path that slows the sale shows in the same run
#   (p) the gateway as a proxy only (a server file with no sale: [server] and routes), and
#   (r) the same with 200 locations (100 prefixes, 100 regexes, Nginx's precedence) before the
#       catch-all the request matches: every regex is tried first (target (r)/(p) >= 0.95)
#   (z) gzip of a 10 KB text answer at level 1 (gzip_comp_level 1, gzip_types text/plain) by
#       the proxy-only gateway, beside (zn) Nginx's gzip, same body, same level: CPU per response
#
# requests/s, p50, p99 and the CPU microseconds per request of each process (user + system,
# from /proc/PID/stat, over that run: the proxy, and the upstream nginx it drives). The gateway,
# the floor and the proxying Nginx run with the same number of threads / workers; all keep
# upstream connections alive (Pingora pools them by default; Nginx with `keepalive 64`,
# HTTP/1.1 and an empty Connection header). TLS: one ECDSA P-256 certificate made by openssl
# for the run, TLS 1.3, HTTP/1.1 (wrk does not speak HTTP/2); wrk keeps its connections, so
# handshakes are rare (each side closes a connection after 1000 requests: the gateway's
# keepalive_requests, Nginx's default). Ratios hold across machines, absolute numbers don't.
# Targets (plain HTTP, issue 14): (a)/(b) >= 0.7 requests/s, p99 (a)/(b) <= 1.5, CPU per request
# (a)/(b) <= 2.5.
#
# With PROFILE=1, one more run of (b), (f) and (a) each under `strace -c -f` (system calls per
# proxied request; strace slows the process, so only the counts matter), and, with `perf`
# installed, `perf stat` of context switches and CPU migrations per request.
#
# Usage: e2e/bench/proxy.sh          Env: DURATION (10s), THREADS (2), CONNECTIONS (100),
#                                           PROFILE (0), SECKILL_REDIS_URL (for (s))
# Needs: wrk, nginx (nginx-light), openssl (the CLI, for the run's certificate), curl; strace
# and perf for PROFILE=1.
# shellcheck source=e2e/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-100}
PROFILE=${PROFILE:-0}
bench_env SECKILL_REDIS_URL
REDIS_URL=${SECKILL_REDIS_URL:-}


bench_tools wrk:wrk nginx:nginx-light openssl:openssl curl:curl -- python3
build_all release

bench_work proxy-bench
RUN=$(date +%s)$$
SOLD="bench-proxy-sold-$RUN"
rcli() { local hp=${REDIS_URL#redis://}; hp=${hp%%/*}; redis-cli -h "${hp%:*}" -p "${hp##*:}" "$@"; }
bench_cleanup() {
  # shellcheck disable=SC2046
  [[ -n "$REDIS_URL" ]] && rcli del $(campaign_keys "$SOLD") >/dev/null 2>&1 || true
  for pidfile in "$WORK"/up/nginx.pid "$WORK"/px/nginx.pid; do
    [[ -s "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
}

GWP=$(free_port); GWR=$(free_port); UP=$(free_port); NX=$(free_port); NXS=$(free_port); GW=$(free_port); GWS=$(free_port); GW1=$(free_port); GW1S=$(free_port); FL=$(free_port); FL1=$(free_port); FLW=$(free_port)

# The run's certificate (both proxies serve the same one).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=shop.bench" \
  -addext "subjectAltName=DNS:shop.bench" -keyout "$WORK/shop.key" -out "$WORK/shop.pem" 2>/dev/null

nginx_conf() { # dir workers server-blocks
  mkdir -p "$WORK/$1/tmp"
  fill e2e/bench/conf/nginx.conf WORKERS="$2" DIR="$WORK/$1" SERVERS="$3" >"$WORK/$1/nginx.conf"
  nginx -p "$WORK/$1" -c "$WORK/$1/nginx.conf"
  for _ in $(seq 50); do [[ -s "$WORK/$1/nginx.pid" ]] && break; sleep 0.1; done
}

# The small upstream: one worker, a fixed 13-byte body; /big: 10 KB of text for (z).
mkdir -p "$WORK/up"
chmod 755 "$WORK" "$WORK/up" # the upstream nginx's workers (another user) read big.txt
python3 -c "import random; random.seed(7); w=['shop','sale','price','phone','order','stock','cart','page']; print(' '.join(random.choice(w) for _ in range(1800))[:10240])" >"$WORK/up/big.txt"
chmod 644 "$WORK/up/big.txt"
nginx_conf up 1 "  server { listen 127.0.0.1:$UP; location / { default_type text/plain; return 200 'hello, shop!\n'; }
    location = /big { default_type text/plain; alias $WORK/up/big.txt; } }"
# The peer: Nginx proxy_pass with upstream keepalive, plain and TLS.
nginx_conf px "$THREADS" "
  upstream shop { server 127.0.0.1:$UP; keepalive 64; }
  server {
    listen 127.0.0.1:$NX;
    listen 127.0.0.1:$NXS ssl;
    ssl_certificate $WORK/shop.pem;
    ssl_certificate_key $WORK/shop.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / { proxy_pass http://shop; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
    location = /big { proxy_pass http://shop; proxy_http_version 1.1; proxy_set_header Connection \"\";
      gzip on; gzip_comp_level 1; gzip_types text/plain; }
  }"

# The gateway: one shop route to the same upstream, plain and TLS listeners.
mkdir -p "$WORK/gw/campaigns"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/gw/key"
if [[ -n "$REDIS_URL" ]]; then
  # (s): a campaign published sold out with lua/publish.lua (as the order writer does).
  # shellcheck disable=SC2046
  rcli --eval lua/publish.lua $(campaign_keys "$SOLD") , 1 0 1 SKU-BENCH 100 1 >/dev/null
  bench_campaign "$WORK/gw/campaigns/$SOLD.toml" "$SOLD" 0 0
fi
fill e2e/bench/conf/proxy-gateway.toml PORT="$GW" WORKERS="$THREADS" REDIS_URL="${REDIS_URL:-redis://127.0.0.1:1}" \
  DEFENSE="$(defense_table)" UPSTREAM_PORT="$UP" TLS_PORT="$GWS" DIR="$WORK" >"$WORK/gw/server.toml"
# The edge's keys (required by the server file; no campaign uses them here).
edge_keys bench
RUST_LOG=warn target/release/gateway --conf "$WORK/gw/server.toml" --lua-dir lua >"$WORK/gateway.log" 2>&1 &
GW_PID=$!
bench_started "$GW_PID"
# (a1): the old layout, one worker of $THREADS threads, its own ports and upgrade socket.
sed -e "s/^workers = .*/workers = 1\nthreads = $THREADS/" -e "s/127.0.0.1:$GW\"/127.0.0.1:$GW1\"/" \
  -e "s/127.0.0.1:$GWS\"/127.0.0.1:$GW1S\"/" "$WORK/gw/server.toml" >"$WORK/gw/server1.toml"
printf '[shutdown]\nupgrade_sock = "%s"\n' "$WORK/gw/upgrade1.sock" >>"$WORK/gw/server1.toml"
RUST_LOG=warn target/release/gateway --conf "$WORK/gw/server1.toml" --lua-dir lua >"$WORK/gateway1.log" 2>&1 &
GW1_PID=$!
bench_started "$GW1_PID"
target/release/proxy_floor "127.0.0.1:$FL" "127.0.0.1:$UP" "$THREADS" >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
bench_started "$FLOOR_PID"
target/release/proxy_floor "127.0.0.1:$FL1" "127.0.0.1:$UP" 1 >"$WORK/floor1.log" 2>&1 &
FLOOR1_PID=$!
bench_started "$FLOOR1_PID"
FLOOR_WORKERS=$THREADS target/release/proxy_floor "127.0.0.1:$FLW" "127.0.0.1:$UP" >"$WORK/floorw.log" 2>&1 &
FLOORW_PID=$!
bench_started "$FLOORW_PID"
# (p), (z): the gateway as a proxy only; (r): the same behind 200 locations.
fill e2e/bench/conf/proxy-only.toml PORT="$GWP" WORKERS="$THREADS" UPGRADE_SOCK="$WORK/gw/upgrade-p.sock" \
  UPSTREAM_PORT="$UP" >"$WORK/gw/proxy.toml"
{
  printf '[server]\nlisten = "127.0.0.1:%s"\nworkers = %s\n[shutdown]\nupgrade_sock = "%s"\n' "$GWR" "$THREADS" "$WORK/gw/upgrade-r.sock"
  for i in $(seq 100); do
    printf '[[route]]\nname = "p%s"\npath = "/p%s/"\nupstreams = ["127.0.0.1:%s"]\n' "$i" "$i" "$UP"
    printf '[[route]]\nname = "r%s"\npath = "~ ^/r%s/[a-z]+\\\\.html$"\nupstreams = ["127.0.0.1:%s"]\n' "$i" "$i" "$UP"
  done
  printf '[[route]]\nname = "shop"\npath = "/"\nupstreams = ["127.0.0.1:%s"]\n' "$UP"
} >"$WORK/gw/routes200.toml"
target/release/gateway --conf "$WORK/gw/routes200.toml" --check >/dev/null
RUST_LOG=warn target/release/gateway --conf "$WORK/gw/proxy.toml" >"$WORK/gatewayp.log" 2>&1 &
GWP_PID=$!
bench_started "$GWP_PID"
RUST_LOG=warn target/release/gateway --conf "$WORK/gw/routes200.toml" >"$WORK/gatewayr.log" 2>&1 &
GWR_PID=$!
bench_started "$GWR_PID"
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GWP/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GWR/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GW/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GW1/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$FL/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$FL1/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$FLW/" && break; sleep 0.1; done
for url in "http://127.0.0.1:$GWP/" "http://127.0.0.1:$GWR/" "http://127.0.0.1:$GW/" "http://127.0.0.1:$GW1/" "https://127.0.0.1:$GWS/" "http://127.0.0.1:$NX/" "https://127.0.0.1:$NXS/" "http://127.0.0.1:$FL/"; do
  body=$(curl -sk "$url")
  [[ "$body" == "hello, shop!" ]] || { echo "$url answered: $body" >&2; cat "$WORK/gateway.log" >&2; exit 1; }
done

{ echo 'wrk.headers["Accept-Encoding"] = "gzip"'; cat e2e/bench/wrk/pct.lua; } >"$WORK/gzip.lua"
GZ_BYTES=""
for who in gateway:$GWP nginx:$NX; do
  curl -s -H 'Accept-Encoding: gzip' -D "$WORK/gz.head" -o "$WORK/gz.body" "http://127.0.0.1:${who#*:}/big"
  grep -qi '^content-encoding: gzip' "$WORK/gz.head" && [[ "$(gzip -dc <"$WORK/gz.body")" == "$(cat "$WORK/up/big.txt")" ]] ||
    { echo "${who%%:*}: no gzip of /big" >&2; cat "$WORK/gz.head" >&2; exit 1; }
  GZ_BYTES+="${who%%:*} $(stat -c %s "$WORK/gz.body"), "
done
GZ_BYTES+="of $(stat -c %s "$WORK/up/big.txt")"

# (s) relies on the sold-out flag of $SOLD, set by one buyer's signed order (lib.sh).
sold_out() { sold_out_flag "http://127.0.0.1:$GW" "$SOLD" "$WORK/sold.tsv" || exit 1; }

HZ=$(getconf CLK_TCK)
UP_PIDS="$(cat "$WORK/up/nginx.pid") $(pgrep -P "$(cat "$WORK/up/nginx.pid")" | tr '\n' ' ')"
NX_PIDS="$(cat "$WORK/px/nginx.pid") $(pgrep -P "$(cat "$WORK/px/nginx.pid")" | tr '\n' ' ')"

# One wrk run against `url`; prints requests/s, p50 ms, p99 ms, errors, and the CPU us per
# request of the proxy's processes and of the upstream's.
run_wrk() { # label url "proxy pids" [script]
  local before_p before_u n
  before_p=$(cpu_ticks $3)
  before_u=$(cpu_ticks $UP_PIDS)
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s "${4:-e2e/bench/wrk/pct.lua}" "$2" >"$WORK/$1.out" 2>&1
  n=$(awk '/requests in/ {print $1}' "$WORK/$1.out")
  awk -v n="$n" -v hz="$HZ" -v p="$(($(cpu_ticks $3) - before_p))" -v u="$(($(cpu_ticks $UP_PIDS) - before_u))" \
    '/^Requests\/sec:/ {r=$2} /^P50_US/ {p50=$2} /^P99_US/ {p99=$2} /^ERRORS/ {e=$2}
     END {n = n > 0 ? n : 1; printf "%s %.2f %.2f %d %.1f %.1f\n", r, p50/1000, p99/1000, e, p*1e6/hz/n, u*1e6/hz/n}' "$WORK/$1.out"
}

echo "proxy bench: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, gateway and floor threads=$THREADS, nginx workers=$THREADS"
read -r A A50 A99 AE ACPU AUP <<<"$(run_wrk a "http://127.0.0.1:$GW/" "$GW_PID")"
read -r A1 A150 A199 A1E A1CPU A1UP <<<"$(run_wrk a1 "http://127.0.0.1:$GW1/" "$GW1_PID")"
read -r B B50 B99 BE BCPU BUP <<<"$(run_wrk b "http://127.0.0.1:$NX/" "$NX_PIDS")"
read -r F F50 F99 FE FCPU FUP <<<"$(run_wrk f "http://127.0.0.1:$FL/" "$FLOOR_PID")"
read -r G G50 G99 GE GCPU GUP <<<"$(run_wrk g "http://127.0.0.1:$FL1/" "$FLOOR1_PID")"
read -r W W50 W99 WE WCPU WUP <<<"$(run_wrk w "http://127.0.0.1:$FLW/" "$FLOORW_PID")"
read -r C C50 C99 CE CCPU CUP <<<"$(run_wrk c "https://127.0.0.1:$GWS/" "$GW_PID")"
read -r D D50 D99 DE DCPU DUP <<<"$(run_wrk d "https://127.0.0.1:$NXS/" "$NX_PIDS")"
read -r E E50 E99 EE ECPU _ <<<"$(run_wrk e "http://127.0.0.1:$UP/" "$UP_PIDS")"
read -r P P50 P99 PE PCPU PUP <<<"$(run_wrk p "http://127.0.0.1:$GWP/" "$GWP_PID")"
read -r R R50 R99 RE RCPU RUP <<<"$(run_wrk r "http://127.0.0.1:$GWR/" "$GWR_PID")"
read -r Z Z50 Z99 ZE ZCPU ZUP <<<"$(run_wrk z "http://127.0.0.1:$GWP/big" "$GWP_PID" "$WORK/gzip.lua")"
read -r ZN ZN50 ZN99 ZNE ZNCPU ZNUP <<<"$(run_wrk zn "http://127.0.0.1:$NX/big" "$NX_PIDS" "$WORK/gzip.lua")"
if [[ -n "$REDIS_URL" ]]; then
  sold_out
  read -r S S50 S99 SE SCPU _ <<<"$(run_wrk s "http://127.0.0.1:$GW/seckill/$SOLD/order" "$GW_PID" e2e/bench/wrk/post.lua)"
  curl -s -X POST "http://127.0.0.1:$GW/seckill/$SOLD/order" | grep -q SOLD_OUT ||
    { echo "(s): the flag was gone by the end of the run (sold_out_ttl_ms)" >&2; exit 1; }
fi

printf '\n%-40s %11s %8s %8s %6s %11s %11s\n' "" "requests/s" "p50 ms" "p99 ms" "errors" "CPU us/req" "upstream us"
echo "(errors: socket errors and non-2xx answers; (s)'s are its 410 SOLD_OUT answers)"
row() { printf '%-40s %11s %8s %8s %6s %11s %11s\n' "$@"; }
row "(a) gateway, plain HTTP" "$A" "$A50" "$A99" "$AE" "$ACPU" "$AUP"
row "(a1) gateway, 1 worker of $THREADS threads" "$A1" "$A150" "$A199" "$A1E" "$A1CPU" "$A1UP"
row "(b) nginx proxy_pass, plain HTTP" "$B" "$B50" "$B99" "$BE" "$BCPU" "$BUP"
row "(f) proxy floor (bare Pingora), plain" "$F" "$F50" "$F99" "$FE" "$FCPU" "$FUP"
row "(g) proxy floor, one thread" "$G" "$G50" "$G99" "$GE" "$GCPU" "$GUP"
row "(w) proxy floor, $THREADS one-thread services" "$W" "$W50" "$W99" "$WE" "$WCPU" "$WUP"
row "(c) gateway, TLS" "$C" "$C50" "$C99" "$CE" "$CCPU" "$CUP"
row "(d) nginx proxy_pass, TLS" "$D" "$D50" "$D99" "$DE" "$DCPU" "$DUP"
row "(e) the upstream alone" "$E" "$E50" "$E99" "$EE" "$ECPU" "-"
[[ -n "$REDIS_URL" ]] && row "(s) gateway, sold-out order (no upstream)" "$S" "$S50" "$S99" "$SE" "$SCPU" "-"
row "(p) gateway, proxy only (no sale)" "$P" "$P50" "$P99" "$PE" "$PCPU" "$PUP"
row "(r) (p) behind 200 locations" "$R" "$R50" "$R99" "$RE" "$RCPU" "$RUP"
row "(z) (p), gzip level 1 of 10 KB" "$Z" "$Z50" "$Z99" "$ZE" "$ZCPU" "$ZUP"
row "(zn) nginx, gzip level 1 of 10 KB" "$ZN" "$ZN50" "$ZN99" "$ZNE" "$ZNCPU" "$ZNUP"
python3 -c "
a, b, c, d, f = $A, $B, $C, $D, $F
verdict = lambda ok: 'ok' if ok else 'MISSED'
print(f'\nratios: plain (a)/(b) = {a / b:.2f} (target >= 0.7: {verdict(a / b >= 0.7)})   TLS (c)/(d) = {c / d:.2f}')
print(f'  p99 (a)/(b) = {$A99 / max($B99, 0.01):.2f} (target <= 1.5: {verdict($A99 <= 1.5 * $B99)})')
print(f'  CPU per request (a)/(b) = {$ACPU / $BCPU:.2f} (target <= 2.5: {verdict($ACPU <= 2.5 * $BCPU)})')
print(f'  old layout: (a1)/(b) = {$A1 / b:.2f} requests/s, p99 {$A199 / max($B99, 0.01):.2f}, CPU {$A1CPU / $BCPU:.2f}; workers over old layout: (a)/(a1) = {a / $A1:.2f}')
print(f'  the gateway over the one-thread services: (a)/(w) = {a / $W:.2f} (target >= 0.9: {verdict(a / $W >= 0.9)})')
print(f'  floor: (f)/(b) = {f / b:.2f} requests/s, CPU (f)/(b) = {$FCPU / $BCPU:.2f}; the gateway over the floor: (a)/(f) = {a / f:.2f}, CPU (a)/(f) = {$ACPU / $FCPU:.2f}')
print(f'  one-thread floor: (g)/(b) = {$G / b:.2f} requests/s, CPU (g)/(b) = {$GCPU / $BCPU:.2f}')
print(f'  one-thread services: (w)/(b) = {$W / b:.2f} requests/s, p99 {$W99 / max($B99, 0.01):.2f}, CPU (w)/(b) = {$WCPU / $BCPU:.2f}')
print(f'  proxy only: (p)/(b) = {$P / b:.2f} requests/s, CPU (p)/(b) = {$PCPU / $BCPU:.2f}; (p)/(a) = {$P / a:.2f} (the sale on beside it)')
print(f'  200 locations: (r)/(p) = {$R / $P:.2f} requests/s (target >= 0.95: {verdict($R / $P >= 0.95)}), CPU (r)/(p) = {$RCPU / $PCPU:.2f}')
print(f'  gzip: CPU per response (z)/(zn) = {$ZCPU / $ZNCPU:.2f}, requests/s (z)/(zn) = {$Z / $ZN:.2f}; compressed bytes: $GZ_BYTES')"
echo "upstream connections the gateway dropped on reuse (\"failed to acquire reusable stream\"): (a) $(grep -c 'failed to acquire reusable stream' "$WORK/gateway.log" || true), (a1) $(grep -c 'failed to acquire reusable stream' "$WORK/gateway1.log" || true)"

[[ "$PROFILE" == 1 ]] || exit 0
# System calls per proxied request: strace -c over a short wrk run of each proxy (the whole
# process tree, all threads), divided by that run's requests.
command -v strace >/dev/null || { echo "PROFILE=1 needs strace" >&2; exit 1; }
syscalls() { # label url pids...
  local label=$1 url=$2 args=() p n
  shift 2
  for p in "$@"; do args+=(-p "$p"); done
  strace -c -f -o "$WORK/$label.strace" "${args[@]}" 2>/dev/null &
  local st=$!
  sleep 1
  wrk -t"$THREADS" -c"$CONNECTIONS" -d3s "$url" >"$WORK/$label.sout" 2>&1
  kill -INT "$st"; wait "$st" 2>/dev/null || true
  n=$(awk '/requests in/ {print $1}' "$WORK/$label.sout")
  echo "system calls per request, $label ($n requests under strace):"
  awk -v n="$n" '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {c = $4; name = $NF; if (c / n >= 0.05) printf "  %-16s %6.2f\n", name, c / n; t += c}
    END {printf "  %-16s %6.2f\n", "total", t / n}' "$WORK/$label.strace"
}
# shellcheck disable=SC2086
syscalls "(b) nginx proxy_pass" "http://127.0.0.1:$NX/" $(pgrep -P "$(cat "$WORK/px/nginx.pid")")
syscalls "(f) proxy floor" "http://127.0.0.1:$FL/" "$FLOOR_PID"
syscalls "(w) proxy floor, one-thread services" "http://127.0.0.1:$FLW/" "$FLOORW_PID"
syscalls "(a) gateway" "http://127.0.0.1:$GW/" "$GW_PID"
command -v perf >/dev/null || exit 0
switches() { # label url pids (comma-separated)
  local n
  perf stat -e context-switches,cpu-migrations -p "$3" -o "$WORK/$1.perf" -- sleep 4 2>/dev/null &
  local ps=$!
  wrk -t"$THREADS" -c"$CONNECTIONS" -d3s "$2" >"$WORK/$1.pout" 2>&1
  wait "$ps" || true
  n=$(awk '/requests in/ {print $1}' "$WORK/$1.pout")
  awk -v n="$n" -v l="$1" '/context-switches|cpu-migrations/ {gsub(",", "", $1); printf "  %-22s %-18s %6.3f per request\n", l, $2, $1 / n}' "$WORK/$1.perf"
}
echo "perf stat (the proxy's threads, a 3 s run each):"
switches "(b) nginx proxy_pass" "http://127.0.0.1:$NX/" "$(pgrep -P "$(cat "$WORK/px/nginx.pid")" | paste -sd,)"
switches "(f) proxy floor" "http://127.0.0.1:$FL/" "$FLOOR_PID"
switches "(w) one-thread services" "http://127.0.0.1:$FLW/" "$FLOORW_PID"
switches "(a) gateway" "http://127.0.0.1:$GW/" "$GW_PID"
