# shellcheck shell=bash
# Shared by the benchmark scripts (e2e/bench/*.sh), sourced first by each: the repository root as
# the working folder, e2e/lib.sh (the one build, a run's keys), the stack's addresses, the tools a
# benchmark needs, its work folder and what is stopped and deleted at its exit, and the pieces
# of a benchmark (campaigns, Redis, signed orders, CPU counters). Files beside the scripts hold
# what is not shell: wrk/*.lua, py/*.py, conf/* (filled by e2e/lib.sh `fill`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
# shellcheck source=e2e/lib.sh
source e2e/lib.sh

# The stack's addresses from .stack/env (written by e2e/stack.sh up) when VAR is not set in the
# environment already; without VAR, whenever the file is there.
bench_env() { # [VAR]
  if [[ (-z "${1:-}" || -z "${!1:-}") && -f .stack/env ]]; then
    # shellcheck disable=SC1091
    source .stack/env
  fi
}

# Installs the Debian packages of the missing commands (need_packages' command:package pairs),
# then stops when one of them, or of the COMMANDs after `--`, is still missing.
bench_tools() { # command:package... [-- command...]
  local a pairs=() cmds=() rest=""
  for a in "$@"; do
    if [[ "$a" == -- ]]; then rest=1; elif [[ -n "$rest" ]]; then cmds+=("$a"); else pairs+=("$a") cmds+=("${a%%:*}"); fi
  done
  need_packages "${pairs[@]}"
  for a in "${cmds[@]}"; do
    command -v "$a" >/dev/null || { echo "missing: $a (apt-get install it; bash e2e/stack.sh up installs the stack's)" >&2; exit 1; }
  done
}

# The run's work folder WORK (a new temporary folder, PREFIX.XXXXXX), and at exit: the processes
# of BENCH_PIDS stopped (bench_started adds to it), then the script's own `bench_cleanup` if it
# has one, then WORK removed.
BENCH_PIDS=()
bench_work() { # prefix
  WORK=$(mktemp -d -t "$1.XXXXXX")
  trap bench_exit EXIT
}
bench_started() { BENCH_PIDS+=("$@"); } # pid...
bench_exit() {
  local p
  for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  if declare -F bench_cleanup >/dev/null; then bench_cleanup || true; fi
  rm -rf "$WORK"
}

# Sets the local sold-out flag of CAMPAIGN (published with no stock) at the gateway BASE: one
# buyer's signed order (target/release/presign: captcha, token, signature) that Redis answers
# SOLD_OUT. A bare POST no longer does: it stops at the token check and never reaches Redis.
# FILE keeps the signed order, so a later call is a safe retry of it (SOLD_OUT again: the flag is
# set again, at this or another gateway on the same Redis).
sold_out_flag() { # base campaign file
  local base=$1 campaign=$2 file=$3 path auth dev ts nonce sig
  [[ -s "$file" ]] || target/release/presign --base "$base" --campaign "$campaign" --users 1 --out "$file" >/dev/null
  IFS=$'\t' read -r path auth dev ts nonce sig <"$file"
  curl -s -X POST "$base$path" -H "Authorization: $auth" -H "X-Device-Id: $dev" -H "X-Timestamp: $ts" \
    -H "X-Nonce: $nonce" -H "X-Signature: $sig" | grep -q '"SOLD_OUT"' ||
    { echo "the sold-out flag of $campaign was not set at $base" >&2; return 1; }
}

# The eight keys of campaign ID in the order every Lua script takes them as KEYS[1..8]
# (protocol/src/keys.rs).
campaign_keys() { # id
  local k
  for k in meta stock bought outbox pending released stats claims; do printf 'sk:{%s}:%s ' "$1" "$k"; done
}

# Writes FILE: a wrk script replaying presign's signed orders (one line per order, tab-separated,
# e2e/bench/src/bin/presign.rs). Its arguments after `--`: "good" or "bad" (bad forges each
# signature), wrk's thread count, the orders file; each wrk thread sends its own share, round
# robin. Prints P50_US and P99_US at the end.
signed_orders_wrk() { # file
  cp e2e/bench/wrk/signed-orders.lua "$1"
}

# The benchmarks' Redis: sets REDIS_URL (SECKILL_REDIS_URL, else the stack's), REDIS_HOST,
# REDIS_PORT and RCLI (redis-cli for it); exits when it does not answer PING.
bench_redis() {
  REDIS_URL=${SECKILL_REDIS_URL:-redis://127.0.0.1:6390}
  local hostport=${REDIS_URL#redis://}
  hostport=${hostport%%/*}
  REDIS_HOST=${hostport%:*}
  REDIS_PORT=${hostport##*:}
  RCLI=(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT")
  "${RCLI[@]}" ping >/dev/null || { echo "Redis is not answering at $(redacted_url "$REDIS_URL") (e2e/stack.sh up)" >&2; exit 1; }
}

# CPU time (user + system, clock ticks) of the processes PID..., from /proc.
cpu_ticks() { # pid...
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

# CPU time (clock ticks) of each thread name of process PID, threads of one name summed
# (`gw-worker-0`, `gw-kafka`, ...), as "name=ticks" words on one line.
thread_ticks() { # pid
  python3 e2e/bench/py/thread_ticks.py "$1"
}

# Each thread name's CPU µs per request between two `thread_ticks` lines, over N requests, the
# busiest first (names under 0.5 µs left out).
thread_cpu_per_request() { # before after n
  python3 e2e/bench/py/thread_cpu.py "$1" "$2" "$3" "$(getconf CLK_TCK)"
}

# A benchmark's campaign file FILE: ID open from an hour ago for two hours, STOCK units, no rate
# limit in the way (one load tool on one address), a proof of work of BITS (0: the captcha's cost
# is the client's, not the gateway's), tokens and timestamps that outlive the runs (orders are
# signed before them).
bench_campaign() { # file id stock bits
  local now
  now=$(date -u +%s)
  fill e2e/bench/conf/campaign.toml ID="$2" STOCK="$3" BITS="$4" \
    STARTS_AT="$(date -u -d "@$((now - 3600))" +%Y-%m-%dT%H:%M:%SZ)" \
    ENDS_AT="$(date -u -d "@$((now + 3600))" +%Y-%m-%dT%H:%M:%SZ)" >"$1"
}

