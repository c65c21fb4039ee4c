# Shared by the scripts under e2e/ (sourced, not run): the one build of every binary, a run's
# random keys and the gateway's [defense] table that reads them.
#
# Cargo resolves features over what one command selects (resolver 2): `-p gateway` alone,
# `-p backend` alone or all of them, with or without an `--example` (which brings in the
# dev-dependencies' features), each give some shared crates (tokio, hyper, fred, ...) another
# feature set, so another build of them and of everything above them. The demo, the tests and
# the benches therefore all build with this one command: the whole workspace, every binary and
# example, so whichever runs first builds for all of them and the others start at once.

# This folder (e2e/), for the files beside the scripts.
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The one thing the scripts need and do not install: Rust (rustc and cargo) at the workspace's
# `rust-version`. Says how to get it, and stops, when it is missing or older.
RUST_MIN=1.95
require_rust() {
  local v
  v=$(rustc --version 2>/dev/null | awk '{print $2}')
  if [[ -z "$v" ]] || ! printf '%s\n%s\n' "$RUST_MIN" "${v%%-*}" | sort -C -V; then
    echo "Rust $RUST_MIN or newer is needed (found: ${v:-none}); these scripts install everything else." >&2
    echo "Install it with rustup, then open a new shell:" >&2
    echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y" >&2
    exit 2
  fi
}

