#!/usr/bin/env bash
# The systemd units of conf/systemd/ checked and run as systemd would run them, on the local
# stack (docs/deploy.md):
#   1. rendered with this checkout's binaries and a sale's conf in place of /usr/local/bin and
#      /etc/seckill (the only change), they pass `systemd-analyze verify`;
#   2. the two topologies' gateway files (conf/deploy/) pass `gateway --check`, and the Nginx
#      snippet of the second passes `nginx -t`;
#   3. each unit's ExecStart is started with the environment file it names, waited for until it
#      listens, then sent its KillSignal: it must exit, cleanly, within its TimeoutStopSec (the
#      gateway's drain_secs is shorter than it).
# Its sale (database, topic, Redis keys) is its own and deleted at the end.
#
#   bash e2e/units.sh            (PROFILE=debug, the default, or release: which binaries)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=/dev/null
. .stack/env
# shellcheck source=e2e/lib.sh
source e2e/lib.sh
need_packages systemd-analyze:systemd openssl:openssl nginx:nginx-light
PROFILE=${PROFILE:-debug}
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE"
[[ -x "$BIN/gateway" && -x "$BIN/order-writer" ]] || build_all "$PROFILE"

log() { printf '%s units: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
RUN=$(mktemp -d)
ID="unit$(date -u +%Y%m%d%H%M%S)"
PIDS=()
finish() {
  local rc=$? p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  SALE_CLEANUP=all sales_cleanup end unit "$ID" >/dev/null
  ((rc == 0)) && rm -rf "$RUN" || log "kept $RUN for its logs"
  exit "$rc"
}
trap finish EXIT

edge_keys unit
SECKILL_GATEWAY_KEY=$(random_key unit-gateway-)
SECKILL_PAYMENT_KEY=$(random_key unit-payment-)
export SECKILL_GATEWAY_KEY SECKILL_PAYMENT_KEY
WPORT=$(free_port)
GPORT=$(free_port)
sale_create "$RUN" "$ID" 10 "$(date -u -d '+30 min' +%Y-%m-%dT%H:%M:%SZ)" "$WPORT" "$BIN" >"$RUN/create.log" 2>&1
gateway_conf "$RUN" gateway "$GPORT" "$ID" "$WPORT"
printf 'SECKILL_EDGE_KEY=%s\nSECKILL_LOGIN_KEY=%s\nSECKILL_GATEWAY_KEY=%s\n' \
  "$SECKILL_EDGE_KEY" "$SECKILL_LOGIN_KEY" "$SECKILL_GATEWAY_KEY" >"$RUN/gateway.env"
printf 'SECKILL_GATEWAY_KEY=%s\nSECKILL_PAYMENT_KEY=%s\n' "$SECKILL_GATEWAY_KEY" "$SECKILL_PAYMENT_KEY" >"$RUN/order-writer.env"
unset SECKILL_EDGE_KEY SECKILL_LOGIN_KEY SECKILL_GATEWAY_KEY SECKILL_PAYMENT_KEY # the units' files only

# A unit with this checkout's paths: the binaries, the sale's conf files and env files.
render() { # unit-file out-file
  sed -e "s#/usr/local/bin/#$BIN/#g" \
    -e "s#/etc/seckill/server.toml#$RUN/gateway.toml#g" \
    -e "s#/etc/seckill/\\([a-z-]*\\)\\.toml#$RUN/\\1.toml#g" \
    -e "s#/etc/seckill/\\([a-z-]*\\)\\.env#$RUN/\\1.env#g" \
    "$1" >"$2"
}
mkdir -p "$RUN/units"
render conf/systemd/seckill-gateway@.service "$RUN/units/seckill-gateway@blue.service"
render conf/systemd/seckill-order-writer.service "$RUN/units/seckill-order-writer.service"
log "systemd-analyze verify"
# Clean means silent: an unknown key is only a warning to systemd (exit 0), a failure here.
if ! out=$(systemd-analyze verify "$RUN"/units/*.service 2>&1) || [[ -n $out ]]; then
  printf '%s\n' "$out" >&2
  log "FAIL: systemd-analyze verify is not clean"
  exit 1
fi
log "systemd-analyze verify: clean"

unit_value() { sed -n "s/^$2=//p" "$1" | head -1; } # unit key
secs() { local v; v=$(unit_value "$1" TimeoutStopSec); echo "${v%s}"; }

# Starts UNIT's ExecStart as systemd would (its first EnvironmentFile read, $UPGRADE unset),
# waits until it listens on PORT, sends its KillSignal and waits for its exit.
run_unit() { # unit port name
  local unit=$1 port=$2 name=$3 cmd env sig stop pid t rc=0
  cmd=$(unit_value "$unit" ExecStart)
  cmd=${cmd//\$UPGRADE/}
  env=$(unit_value "$unit" EnvironmentFile)
  sig=$(unit_value "$unit" KillSignal)
  stop=$(secs "$unit")
  local argv
  read -ra argv <<<"$cmd"
  (
    set -a
    # shellcheck source=/dev/null
    . "$env"
    set +a
    cd / # systemd's default WorkingDirectory: nothing is read from the checkout
    exec "${argv[@]}"
  ) >"$RUN/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port "$name" "$port" "$RUN/$name.log"
  log "$name: started by its unit's command line ($cmd), listening on $port"
  t=$SECONDS
  kill "-${sig#SIG}" "$pid"
  for _ in $(seq 1 $((stop * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name: still running ${stop} s after $sig (TimeoutStopSec): FAIL"
    tail -n 20 "$RUN/$name.log" >&2
    return 1
  fi
  wait "$pid" || rc=$?
  log "$name: exited $rc $((SECONDS - t)) s after $sig (TimeoutStopSec ${stop} s)"
  ((rc == 0)) || { tail -n 20 "$RUN/$name.log" >&2; return 1; }
}

# The two topologies' files (conf/deploy/), as installed (paths under /etc/seckill, /var/lib,
# /run, /var/log moved here; the private addresses made loopback, though --check connects to
# nothing): `gateway --check` with the secrets and key files they name.
deploy_check() { # conf name
  local etc="$RUN/deploy/etc"
  mkdir -p "$etc" "$RUN/deploy/var" "$RUN/deploy/run" "$RUN/deploy/log"
  cp -r "$RUN/campaigns" "$etc/"
  [[ -f "$etc/acme-account.key" ]] || {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$etc/acme-account.key" 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 2>/dev/null | openssl pkey -pubout -out "$etc/auth-public.pem"
  }
  sed -e "s#/etc/seckill/#$etc/#g" -e "s#/var/lib/seckill/#$RUN/deploy/var/#g" \
    -e "s#/run/seckill/#$RUN/deploy/run/#g" -e "s#/var/log/seckill/#$RUN/deploy/log/#g" \
    -e 's#10\.0\.[0-9]*\.[0-9]*:#127.0.0.1:#g' "$1" >"$RUN/deploy/$2.toml"
  (
    set -a
    . "$RUN/gateway.env"
    REDIS_PASSWORD=$(random_key unit-redis-)
    set +a
    "$BIN/gateway" --conf "$RUN/deploy/$2.toml" --check
  ) >"$RUN/deploy/$2.check" 2>&1 || { cat "$RUN/deploy/$2.check" >&2; log "FAIL: $1 --check"; return 1; }
  log "$1: gateway --check: $(tail -n 1 "$RUN/deploy/$2.check")"
}
deploy_check conf/deploy/front-door.toml front-door
deploy_check conf/deploy/behind-nginx.toml behind-nginx
printf 'events {}\nhttp {\n    include %s;\n}\n' "$ROOT/conf/deploy/nginx-seckill.conf" >"$RUN/deploy/nginx.conf"
nginx -t -q -p "$RUN/deploy/" -c "$RUN/deploy/nginx.conf" -g "pid $RUN/deploy/nginx.pid; error_log stderr;" ||
  { log "FAIL: nginx -t on conf/deploy/nginx-seckill.conf"; exit 1; }
log "conf/deploy/nginx-seckill.conf: nginx -t: clean"

run_unit "$RUN/units/seckill-order-writer.service" "$WPORT" order-writer
run_unit "$RUN/units/seckill-gateway@blue.service" "$GPORT" gateway
log "PASS: both units verified, started from their command lines and stopped within their timeouts; the deploy files check clean"
