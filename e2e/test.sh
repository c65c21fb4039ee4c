#!/usr/bin/env bash
# All tests of the workspace against the real local stack: the README's test command, and what
# CI runs (.ci/run). Brings the stack up (installing what is missing) with its Redis Cluster,
# then checks formatting, lints, the docs (`cargo doc`, links denied), runs `cargo test --workspace` (the cluster tests need the
# cluster), the gateway beside a real Nginx (e2e/parity/), standard Kafka clients against the project's topic (e2e/interop.sh), a small
# end-to-end sale (e2e/demo.sh), the same sale on the Redis Cluster in three hot-stock buckets
# with two gateways and two order writers, the flood at a small size (FLOOD=1 e2e/demo.sh), three
# minutes of the soak (e2e/soak.sh), and the short fault tests (e2e/faults.sh --short).
# Exits non-zero on the first failure.
#
# The stack is left running if it was running before; servers this script had to start are
# stopped again when it ends, pass or fail.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

# shellcheck source=e2e/lib.sh
source e2e/lib.sh
require_rust # the one thing not installed here: it says how to get it

T0=$SECONDS
PHASE_T=$SECONDS
PHASE=""
phase_done() {
  [[ -n "$PHASE" ]] && printf '%s test: %s done in %d s\n' "$(date -u +%H:%M:%S)" "$PHASE" "$((SECONDS - PHASE_T))"
  return 0
}
phase() {
  phase_done
  PHASE=$1
  PHASE_T=$SECONDS
  printf '\n%s test: ==> %s\n' "$(date -u +%H:%M:%S)" "$PHASE"
}