# Installs the Debian packages whose command is missing, as root (apt-get), or says what to
# install. Arguments are command:package pairs, e.g. wrk:wrk nginx:nginx-light.
need_packages() { # command:package...
  local pair pkgs=()
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || pkgs+=("${pair#*:}")
  done
  ((${#pkgs[@]})) || return 0
  if [[ $(id -u) != 0 ]]; then
    echo "missing: ${pkgs[*]} (sudo apt-get install -y ${pkgs[*]})" >&2
    exit 1
  fi
  echo "installing ${pkgs[*]} (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" </dev/null >/dev/null
}

# Builds every binary and example of the workspace: release, or the dev profile with `debug`.
build_all() { # [release|debug]
  require_rust
  if [[ "${1:-release}" == debug ]]; then
    cargo build --locked --workspace --bins --examples
  else
    cargo build --locked --workspace --bins --examples --release
  fi
}

# `cargo test`'s target options for the workspace's tests except the integration tests named,
# one word per line: `--test NAME` for each integration test, `--bin NAME` for each binary with
# unit tests (`test = false` in its manifest says it has none; `--bins` would build them all).
# A test file added anywhere is run without a list here to keep.
test_targets_except() { # name...
  cargo metadata --locked --no-deps --format-version 1 | python3 -c '
import json, sys
skip = set(sys.argv[1:])
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if "test" in target["kind"] and target["name"] not in skip:
            print("--test"); print(target["name"])
        elif "bin" in target["kind"] and target["test"]:
            print("--bin"); print(target["name"])
' "$@"
}

# TEMPLATE with each ${NAME} replaced by the value given as NAME=value, to stdout (the templates:
# e2e/conf/, e2e/bench/conf/).
fill() { # template NAME=value...
  local text kv key
  text=$(<"$1")
  shift
  for kv in "$@"; do
    key="\${${kv%%=*}}"
    text=${text//"$key"/"${kv#*=}"}
  done
  printf '%s\n' "$text"
}

# A random key for one run: PREFIX followed by 32 hex digits.
random_key() { # prefix
  printf '%s%s' "$1" "$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')"
}

# Exports a run's edge keys: the gateway's master key and the key of the shop's auth service the
# run plays (its login JWTs, HS256), both read by defense_table's server-file table.
edge_keys() { # prefix
  SECKILL_EDGE_KEY=$(random_key "$1-edge-")
  SECKILL_LOGIN_KEY=$(random_key "$1-login-")
  export SECKILL_EDGE_KEY SECKILL_LOGIN_KEY
}

# The [defense] table of a gateway server file, by reference to edge_keys' variables
# (e2e/conf/defense.toml).
defense_table() { cat "$E2E_DIR/conf/defense.toml"; }

# A free TCP port on loopback.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------------------------------------
# A sale on the stack of .stack/env (the demo's and the fault tests' pieces). Each function reads
# SECKILL_REDIS_URL, SECKILL_PG_ADMIN_URL, SECKILL_KAFKA_BROKER and the keys of edge_keys,
# SECKILL_GATEWAY_KEY and SECKILL_PAYMENT_KEY from the environment, and ROOT (the repository).

# The TOML list of the sale's brokers: SECKILL_KAFKA_BROKERS (comma-separated, a Kafka cluster's)
# when set, else SECKILL_KAFKA_BROKER.
brokers_toml() {
  local list=${SECKILL_KAFKA_BROKERS:-$SECKILL_KAFKA_BROKER}
  printf '["%s"]' "${list//,/\", \"}"
}

# URL with any password in it shown as *** (its user info's, a password= parameter's), for log
# lines; the Rust side's is protocol::secret::redact_url.
redacted_url() { # url
  sed -E 's#^([a-z+-]+://[^/?#@:]*):[^/?#]*@#\1:***@#; s#([?&][Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd]=)[^&#]*#\1***#' <<<"$1"
}

# The database URL of campaign ID's sale.
sale_db_url() { # id
  printf '%s/sale_%s' "${SECKILL_PG_ADMIN_URL%/*}" "$1"
}

# SECKILL_REDIS_URL for a sed replacement: a cluster URL's `&` (between its nodes) is sed's
# "whole match" there.
redis_url_for_sed() {
  printf '%s' "${SECKILL_REDIS_URL//&/\\&}"
}

# A campaign's file on stdout (e2e/conf/campaign.toml): ID, STOCK units, its window opening at STARTS_AT (an RFC 3339
# time; an hour long), every defense on (what the demo's, the fault runs' and the soak's sales
# sell). BUCKETS (environment, default 1): above 1, the campaign's stock is split over that many
# buckets (`buckets = BUCKETS`).
campaign_toml() { # id stock starts_at
  local id=$1 stock=$2 starts=$3 buckets=""
  ((${BUCKETS:-1} > 1)) && buckets="buckets = $BUCKETS"
  fill "$E2E_DIR/conf/campaign.toml" ID="$id" STOCK="$stock" BUCKETS_LINE="$buckets" STARTS_AT="$starts" \
    ENDS_AT="$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)" PAY_WINDOW_SECS="${PAY_WINDOW_SECS:-900}" POW_BITS="${POW_BITS:-8}"
}

# Writes RUN/campaigns/ID.toml (campaign_toml) and RUN/order-writer.toml, creates the sale's
# database and topic, and publishes the stock to Redis.
sale_create() { # run id stock starts_at writer_port bin_dir
  local run=$1 id=$2 stock=$3 starts=$4 wport=$5 bin=$6
  mkdir -p "$run/campaigns"
  campaign_toml "$id" "$stock" "$starts" >"$run/campaigns/$id.toml"
  sed -e "s#^listen = .*#listen = \"127.0.0.1:$wport\"#" \
    -e "s#^redis_url = .*#redis_url = \"$(redis_url_for_sed)\"#" \
    -e "s#^postgres_url = .*#postgres_url = \"$(sale_db_url "$id")\"#" \
    -e "s#^brokers = .*#brokers = $(brokers_toml)#" \
    -e "s#^topic = \"seckill.reservations\"#topic = \"reservations.$id\"#" \
    -e "s#^topic = \"seckill.order-events\"#topic = \"reservations.$id.order-events\"#" \
    -e "s#^age_secs = .*#age_secs = ${SWEEP_AGE_SECS:-10}#" \
    conf/order-writer.toml >"$run/order-writer.toml"
  printf '\n[admin]\nlisten = "127.0.0.1:%s"\n%s' "$((wport + 1000))" "$(admin_token_line)" >>"$run/order-writer.toml"
  psql "$SECKILL_PG_ADMIN_URL" -qc "CREATE DATABASE sale_$id" >/dev/null
  local ow=("$bin/order-writer" --conf "$run/order-writer.toml")
  "${ow[@]}" migrate
  "${ow[@]}" topic create
  "${ow[@]}" campaign publish "$id"
}

# What the demo's and the fault runs' sales (each a database, a topic and a campaign's Redis keys)
# leave on a long-lived stack, by SALE_CLEANUP:
#   older (default)  a run starts by deleting the sales earlier runs of its kind left, but one in
#                    use (something connected to its database: a run in progress, maybe from another
#                    checkout on the same stack) or begun less than 5 minutes ago; its own stay
#                    until the next run, so its report can be looked into
#   all              the same, and the run's own sales are deleted too when it ends
#   none             nothing is deleted
# sales_cleanup start|end PREFIX [ID] (target/<profile>/sale-cleanup, BIN): PREFIX is the run
# kind's sale ids' (demo: sale, faults: f), ID the run's own sale (kept at the start, the one
# deleted at the end; without it, the end deletes every sale of PREFIX). The sales' keys are
# looked for on SECKILL_REDIS_URL, STACK_REDIS_URL and SECKILL_REDIS_CLUSTER_URL.
sales_cleanup() { # start|end prefix [id]
  local when=$1 prefix=$2 id=${3:-} mode=${SALE_CLEANUP:-older} args=() url
  case $mode in
    older | all | none) ;;
    *) echo "SALE_CLEANUP must be older, all or none, not '$mode'" >&2; return 2 ;;
  esac
  [[ $mode == none || ($when == end && $mode != all) ]] && return 0
  args=(--pg-admin-url "$SECKILL_PG_ADMIN_URL" --broker "$SECKILL_KAFKA_BROKER")
  for url in "$SECKILL_REDIS_URL" "${STACK_REDIS_URL:-}" "${SECKILL_REDIS_CLUSTER_URL:-}"; do
    [[ -n $url && " ${args[*]} " != *" $url "* ]] && args+=(--redis "$url")
  done
  if [[ $when == start ]]; then
    args+=(--prefix "$prefix" ${id:+--keep "$id"})
  elif [[ -n $id ]]; then
    args+=(--only "$id")
  else
    args+=(--prefix "$prefix" --min-age-secs 0)
  fi
  "$BIN/sale-cleanup" "${args[@]}" || echo "sales_cleanup: some sales were not deleted (above)" >&2
}

# Writes RUN/NAME.toml: a gateway server file for campaign ID's sale listening on PORT (its
# admin listener, /metrics, on PORT + 1000), result queries to the order writer on WRITER_PORT.
gateway_conf() { # run name port id writer_port
  local run=$1 name=$2 port=$3 id=$4 wport=$5
  sed -e "s#^listen = .*#listen = \"127.0.0.1:$port\"#" \
    -e "s#^url = \"redis://.*#url = \"$(redis_url_for_sed)\"#" \
    -e "s#^upstreams = \\[\"127.0.0.1:8081\"\\]#upstreams = [\"127.0.0.1:$wport\"]#" \
    -e "s#^brokers = .*#brokers = $(brokers_toml)#" \
    -e "s#^topic = .*#topic = \"reservations.$id\"#" \
    -e "s#^upgrade_sock = .*#upgrade_sock = \"$run/$name-upgrade.sock\"#" \
    conf/server.toml >"$run/$name.toml"
  printf '\n[admin]\nlisten = "127.0.0.1:%s"\n%s' "$((port + 1000))" "$(admin_token_line)" >>"$run/$name.toml"
}

# The admin listeners' token line (by reference) when SECKILL_ADMIN_TOKEN is set: the gateways'
# /campaigns and /reload, the order writer's live view.
admin_token_line() {
  [[ -n "${SECKILL_ADMIN_TOKEN:-}" ]] && printf 'token = "env:SECKILL_ADMIN_TOKEN"\n'
  return 0
}

# Appends the order writer's [fleet] to FILE: the gateways' admin listeners on PORTS, the token
# of SECKILL_ADMIN_TOKEN (`order-writer campaign ...` and the live view reach them).
fleet_table() { # file port...
  local file=$1 list=()
  shift
  for p in "$@"; do list+=("\"127.0.0.1:$p\""); done
  printf '\n[fleet]\ngateways = [%s]\ntoken = "env:SECKILL_ADMIN_TOKEN"\n' "$(IFS=,; echo "${list[*]}")" >>"$file"
}

# Waits (20 s at most) until something listens on 127.0.0.1:PORT; else prints LOG's tail, fails.
wait_port() { # name port log
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "$1 did not listen on 127.0.0.1:$2 within 20 s; its log:" >&2
  tail -n 40 "$3" >&2
  return 1
}

# Peak resident memory (VmHWM) of process PID, in MiB, or "?" once it is gone.
peak_rss_mib() { # pid
  awk '/^VmHWM:/ {printf "%.0f", $2 / 1024; found = 1} END {if (!found) printf "?"}' \
    "/proc/$1/status" 2>/dev/null || printf '?'
}

# The PID of a server of the stack in SECKILL_STACK_DIR (default .stack): redis, postgres, kafka;
# cluster: the PIDs of its nodes, one a line.
stack_pid() { # name
  local dir=${SECKILL_STACK_DIR:-$ROOT/.stack}
  case $1 in
    redis) head -n 1 "$dir/redis/redis.pid" ;;
    postgres) head -n 1 "$dir/pg/data/postmaster.pid" ;;
    kafka) head -n 1 "$dir/kafka/kafka.pid" ;;
    cluster) cat "$dir"/cluster/*/redis.pid ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# The flood (e2e/flood.sh, FLOOD=1 bash e2e/demo.sh, and the fault `flood`): one sale with the
# waiting room off beside the same with it on.

# Appends a waiting room to the campaign file FILE: ADMIT_PER_SEC positions a second from the
# start, a pre-queue of a minute before it, a start draw of START_DRAW_MS (1000) after it,
# sessions and tickets long enough for the sale.
room_table() { # file admit_per_sec
  cat >>"$1" <<TOML

# The flood's waiting room: the rate the sale is sized for; arrivals in the minute before the
# start are drawn at random, and those in the start draw after it (after the pre-queue), then
# first come first served.
[waiting_room]
admit_per_sec = $2
pre_queue_secs = 60
start_draw_ms = ${START_DRAW_MS:-1000}
ticket_ttl_secs = 600
session_secs = 120
TOML
}

# Prints the two floods' figures side by side (the room off, then on) from their JSON reports,
# and the room's targets; exits non-zero when a report is missing.
flood_summary() { # off.json on.json
  python3 "$E2E_DIR/flood_summary.py" "$1" "$2"
}

# The order events (backend::events) of sale ID once it is over (RUN: its folder, with its
# order-writer.toml): the outbox produced (30 s at most), one event produced per transition (created = orders, paid = PAID, closed = CLOSED), and with kcat
# (e2e/interop.sh installs it) at least as many records on the events topic (a repeat after a
# fault is allowed: at least once). Sets EVENTS_OK (0: yes) and EVENTS (the figures).
# shellcheck disable=SC2034 # EVENTS_OK, EVENTS: read by the caller
order_events_check() { # id run
  local ID=$1 RUN=$2
  local db pending=1 produced transitions on_topic="?"
  db=$(sale_db_url "$ID")
  for _ in $(seq 1 60); do
    pending=$(psql "$db" -tAc "SELECT count(*) FROM order_events WHERE produced_at IS NULL" 2>/dev/null || echo 1)
    [[ "$pending" == 0 ]] && break
    sleep 0.5
  done
  produced=$(psql "$db" -tAc "SELECT count(*) FILTER (WHERE kind = 'created') || '/' || count(*) FILTER (WHERE kind = 'paid') || '/' || count(*) FILTER (WHERE kind = 'closed') FROM order_events WHERE produced_at IS NOT NULL" 2>/dev/null || echo "?")
  transitions=$(psql "$db" -tAc "SELECT count(*) || '/' || count(*) FILTER (WHERE status = 'PAID') || '/' || count(*) FILTER (WHERE status = 'CLOSED') FROM orders" 2>/dev/null || echo "!")
  EVENTS_OK=$([[ "$pending" == 0 && "$produced" == "$transitions" ]] && echo 0 || echo 1)
  if [[ $produced =~ ^[0-9]+/[0-9]+/[0-9]+$ ]] && command -v kcat >/dev/null 2>&1; then
    local brokers total # the sale's own (broker-leader's three), from its writer's conf
    brokers=$(sed -n 's/^brokers = \[\(.*\)\]/\1/p' "$RUN/order-writer.toml" | head -n 1 | tr -d '" ')
    on_topic=$(timeout 60 kcat -C -b "$brokers" -t "reservations.$ID.order-events" -o beginning -e -q -f '%o\n' 2>/dev/null | wc -l)
    total=$(( ${produced//\// + } ))
    [[ $on_topic -ge $total ]] || EVENTS_OK=1
  fi
  EVENTS="events created/paid/closed $produced produced for $transitions transitions, $pending pending, $on_topic on the topic"
}
