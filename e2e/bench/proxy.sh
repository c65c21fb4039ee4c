#!/usr/bin/env bash
# Shop-route proxy benchmark, in one run, same load tool (wrk), threads, connections, duration:
# a shop route proxied to a small upstream (an nginx answering a 13-byte body), through
#
#   (a) the gateway over plain HTTP        (b) Nginx proxy_pass, upstream keepalive, plain HTTP
#   (c) the gateway over TLS               (d) Nginx proxy_pass, upstream keepalive, TLS
#   (e) the upstream alone (the ceiling)
#
# requests/s, p50 and p99. The gateway and the proxying Nginx run with the same number of
# threads / workers; both keep upstream connections alive (Pingora pools them by default;
# Nginx with `keepalive 64`, HTTP/1.1 and an empty Connection header). TLS: one ECDSA P-256
# certificate made by openssl for the run, TLS 1.3, HTTP/1.1 (wrk does not speak HTTP/2);
# wrk keeps its connections, so handshakes are rare (each side closes a connection after 1000
# requests: the gateway's keepalive_requests, Nginx's default). Ratios hold across machines,
# absolute numbers don't.
#
# Usage: e2e/bench/proxy.sh          Env: DURATION (10s), THREADS (2), CONNECTIONS (100)
# Needs: wrk, nginx (nginx-light), openssl (the CLI, for the run's certificate), curl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-100}

for tool in wrk nginx openssl curl python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (apt-get install wrk nginx-light openssl curl)" >&2; exit 1; }
done

# shellcheck source=e2e/lib.sh
source e2e/lib.sh
build_all release

WORK=$(mktemp -d -t proxy-bench.XXXXXX)
GW_PID=""
cleanup() {
  [[ -n "$GW_PID" ]] && kill "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null || true
  for pidfile in "$WORK"/up/nginx.pid "$WORK"/px/nginx.pid; do
    [[ -s "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP=$(free_port); NX=$(free_port); NXS=$(free_port); GW=$(free_port); GWS=$(free_port)

# The run's certificate (both proxies serve the same one).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=shop.bench" \
  -addext "subjectAltName=DNS:shop.bench" -keyout "$WORK/shop.key" -out "$WORK/shop.pem" 2>/dev/null

nginx_conf() { # dir workers server-blocks
  mkdir -p "$WORK/$1/tmp"
  cat >"$WORK/$1/nginx.conf" <<NGINX
worker_processes $2;
daemon on;
pid $WORK/$1/nginx.pid;
error_log $WORK/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/$1/tmp/body;
  proxy_temp_path $WORK/$1/tmp/proxy;
  fastcgi_temp_path $WORK/$1/tmp/fastcgi;
  uwsgi_temp_path $WORK/$1/tmp/uwsgi;
  scgi_temp_path $WORK/$1/tmp/scgi;
$3
}
NGINX
  nginx -p "$WORK/$1" -c "$WORK/$1/nginx.conf"
  for _ in $(seq 50); do [[ -s "$WORK/$1/nginx.pid" ]] && break; sleep 0.1; done
}

# The small upstream: one worker, a fixed 13-byte body.
nginx_conf up 1 "  server { listen 127.0.0.1:$UP; location / { default_type text/plain; return 200 'hello, shop!\n'; } }"
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
  }"

# The gateway: one shop route to the same upstream, plain and TLS listeners.
mkdir -p "$WORK/gw/campaigns"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/gw/key"
cat >"$WORK/gw/server.toml" <<SERVER
[server]
listen = "127.0.0.1:$GW"
threads = $THREADS
signing_key = "file:key"
[redis]
url = "redis://127.0.0.1:1"
[order_writer]
upstreams = ["127.0.0.1:1"]
[kafka]
brokers = ["127.0.0.1:1"]
$(defense_table)
[[route]]
name = "shop"
path_prefix = "/"
upstreams = ["127.0.0.1:$UP"]
[tls]
listen = "127.0.0.1:$GWS"
[[tls.cert]]
hosts = ["shop.bench"]
cert_file = "$WORK/shop.pem"
key_file = "$WORK/shop.key"
SERVER
# The edge's keys (required by the server file; no campaign uses them here).
edge_keys bench
RUST_LOG=warn target/release/gateway --conf "$WORK/gw/server.toml" --lua-dir lua >"$WORK/gateway.log" 2>&1 &
GW_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$GW/" && break; sleep 0.1; done
for url in "http://127.0.0.1:$GW/" "https://127.0.0.1:$GWS/" "http://127.0.0.1:$NX/" "https://127.0.0.1:$NXS/"; do
  body=$(curl -sk "$url")
  [[ "$body" == "hello, shop!" ]] || { echo "$url answered: $body" >&2; cat "$WORK/gateway.log" >&2; exit 1; }
done

cat >"$WORK/pct.lua" <<'LUA'
function done(summary, latency, requests)
  io.write(string.format("P50_US %d\nP99_US %d\nERRORS %d\n", latency:percentile(50), latency:percentile(99),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
LUA

run_wrk() { # label url
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s "$WORK/pct.lua" "$2" >"$WORK/$1.out" 2>&1
  awk '/^Requests\/sec:/ {r=$2} /^P50_US/ {p50=$2} /^P99_US/ {p99=$2} /^ERRORS/ {e=$2}
       END {printf "%s %.2f %.2f %d\n", r, p50/1000, p99/1000, e}' "$WORK/$1.out"
}

echo "proxy bench: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, gateway threads=$THREADS, nginx workers=$THREADS"
read -r A A50 A99 AE <<<"$(run_wrk a "http://127.0.0.1:$GW/")"
read -r B B50 B99 BE <<<"$(run_wrk b "http://127.0.0.1:$NX/")"
read -r C C50 C99 CE <<<"$(run_wrk c "https://127.0.0.1:$GWS/")"
read -r D D50 D99 DE <<<"$(run_wrk d "https://127.0.0.1:$NXS/")"
read -r E E50 E99 EE <<<"$(run_wrk e "http://127.0.0.1:$UP/")"

printf '\n%-40s %12s %9s %9s %7s\n' "" "requests/s" "p50 ms" "p99 ms" "errors"
printf '%-40s %12s %9s %9s %7s\n' "(a) gateway, plain HTTP" "$A" "$A50" "$A99" "$AE"
printf '%-40s %12s %9s %9s %7s\n' "(b) nginx proxy_pass, plain HTTP" "$B" "$B50" "$B99" "$BE"
printf '%-40s %12s %9s %9s %7s\n' "(c) gateway, TLS" "$C" "$C50" "$C99" "$CE"
printf '%-40s %12s %9s %9s %7s\n' "(d) nginx proxy_pass, TLS" "$D" "$D50" "$D99" "$DE"
printf '%-40s %12s %9s %9s %7s\n' "(e) the upstream alone" "$E" "$E50" "$E99" "$EE"
python3 -c "
a, b, c, d = $A, $B, $C, $D
print(f'\nratios: plain (a)/(b) = {a / b:.2f}   TLS (c)/(d) = {c / d:.2f}   TLS cost: gateway (c)/(a) = {c / a:.2f}, nginx (d)/(b) = {d / b:.2f}')"