# Servers that are down now are ours to stop at the end.
mapfile -t STARTED < <(bash e2e/stack.sh stopped redis postgres kafka cluster)
finish() {
  local rc=$?
  if ((${#STARTED[@]})); then
    printf '%s test: stopping what this run started: %s\n' "$(date -u +%H:%M:%S)" "${STARTED[*]}"
    bash e2e/stack.sh down "${STARTED[@]}" || rc=1
  fi
  if ((rc == 0)); then
    printf '%s test: all passed in %d s\n' "$(date -u +%H:%M:%S)" "$((SECONDS - T0))"
  else
    printf '%s test: FAILED (%s, exit %d) after %d s\n' "$(date -u +%H:%M:%S)" "${PHASE:-setup}" "$rc" "$((SECONDS - T0))" >&2
  fi
  exit "$rc"
}
trap finish EXIT

phase "stack up"
bash e2e/stack.sh up
bash e2e/stack.sh up cluster
bash e2e/stack.sh up pebble # the ACME tests' server (gateway/tests/gateway/acme.rs); needs Go
# shellcheck source=/dev/null
. .stack/env

phase "cargo fmt --check"
cargo fmt --all --check

phase "cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings

# The docs compile: a broken or private intra-doc link fails (the doctests run in cargo test).
phase "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps

phase "cargo test"
# One build, then three runs of it (all `--workspace`: the same features, nothing compiled twice): the
# gateway's integration tests four at a time, since they mostly wait on the gateway and the
# servers they start (215 s two at a time, 124 s four at a time); every other test one per core
# (four at a time made a backend test's fresh Kafka topic miss its leader within the producer's
# 3 s once in three fresh-clone runs, and the backend's binary, bound by its three lease tests,
# gains nothing); then the doctests. The build first, as a plain `cargo test --workspace` would
# make it: the examples too (the embedding test runs plugins/examples/embed.rs, and would build
# it on its own otherwise, with other features: 60 s in a fresh clone).
GATEWAY_TEST_THREADS=4
cargo test --locked --workspace --no-run
mapfile -t OTHER_TESTS < <(test_targets_except gateway)
cargo test --locked --workspace --lib "${OTHER_TESTS[@]}"
cargo test --locked --workspace --test gateway -- --test-threads "$GATEWAY_TEST_THREADS"
cargo test --locked --workspace --doc

# The gateway's tests again with one worker (cargo test ran them with two, `[server] workers`):
# a request behaves the same whichever worker takes it, and whatever their number.
# Those of the request's path: the sale's endpoints, orders, sold out, the shop's routes and
# requests (the rest, ACME, TLS, reloads, observability, have no part the workers' number
# changes, and ran above; CI's budget). `--workspace`, not `-p gateway`: the binaries `cargo
# test --workspace` built, with its features (a `-p` build unifies others and compiles again).
phase "gateway tests, one worker"
# Four tests at a time, as above (58 s two at a time, 39 s four at a time).
SECKILL_TEST_WORKERS=1 cargo test --locked --workspace --test gateway -- --test-threads "$GATEWAY_TEST_THREADS" \
  sale:: orders:: sold_out:: requests:: \
  routes:: nginx_routes:: route_limits:: workers::

# The gateway beside Debian's Nginx, request by request: each fixture of e2e/parity/ run by
# Nginx and, through `gateway import-nginx`, by the gateway, the same requests to both (1,335 with nine fixtures)
# (docs/nginx-migration.md); fails below 98 % identical.
phase "Nginx parity"
need_packages nginx:nginx-light
# The workspace's binaries, as `cargo test --workspace` just built them (nothing to compile): a
# build of some packages only (`-p`) unifies other features and compiles them all again.
build_all debug
T="${CARGO_TARGET_DIR:-target}/debug"
"$T/parity" --gateway "$T/gateway" --work .stack/parity

# The systemd units and the deploy files (conf/systemd/, conf/deploy/; docs/deploy.md): verified,
# checked, and both binaries started and stopped through the units' command lines.
phase "systemd units and deploy files"
bash e2e/units.sh

# Standard Kafka clients (kcat, kafka-python) read the project's records off the topic and check
# them against the README's format; their foreign records are dead-lettered, never orders.
phase "Kafka interop (kcat, kafka-python)"
PROFILE=debug WRITER_PORT=18281 bash e2e/interop.sh

# The whole product end to end: gateway, order writer, a crowd, and the invariants checked
# against PostgreSQL and Redis (the demo exits non-zero when one breaks). Debug binaries, just
# built by cargo test; its own ports so a running demo does not collide.
phase "end-to-end sale"
PROFILE=debug STOCK=100 USERS=2000 REQUESTS_PER_USER=2 CONCURRENCY=64 START_IN=8 PAY_WINDOW_SECS=5 \
  GATEWAY_PORT=18080 WRITER_PORT=18081 bash e2e/demo.sh

# A reservation-heavy sale: about as many buyers as units, one order each, a short pay window, so
# that most of the stock is reserved, left unpaid, closed and released, and the judge must wait
# for the closer's releases (seckill-load's wait_closed) before the report and reconcile. The
# buyers resend as the buyer's page does, and the report's `undersold = 0` invariant fails the
# phase when units were left at the burst's end while buyers went home with only TRY_LATER,
# SERVICE_DEGRADED or no answer.
phase "end-to-end sale, reservation-heavy"
PROFILE=debug STOCK=3000 USERS=3500 REQUESTS_PER_USER=1 CONCURRENCY=64 START_IN=8 PAY_WINDOW_SECS=5 \
  GATEWAY_PORT=18380 WRITER_PORT=18381 bash e2e/demo.sh

# The buyer's page in Debian's Chromium (playwright-core) on a real gateway and order writer:
# countdown and clock skew, one click to an order id, sold out, not eligible, a cut connection
# resent, 20 browsers on stock 5; then the HTML report of the sale above. Screenshots in
# .stack/browser/shots. Its own ports.
phase "buyer's page in a browser"
GATEWAY_PORT=18280 bash e2e/browser.sh

# The same sale on the Redis Cluster (SECKILL_REDIS_CLUSTER_URL, from .stack/env), its stock in
# three hot-stock buckets (one per master), with two gateway processes (the crowd round robin over
# both) and two order writers splitting the topic's partitions. Its own ports.
phase "end-to-end sale on the Redis Cluster, 3 buckets, 2 gateways, 2 writers"
PROFILE=debug STOCK=100 USERS=2000 REQUESTS_PER_USER=2 CONCURRENCY=64 START_IN=8 PAY_WINDOW_SECS=5 \
  GATEWAY_PORT=18180 WRITER_PORT=18181 REDIS_URL="$SECKILL_REDIS_CLUSTER_URL" GATEWAYS=2 WRITERS=2 \
  BUCKETS=3 bash e2e/demo.sh

# The flood, small: 500 accounts in the sale's first second (10 % at the start instant), the
# waiting room off, then on (admit_per_sec 50), stock 100; both sales' invariants judged, the
# room's targets printed as PASS/MISS (a miss does not fail it). About a minute.
phase "the flood, small (waiting room off beside on)"
FLOOD=1 PROFILE=debug STOCK=100 ADMIT_PER_SEC=50 USERS=500 START_IN=6 PAY_WINDOW_SECS=60 \
  GATEWAY_PORT=18580 WRITER_PORT=18581 bash e2e/demo.sh

# Three minutes of the soak (e2e/soak.sh; an hour by default): the shop through the gateway all
# along, a sale a minute (token, burst, pay, close, end) with a network fault in each, the gateway
# reloaded every minute; it fails on a broken promise, a shop error, or resources that grow
# between sales past their bounds (e2e/crowd/src/soak/mod.rs). A stack of its own.
phase "soak, 3 minutes"
SOAK_MINUTES=3 PROFILE=debug bash e2e/soak.sh

# The same sale under faults, short, one of each class: the order writer (alone, and three by
# lease, one killed and one paused), the broker, PostgreSQL, a crashed machine (Redis killed and
# restarted from an AOF a second old, reconcile repairing the difference), the gateway killed mid-sale and
# restarted, two gateways on one Redis, Redis paused,
# and the network faults' classes in one sale through Toxiproxy (net: a partition, latency, a
# reset, a black hole, a bandwidth cap).
# A stack of its own (e2e/faults.sh): the servers it kills are its own.
phase "faults (short)"
bash e2e/faults.sh --short

phase_done
PHASE=""
