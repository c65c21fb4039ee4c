#!/usr/bin/env bash
# Scale-out benchmark on a local 3-master Redis Cluster (e2e/stack.sh up cluster), in one run,
# same load tool (wrk), connections and duration, one hot SKU, every request a distinct buyer's
# signed order (signed beforehand by target/release/presign) answered 202 QUEUED:
#
#   (s) the peer: one gateway on the stack's single Redis, the campaign without buckets
#   (1) one gateway on the cluster, the campaign without buckets (all its keys on one master)
#   (3) one gateway on the cluster, the campaign in 3 buckets (one per master)
#   (1x2) two gateway processes on the cluster, no buckets: wrk's connections split over both,
#       as an L4 balancer would
#   (3x2) two gateway processes on the cluster, 3 buckets
#   (3b1) as (3), the gateway's `batch_max = 1` (one reserve.lua call per order, the path before
#       batching): (3)/(3b1) is what batching gives on the cluster, in the same run
#
# For each: reservations/s, p99, and the CPU microseconds per reservation of the gateway
# process(es) and of each Redis (the cluster's masters apart), from /proc over the run, plus the
# EVALSHA calls each master served. On a machine with fewer cores than processes, the cores are
# the limit, not Redis: the CPU columns show where they went, and the ratios (3)/(1) and
# (1x2)/(1) say whether spreading helped.
#
# Usage: e2e/bench/cluster.sh       Env: DURATION (6s), THREADS (2: wrk's, and each gateway's),
#                                        CONNECTIONS (100), BUYERS (100000 per run),
#                                        RUNS (the runs to make, "s 1 3 1x2 3x2 3b1")
# Needs: the stack (e2e/stack.sh up) and its cluster (e2e/stack.sh up cluster), wrk.
# shellcheck source=e2e/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_env
DURATION=${DURATION:-6s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-100}
BUYERS=${BUYERS:-100000}
RUNS=${RUNS:-s 1 3 1x2 3x2 3b1}
wanted() { [[ " $RUNS " == *" $1 "* ]]; }
SINGLE_URL=${SECKILL_REDIS_URL:?the stack is not up: bash e2e/stack.sh up}
CLUSTER_URL=${SECKILL_REDIS_CLUSTER_URL:?the cluster is not up: bash e2e/stack.sh up cluster}
bench_tools wrk:wrk curl:curl -- redis-cli python3
build_all release

bench_work cluster-bench
RUN=$(date +%s)$$
edge_keys bench

# The cluster's masters: port and PID of each (stack.sh keeps them under .stack/cluster/<port>).
STACK=${SECKILL_STACK_DIR:-$ROOT/.stack}
mapfile -t NODE_PORTS < <(ls "$STACK/cluster" | sort -n)
NODE_PIDS=()
for p in "${NODE_PORTS[@]}"; do NODE_PIDS+=("$(head -n 1 "$STACK/cluster/$p/redis.pid")"); done
SINGLE_PID=$(stack_pid redis)

# --- campaigns: a hot SKU without buckets, the same in 3 buckets, and the peer on one Redis ---
mkdir -p "$WORK/conf/campaigns"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/conf/key"
STOCK=100000000
HOT1="hot1-$RUN"
HOT3="hot3-$RUN"
PEER="peer-$RUN"
for c in "$HOT1" "$HOT3" "$PEER"; do bench_campaign "$WORK/conf/campaigns/$c.toml" "$c" "$STOCK" 0; done
sed -i "/^ends_at/a buckets = 3" "$WORK/conf/campaigns/$HOT3.toml"
target/release/publish-buckets --redis "$CLUSTER_URL" --campaign "$HOT1" --stock "$STOCK" --buckets 1
target/release/publish-buckets --redis "$CLUSTER_URL" --campaign "$HOT3" --stock "$STOCK" --buckets 3
target/release/publish-buckets --redis "$SINGLE_URL" --campaign "$PEER" --stock "$STOCK" --buckets 1

# --- gateways: two on the cluster, one on the single Redis; the shop upstream is never used ---
gateway() { # name redis_url [redis_line]; sets GW_PORT and GW_PID
  local port
  port=$(free_port)
  fill e2e/bench/conf/gateway.toml PORT="$port" WORKERS="$THREADS" REDIS_URL="$2" UPSTREAM_PORT=1 \
    TOPIC="bench-cluster-$RUN" BROKER="${SECKILL_KAFKA_BROKER:-127.0.0.1:19092}" DEFENSE="$(defense_table)" |
    sed "s/^pool_size = 4\$/pool_size = 4\n${3:-}/" >"$WORK/conf/$1.toml"
  RUST_LOG=warn target/release/gateway --conf "$WORK/conf/$1.toml" --lua-dir lua >"$WORK/$1.log" 2>&1 &
  GW_PID=$!
  GW_PORT=$port
  bench_started "$GW_PID"
  wait_port "$1" "$port" "$WORK/$1.log"
}
gateway gw1 "$CLUSTER_URL"
G1_PORT=$GW_PORT G1_PID=$GW_PID
gateway gw2 "$CLUSTER_URL"
G2_PORT=$GW_PORT G2_PID=$GW_PID
gateway gws "$SINGLE_URL"
GS_PORT=$GW_PORT GS_PID=$GW_PID
gateway gwb1 "$CLUSTER_URL" "batch_max = 1"
GB1_PORT=$GW_PORT GB1_PID=$GW_PID

# --- the buyers: one signed order each, a fresh set per run ---
presign() { # port campaign file
  target/release/presign --base "http://127.0.0.1:$1" --campaign "$2" --users "$BUYERS" --out "$3" >"$3.log"
  echo "  presigned $BUYERS orders for $2: $(head -n 1 "$3.log")"
}
echo "cluster bench: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, gateways with $THREADS threads, masters on ports ${NODE_PORTS[*]}"
wanted s && presign "$GS_PORT" "$PEER" "$WORK/s.tsv"
wanted 1 && presign "$G1_PORT" "$HOT1" "$WORK/1.tsv"
wanted 3 && presign "$G1_PORT" "$HOT3" "$WORK/3.tsv"
wanted 1x2 && presign "$G1_PORT" "$HOT1" "$WORK/1x2.tsv"
wanted 3x2 && presign "$G1_PORT" "$HOT3" "$WORK/3x2.tsv"
wanted 3b1 && presign "$GB1_PORT" "$HOT3" "$WORK/3b1.tsv"

signed_orders_wrk "$WORK/orders.lua"

HZ=$(getconf CLK_TCK)
evalsha_calls() { # port
  redis-cli -p "$1" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' | grep . || echo 0
}
# One run: wrk against each gateway port given (connections split), then the figures; the
# reservations/s also in $WORK/<key>.rps.
run() { # key label tsv gateway_pids ports...
  wanted "$1" || return 0
  local key=$1 label=$2 tsv=$3 gw_pids=$4 n=0 rps=0 p99=0 k wrks=()
  shift 4
  local ports=("$@") conns=$((CONNECTIONS / $#))
  local gw0 single0 node0=() calls0=()
  gw0=$(cpu_ticks $gw_pids)
  single0=$(cpu_ticks "$SINGLE_PID")
  for k in "${!NODE_PIDS[@]}"; do
    node0+=("$(cpu_ticks "${NODE_PIDS[$k]}")")
    calls0+=("$(evalsha_calls "${NODE_PORTS[$k]}")")
  done
  if (($# > 1)); then # each gateway its half of the buyers
    split -n "l/$#" -d "$tsv" "$WORK/$key.part."
  else
    cp "$tsv" "$WORK/$key.part.00"
  fi
  k=0
  for p in "${ports[@]}"; do
    wrk -t"$THREADS" -c"$conns" -d"$DURATION" -s "$WORK/orders.lua" "http://127.0.0.1:$p" -- \
      good "$THREADS" "$WORK/$key.part.0$k" >"$WORK/$key.$k.out" 2>&1 &
    wrks+=($!)
    k=$((k + 1))
  done
  wait "${wrks[@]}"
  for ((k = 0; k < $#; k++)); do
    rps=$(python3 -c "print($rps + $(awk '/^Requests\/sec:/ {print $2}' "$WORK/$key.$k.out"))")
    n=$((n + $(awk '/requests in/ {print $1}' "$WORK/$key.$k.out")))
    p99=$(python3 -c "print(max($p99, $(awk '/^P99_US/ {print $2}' "$WORK/$key.$k.out")))")
  done
  echo "$rps" >"$WORK/$key.rps"
  if ((n > BUYERS)); then
    echo "  ($label: $n requests for $BUYERS buyers: the rest were safe retries of orders sent before, not reservations; raise BUYERS)"
  fi
  local per_node="" calls="" nodes_ticks=0
  for k in "${!NODE_PIDS[@]}"; do
    local t=$(($(cpu_ticks "${NODE_PIDS[$k]}") - ${node0[$k]}))
    nodes_ticks=$((nodes_ticks + t))
    per_node+="$(python3 -c "print(f'{$t * 1e6 / $HZ / max(1, $n):.1f}')") "
    calls+="$(($(evalsha_calls "${NODE_PORTS[$k]}") - ${calls0[$k]})) "
  done
  python3 -c "
n = max(1, $n); hz = $HZ; rps = $rps
f = lambda t: t * 1e6 / hz / n
gw, single, nodes = f($(cpu_ticks $gw_pids) - $gw0), f($(cpu_ticks "$SINGLE_PID") - $single0), f($nodes_ticks)
busy = (gw + single + nodes) * rps / 1e6
print(f'%-34s %10.0f %8.1f %10.1f %8.1f   %-18s %-22s %5.2f' % ('$label', rps, $p99 / 1000, gw, single, '$per_node', '$calls', busy))"
}

printf '\n%-34s %10s %8s %10s %8s   %-18s %-22s %5s\n' "" "reserv./s" "p99 ms" "gw us/req" "1 Redis" "masters us/req" "EVALSHA per master" "cores"
run s "(s) single Redis, 1 gw, no buckets" "$WORK/s.tsv" "$GS_PID" "$GS_PORT"
run 1 "(1) cluster, 1 gw, 1 bucket" "$WORK/1.tsv" "$G1_PID" "$G1_PORT"
run 3 "(3) cluster, 1 gw, 3 buckets" "$WORK/3.tsv" "$G1_PID" "$G1_PORT"
run 1x2 "(1x2) cluster, 2 gw, 1 bucket" "$WORK/1x2.tsv" "$G1_PID $G2_PID" "$G1_PORT" "$G2_PORT"
run 3x2 "(3x2) cluster, 2 gw, 3 buckets" "$WORK/3x2.tsv" "$G1_PID $G2_PID" "$G1_PORT" "$G2_PORT"
run 3b1 "(3b1) as (3), batch_max = 1" "$WORK/3b1.tsv" "$GB1_PID" "$GB1_PORT"

rps() { cat "$WORK/$1.rps"; }
ratio() { # a b words: a line when both runs were made
  [[ -f "$WORK/$1.rps" && -f "$WORK/$2.rps" ]] || return 0
  echo "($1)/($2) = $(python3 -c "print(f'{float($(rps "$1"))/float($(rps "$2")):.2f}')")   $3"
}
echo
ratio 1 s "the cluster client against one Redis"
ratio 3 1 "3 buckets against 1, one gateway"
ratio 1x2 1 "two gateways against one, no buckets"
ratio 3x2 1 "two gateways and 3 buckets against one and one"
ratio 3 3b1 "3 buckets batched against batch_max = 1, one gateway"
echo "cores: what the gateways and the Redis processes kept busy (CPU per reservation x reservations/s),"
echo "of $(nproc) on this machine, shared with wrk: a run near them is limited by the cores, not by Redis."
