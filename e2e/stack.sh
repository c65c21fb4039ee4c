#!/usr/bin/env bash
# The local stack of real servers that the tests, the demo and the benchmarks run against:
#
#   Redis 7 (AOF, appendfsync everysec)    127.0.0.1:6390
#   PostgreSQL (trust auth on loopback)    127.0.0.1:5440   superuser `postgres`
#   Apache Kafka 4.4.0, KRaft, one node    127.0.0.1:19092  (its controller: port + 1)
#   Redis Cluster, 3 masters (on demand)   127.0.0.1:7390..7392 (cluster bus: port + 10000)
#   Kafka cluster, 3 nodes (on demand)     127.0.0.1:19392..19394 (controllers: port + 100)
#   Toxiproxy 2.5.0 (on demand)            127.0.0.1:18474 (its HTTP API; proxies: the caller's)
#
# Usage: e2e/stack.sh up|down|kill|status|stopped [redis|postgres|kafka|cluster|kafka-cluster|toxiproxy]...
#
# Without names a command means redis, postgres and kafka (`status` adds the clusters once they
# have been started in this folder). The clusters are started only when named.
#
# Redis Cluster (`up cluster`): three redis-server processes (`cluster-enabled yes`, AOF like the
# single Redis) keep data, log and PID file under .stack/cluster/<port>; the first `up` joins them
# with `redis-cli --cluster create ... --cluster-replicas 0` (each master gets a third of the
# slots), later ones find it created (nodes.conf). It counts as up when every node answers
# `cluster_state:ok`.
#
# Kafka: Apache Kafka's jars are resolved from Maven Central by e2e/stack/kafka/pom.xml into
# .stack/kafka-dist/<version>/libs (once; ~45 MB). Each node is one JVM (`kafka.Kafka`), combined
# broker and KRaft controller with a static quorum, its storage formatted once (`StorageTool
# format`), data, server.properties and logs under .stack/kafka (or .stack/kafka-cluster/<id>), a
# fixed heap (SECKILL_KAFKA_HEAP, 768m; SECKILL_KAFKA_CLUSTER_HEAP, 384m each). It counts as up
# when it answers a Metadata request naming itself (the cluster: naming all three brokers).
# `up kafka-cluster` starts three nodes with default.replication.factor=3 and
# min.insync.replicas=2, so a topic created there survives one node lost with every acked record.
# Topics are not created automatically: the binaries create theirs.
#
#   up       installs what is missing (apt-get: redis-server postgresql cmake python3,
#            and for Kafka openjdk-17-jre-headless and maven if absent; mvn: Apache Kafka), starts
#            the servers that are not running, waits until each answers, writes .stack/env.
#            Running it again is harmless.
#   down     stops the servers this script started (PID files), waits for them to exit.
#            Keeps their data. Running it again is harmless.
#   kill     SIGKILL of the servers this script started (PostgreSQL: `pg_ctl stop -m immediate`,
#            its crash stop): the fault tests' crash, on a stack of their own. Keeps their data.
#   status   one line per server (per node for the clusters); exit status 0 when all named servers are up, 3 otherwise.
#   stopped  prints the names of the named servers that are not running (for scripts).
#
# Everything lives under .stack/ at the repository root (ignored by git): data, logs, PID
# files, and `env`, which exports SECKILL_REDIS_URL, SECKILL_PG_ADMIN_URL and
# SECKILL_KAFKA_BROKER for the tests, SECKILL_REDIS_CLUSTER_URL when the Redis Cluster is up (fred's
# form: redis-cluster://127.0.0.1:7390?node=127.0.0.1:7391&node=127.0.0.1:7392) and
# SECKILL_KAFKA_CLUSTER_BROKERS (host:port,host:port,host:port) when the Kafka cluster is. Servers
# listen on 127.0.0.1 only. Ports can be moved with SECKILL_REDIS_PORT, SECKILL_PG_PORT,
# SECKILL_KAFKA_PORT, SECKILL_CLUSTER_PORT and SECKILL_KAFKA_CLUSTER_PORT (the first of three;
# source .stack/env after). SECKILL_STACK_DIR moves the whole folder but the Kafka jars (a second
# stack beside the first: e2e/faults.sh); SECKILL_REDIS_APPENDFSYNC (everysec, or always) is
# Redis' AOF fsync policy at its start.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STACK=${SECKILL_STACK_DIR:-$ROOT/.stack}
APPENDFSYNC=${SECKILL_REDIS_APPENDFSYNC:-everysec}
HOST=127.0.0.1
REDIS_PORT=${SECKILL_REDIS_PORT:-6390}
PG_PORT=${SECKILL_PG_PORT:-5440}
KAFKA_PORT=${SECKILL_KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=$((KAFKA_PORT + 1))
KAFKA_SASL_PORT=$((KAFKA_PORT + 2)) # SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
KAFKA_TLS_PORT=$((KAFKA_PORT + 3))  # SASL_SSL: the same mechanisms over TLS
KAFKA_SASL_USER=seckill
KAFKA_CLUSTER_PORT=${SECKILL_KAFKA_CLUSTER_PORT:-19392}
CLUSTER_PORT=${SECKILL_CLUSTER_PORT:-7390}
CLUSTER_PORTS=("$CLUSTER_PORT" "$((CLUSTER_PORT + 1))" "$((CLUSTER_PORT + 2))")
KAFKA_VERSION=4.4.0 # also in e2e/stack/kafka/pom.xml
KAFKA_HEAP=${SECKILL_KAFKA_HEAP:-768m}                 # the single broker's fixed heap
KAFKA_CLUSTER_HEAP=${SECKILL_KAFKA_CLUSTER_HEAP:-384m} # each of the three's
READY_TIMEOUT=${SECKILL_STACK_READY_TIMEOUT:-90} # seconds, per server (a JVM starts in ~10 s)
STOP_TIMEOUT=30                                  # seconds, per server
ALL=(redis postgres kafka)                         # what a command without names means
KNOWN=(redis postgres kafka cluster kafka-cluster toxiproxy) # what a command accepts

CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
export PATH="$CARGO_BIN:$PATH"

log() { printf '%s stack: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() {
  printf '%s stack: error: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
  exit 1
}

# ---------------------------------------------------------------------------------------------
# Installation

pg_bin() {
  # The newest PostgreSQL installed by Debian's packages.
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [[ -n "$d" && -x "$d/initdb" ]] && echo "$d"
}

install_missing() {
  local pkgs=()
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 ||
    pkgs+=(redis-server redis-tools)
  [[ -n "$(pg_bin)" ]] || pkgs+=(postgresql)
  command -v cmake >/dev/null 2>&1 || pkgs+=(cmake) # pingora's zlib-ng build
  command -v python3 >/dev/null 2>&1 || pkgs+=(python3)   # e2e/faults.sh reads the crowd's JSON report
  if [[ " $* " == *" kafka"* ]]; then # Apache Kafka runs on a JVM; Maven resolves its jars
    command -v java >/dev/null 2>&1 || pkgs+=(openjdk-17-jre-headless)
    command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
    command -v kcat >/dev/null 2>&1 || pkgs+=(kcat) # librdkafka's client: interop test, a partition's leader
  fi
  if ((${#pkgs[@]})); then
    [[ $(id -u) == 0 ]] || die "missing ${pkgs[*]}: run as root, or: sudo apt-get install -y ${pkgs[*]}"
    log "installing ${pkgs[*]} (apt-get)"
    local t=$SECONDS
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" </dev/null
    log "apt-get done in $((SECONDS - t)) s"
  fi
  [[ -n "$(pg_bin)" ]] || die "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin"

  # Kafka's jars are resolved only when a broker is asked for.
  [[ " $* " == *" kafka"* ]] && install_kafka
  [[ " $* " == *" toxiproxy "* ]] && install_toxiproxy
  return 0
}

# ---------------------------------------------------------------------------------------------
# Process bookkeeping

port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null; }

# alive PIDFILE NAME: the PID in PIDFILE runs a program whose command line mentions NAME.
alive() {
  local pid
  [[ -s "$1" ]] || return 1
  pid=$(head -n 1 "$1")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

pidfile() {
  case $1 in
    redis) echo "$STACK/redis/redis.pid" ;;
    postgres) echo "$STACK/pg/data/postmaster.pid" ;;
    kafka) echo "$STACK/kafka/kafka.pid" ;;
    cluster) echo "$STACK/cluster/$CLUSTER_PORT/redis.pid" ;; # its first node
    toxiproxy) echo "$STACK/toxiproxy/toxiproxy.pid" ;;
  esac
}
progname() {
  case $1 in redis | cluster) echo redis-server ;; postgres) echo postgres ;; kafka) echo kafka.Kafka ;;
    toxiproxy) echo toxiproxy-server ;; esac
}
port() {
  case $1 in
    redis) echo "$REDIS_PORT" ;;
    postgres) echo "$PG_PORT" ;;
    kafka) echo "$KAFKA_PORT" ;;
    cluster) echo "$CLUSTER_PORT" ;;
    kafka-cluster) echo "$KAFKA_CLUSTER_PORT" ;;
    toxiproxy) echo "$TOXIPROXY_PORT" ;;
  esac
}
logfile() {
  case $1 in
    redis) echo "$STACK/redis/redis.log" ;;
    postgres) echo "$STACK/pg/postgres.log" ;;
    kafka) echo "$STACK/kafka/kafka.log" ;;
    cluster) echo "$STACK/cluster/$CLUSTER_PORT/redis.log" ;;
    toxiproxy) echo "$STACK/toxiproxy/toxiproxy.log" ;;
  esac
}

running() {
  if [[ $1 == cluster ]]; then
    cluster_running
  elif [[ $1 == kafka-cluster ]]; then
    kafka_cluster_running
  else
    alive "$(pidfile "$1")" "$(progname "$1")" && port_open "$(port "$1")"
  fi
}

fail_start() {
  local name=$1 why=$2 lf
  lf=$(logfile "$name")
  printf '%s stack: error: %s did not come up: %s\n--- last lines of %s ---\n' \
    "$(date -u +%H:%M:%S)" "$name" "$why" "$lf" >&2
  tail -n 40 "$lf" >&2 2>/dev/null || echo "(no log)" >&2
  exit 1
}

# wait_ready NAME CHECK...: runs CHECK every 0.2 s until it succeeds; bounded by READY_TIMEOUT.
wait_ready() {
  local name=$1 deadline=$((SECONDS + READY_TIMEOUT))
  shift
  until "$@" >/dev/null 2>&1; do
    alive "$(pidfile "$name")" "$(progname "$name")" || fail_start "$name" "the process exited"
    ((SECONDS < deadline)) || fail_start "$name" "not ready after ${READY_TIMEOUT} s"
    sleep 0.2
  done
}

refuse_foreign_port() {
  if port_open "$(port "$1")"; then
    die "$1: port $HOST:$(port "$1") is taken by a process this script did not start; stop it or choose another port (SECKILL_$(echo "$1" | tr a-z A-Z | sed 's/POSTGRES/PG/')_PORT)"
  fi
}

# ---------------------------------------------------------------------------------------------
# Redis

redis_ping() { [[ "$(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }

up_redis() {
  local dir="$STACK/redis"
  mkdir -p "$dir"
  # The script alone writes redis.pid: with redis-server's own --pidfile on the same file, a
  # readiness check could read it in the instant Redis truncates it and call Redis dead.
  setsid redis-server --bind "$HOST" --port "$REDIS_PORT" --dir "$dir" \
    --appendonly yes --appendfsync "$APPENDFSYNC" --daemonize no \
    --logfile "$dir/redis.log" </dev/null >>"$dir/redis.log" 2>&1 &
  echo $! >"$dir/redis.pid"
  wait_ready redis redis_ping
}

# ---------------------------------------------------------------------------------------------
# Redis Cluster: three masters, no replicas. Each node is a server of its own (data, log and PID
# file under cluster/<port>); the name `cluster` means the three.

node_dir() { echo "$STACK/cluster/$1"; }
node_alive() { alive "$(node_dir "$1")/redis.pid" redis-server; }
node_info() { redis-cli -h "$HOST" -p "$1" cluster info 2>/dev/null | tr -d '\r'; }
node_ok() { node_info "$1" | grep -qx 'cluster_state:ok'; }

# Every node runs, answers, and sees the cluster's state as ok.
cluster_running() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do
    node_alive "$p" && port_open "$p" && node_ok "$p" || return 1
  done
}

# Some node runs (what down and kill act on).
cluster_alive() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do node_alive "$p" && return 0; done
  return 1
}

# The slots have been handed out already (by an earlier `up`: the nodes keep it in nodes.conf).
cluster_created() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do
    node_info "$p" | grep -q '^cluster_slots_assigned:[1-9]' && return 0
  done
  return 1
}

fail_node() { # port why
  printf '%s stack: error: cluster node %s did not come up: %s\n--- last lines of %s ---\n' \
    "$(date -u +%H:%M:%S)" "$1" "$2" "$(node_dir "$1")/redis.log" >&2
  tail -n 40 "$(node_dir "$1")/redis.log" >&2 2>/dev/null || echo "(no log)" >&2
  exit 1
}

up_node() { # port
  local p=$1 dir deadline
  dir=$(node_dir "$p")
  mkdir -p "$dir"
  if node_alive "$p"; then
    port_open "$p" && return 0
    log "cluster node $p (pid $(head -n 1 "$dir/redis.pid")) does not answer: restarting"
    stop_node "$p"
  fi
  port_open "$p" &&
    die "cluster: port $HOST:$p is taken by a process this script did not start; stop it or choose another port (SECKILL_CLUSTER_PORT)"
  port_open "$((p + 10000))" &&
    die "cluster: bus port $HOST:$((p + 10000)) is taken by a process this script did not start (SECKILL_CLUSTER_PORT)"
  setsid redis-server --bind "$HOST" --port "$p" --dir "$dir" \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
    --appendonly yes --appendfsync "$APPENDFSYNC" --daemonize no \
    --logfile "$dir/redis.log" </dev/null >>"$dir/redis.log" 2>&1 &
  echo $! >"$dir/redis.pid"
  deadline=$((SECONDS + READY_TIMEOUT))
  until [[ "$(redis-cli -h "$HOST" -p "$p" ping 2>/dev/null)" == PONG ]]; do
    node_alive "$p" || fail_node "$p" "the process exited"
    ((SECONDS < deadline)) || fail_node "$p" "not ready after ${READY_TIMEOUT} s"
    sleep 0.2
  done
}

up_cluster() {
  local p nodes=() deadline
  for p in "${CLUSTER_PORTS[@]}"; do
    up_node "$p"
    nodes+=("$HOST:$p")
  done
  if ! cluster_created; then
    log "cluster: redis-cli --cluster create ${nodes[*]} --cluster-replicas 0"
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
      >>"$(node_dir "$CLUSTER_PORT")/create.log" 2>&1 || {
      tail -n 20 "$(node_dir "$CLUSTER_PORT")/create.log" >&2
      die "redis-cli --cluster create failed"
    }
  fi
  deadline=$((SECONDS + READY_TIMEOUT))
  for p in "${CLUSTER_PORTS[@]}"; do
    until node_ok "$p"; do
      node_alive "$p" || fail_node "$p" "the process exited"
      ((SECONDS < deadline)) || fail_node "$p" "no cluster_state:ok after ${READY_TIMEOUT} s"
      sleep 0.2
    done
  done
}

# SIGTERM to one node, then wait (bounded), then SIGKILL.
stop_node() { # port
  stop_pidfile "cluster node $1" "$(node_dir "$1")/redis.pid"
}

down_cluster() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do node_alive "$p" && stop_node "$p"; done
  return 0
}

kill_cluster() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do node_alive "$p" && kill_pidfile "$(node_dir "$p")/redis.pid"; done
  return 0
}

# fred's URL of the cluster: the first node, the others as `node` parameters.
cluster_url() {
  printf 'redis-cluster://%s:%s?node=%s:%s&node=%s:%s' "$HOST" "${CLUSTER_PORTS[0]}" \
    "$HOST" "${CLUSTER_PORTS[1]}" "$HOST" "${CLUSTER_PORTS[2]}"
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL (runs as the `postgres` OS user when this script runs as root: initdb refuses root)

as_pg() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_ready() { "$(pg_bin)/pg_isready" -q -h "$HOST" -p "$PG_PORT" -U postgres -d postgres; }

up_postgres() {
  local bin dir="$STACK/pg" data="$STACK/pg/data" run="$STACK/pg/run" d
  bin=$(pg_bin)
  mkdir -p "$run"
  if [[ $(id -u) == 0 ]]; then
    id postgres >/dev/null 2>&1 || die "the postgres OS user does not exist (apt-get install postgresql creates it)"
    touch "$dir/postgres.log"
    chown postgres: "$dir" "$run" "$dir/postgres.log"
    [[ -d "$data" ]] && chown -R postgres: "$data"
    # The server must reach its data: give the postgres user search permission on the parents.
    d="$dir"
    while [[ "$d" != / ]]; do
      d=$(dirname "$d")
      if ! runuser -u postgres -- test -x "$d"; then
        log "granting search permission (o+x) on $d so that the postgres user can reach .stack/pg"
        chmod o+x "$d"
      fi
    done
  fi
  if [[ ! -s "$data/PG_VERSION" ]]; then
    log "initdb $data"
    rm -rf "$data"
    as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C \
      >>"$dir/postgres.log" 2>&1 || fail_start postgres "initdb failed"
    cat >>"$data/postgresql.conf" <<EOF

# e2e/stack.sh: loopback only, many parallel tests.
listen_addresses = '$HOST'
max_connections = 400
EOF
  fi
  # Port, address and socket folder are given at each start so SECKILL_PG_PORT applies.
  as_pg "$bin/pg_ctl" -D "$data" -l "$dir/postgres.log" -s -w -t "$READY_TIMEOUT" \
    -o "-h $HOST -p $PG_PORT -k '$run'" start || fail_start postgres "pg_ctl start failed"
  wait_ready postgres pg_ready
}

down_postgres() {
  as_pg "$(pg_bin)/pg_ctl" -D "$STACK/pg/data" -s -w -t "$STOP_TIMEOUT" -m fast stop ||
    die "postgres did not stop within ${STOP_TIMEOUT} s (see $(logfile postgres))"
}

# ---------------------------------------------------------------------------------------------
# Apache Kafka (KRaft). The jars come from Maven Central through e2e/stack/kafka/pom.xml into
# $KAFKA_DIST/libs (one copy per version, shared by every stack of this checkout); each broker is
# one JVM, `kafka.Kafka server.properties`, combined broker + controller, data and log in its
# folder. Storage is formatted once (meta.properties); later starts find it.

KAFKA_DIST=$ROOT/.stack/kafka-dist/$KAFKA_VERSION

kafka_installed() { [[ -f "$KAFKA_DIST/complete" ]]; }

install_kafka() {
  kafka_installed && return 0
  command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install maven)"
  mkdir -p "$KAFKA_DIST"
  (
    flock -w 600 9 || die "timed out waiting for another Kafka install"
    kafka_installed && exit 0
    log "resolving Apache Kafka $KAFKA_VERSION from Maven Central (e2e/stack/kafka/pom.xml)"
    local t=$SECONDS
    rm -rf "$KAFKA_DIST/libs"
    mvn -q -B -f "$ROOT/e2e/stack/kafka/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$KAFKA_DIST/libs" </dev/null >"$KAFKA_DIST/mvn.log" 2>&1 || {
      tail -n 30 "$KAFKA_DIST/mvn.log" >&2
      die "mvn could not resolve Apache Kafka $KAFKA_VERSION (log: $KAFKA_DIST/mvn.log)"
    }
    [[ -f "$KAFKA_DIST/libs/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "mvn did not bring kafka_2.13-$KAFKA_VERSION.jar"
    touch "$KAFKA_DIST/complete"
    log "Apache Kafka $KAFKA_VERSION resolved in $((SECONDS - t)) s"
  ) 9>"$ROOT/.stack/kafka-dist.lock"
}

# jvm_args HEAP LOG: sets JVM to the java options of a Kafka process (the Kafka classpath, a fixed
# heap, its log4j log in LOG).
jvm_args() {
  JVM=("-Xms$1" "-Xmx$1" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$ROOT/e2e/stack/kafka/log4j2.properties" "-Dkafka.log.file=$2"
    -cp "$KAFKA_DIST/libs/*")
}

# Metadata v4 with every topic (a null topic array): the answer must carry correlation id 7 and at
# least WANT brokers. A broker answers it only once it has joined the quorum and registered.
kafka_metadata() { # port want
  local reply n
  reply=$(timeout 2 bash -c '
    exec 3<>/dev/tcp/$0/$1 || exit 1
    printf "\x00\x00\x00\x13\x00\x03\x00\x04\x00\x00\x00\x07\x00\x04seck\xff\xff\xff\xff\x00" >&3
    head -c 16 <&3 | od -An -v -tx1 | tr -d " \n"' "$HOST" "$1" 2>/dev/null) || return 1
  [[ "${reply:8:8}" == "00000007" ]] || return 1
  n=$((16#${reply:24:8}))
  ((n >= $2))
}
kafka_ready() { kafka_metadata "$KAFKA_PORT" 1; }

# write_kafka_conf DIR NODE_ID PORT CONTROLLER_PORT VOTERS REPLICAS [SECURE]: DIR/server.properties.
# With SECURE (the single broker), two more listeners: SASL_PLAINTEXT on KAFKA_SASL_PORT and
# SASL_SSL on KAFKA_TLS_PORT (the certificate of DIR/tls), PLAIN and SCRAM-SHA-256/512 on both,
# for the user KAFKA_SASL_USER with the password of DIR/sasl.password (SCRAM's credentials are
# written into the storage when it is formatted).
write_kafka_conf() {
  local dir=$1 id=$2 port=$3 cport=$4 voters=$5 replicas=$6 secure=${7:-} min_isr
  local listeners="PLAINTEXT://$HOST:$port,CONTROLLER://$HOST:$cport"
  local advertised="PLAINTEXT://$HOST:$port"
  local protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
  if [[ -n $secure ]]; then
    listeners+=",SASL_PLAINTEXT://$HOST:$KAFKA_SASL_PORT,SASL_SSL://$HOST:$KAFKA_TLS_PORT"
    advertised+=",SASL_PLAINTEXT://$HOST:$KAFKA_SASL_PORT,SASL_SSL://$HOST:$KAFKA_TLS_PORT"
    protocols+=",SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    kafka_proxied_listeners listeners advertised protocols
  fi
  min_isr=$((replicas > 1 ? 2 : 1))
  cat >"$dir/server.properties" <<EOF
# Written by e2e/stack.sh: one combined broker + controller of the test stack, loopback only.
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$dir/data
num.network.threads=2
num.io.threads=4
num.partitions=1
default.replication.factor=$replicas
min.insync.replicas=$min_isr
offsets.topic.replication.factor=$replicas
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=$min_isr
share.coordinator.state.topic.replication.factor=$replicas
share.coordinator.state.topic.min.isr=$min_isr
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
# The stack lives on one disk of a test machine: keep a week, in 256 MiB segments.
log.retention.hours=168
log.segment.bytes=268435456
EOF
  [[ -n $secure ]] || return 0
  local pw l m
  pw=$(cat "$dir/sasl.password")
  {
    echo "# SASL on the two secured listeners; TLS with the stack's own CA (e2e/stack.sh kafka_tls)."
    echo "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    for l in sasl_plaintext sasl_ssl; do
      echo "listener.name.$l.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USER=\"$pw\";"
      for m in scram-sha-256 scram-sha-512; do
        echo "listener.name.$l.$m.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
      done
    done
    echo "ssl.keystore.type=PEM"
    echo "ssl.keystore.location=$dir/tls/broker.pem"
  } >>"$dir/server.properties"
}

# kafka_secrets DIR: the SASL password (random, once) and the TLS files: a CA of the stack's own
# (DIR/tls/ca.pem, what clients trust) and the broker's key and certificate for 127.0.0.1 and
# localhost in DIR/tls/broker.pem (PEM key store). Made once; kept with the data.
kafka_secrets() {
  local dir=$1 t=$1/tls
  [[ -s "$dir/sasl.password" ]] || (umask 077 && od -An -tx8 -N16 /dev/urandom | tr -d ' \n' >"$dir/sasl.password")
  [[ -s "$t/broker.pem" && -s "$t/ca.pem" ]] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl not found (apt-get install openssl)"
  mkdir -p "$t"
  (
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=seckill test stack CA" \
      -keyout "$t/ca.key" -out "$t/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$t/broker.key" -out "$t/broker.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$t/ext"
    openssl x509 -req -in "$t/broker.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial -days 3650 \
      -extfile "$t/ext" -out "$t/broker.crt" 2>/dev/null
    openssl pkcs8 -topk8 -nocrypt -in "$t/broker.key" -out "$t/broker.pk8"
    cat "$t/broker.pk8" "$t/broker.crt" "$t/ca.pem" >"$t/broker.pem"
  ) || die "could not make the Kafka test certificates in $t (openssl)"
}

# start_kafka_node DIR CLUSTER_ID HEAP [SECURE]: formats DIR/data once (with SECURE, the SCRAM
# credentials of KAFKA_SASL_USER), starts the JVM, writes DIR/kafka.pid.
start_kafka_node() {
  local dir=$1 cluster_id=$2 heap=$3 secure=${4:-} JVM scram=() pw
  if [[ -n $secure ]]; then
    pw=$(cat "$dir/sasl.password")
    scram=(--add-scram "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$pw]"
      --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$pw]")
    # A storage formatted before the secured listeners existed has no SCRAM users: the test
    # stack's data is made again (its topics are tests' own).
    [[ -f "$dir/data/meta.properties" && ! -f "$dir/data/.seckill-scram" ]] && rm -rf "$dir/data"
  fi
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    mkdir -p "$dir/data"
    jvm_args 256m "$dir/kafka.log"
    java "${JVM[@]}" kafka.tools.StorageTool format --ignore-formatted \
      -t "$cluster_id" -c "$dir/server.properties" "${scram[@]}" </dev/null >>"$dir/kafka.out" 2>&1 ||
      die "formatting the Kafka storage in $dir failed (see $dir/kafka.out)"
    [[ -n $secure ]] && touch "$dir/data/.seckill-scram"
  fi
  # The script alone writes kafka.pid (as for Redis); the JVM's own output goes to kafka.out.
  jvm_args "$heap" "$dir/kafka.log"
  setsid java "${JVM[@]}" kafka.Kafka "$dir/server.properties" </dev/null >>"$dir/kafka.out" 2>&1 &
  echo $! >"$dir/kafka.pid"
}

# A cluster id is 16 bytes in URL-safe base64 without padding (what `kafka-storage random-uuid`
# prints), never starting with '-' (Kafka's own rule: the storage tool would read it as an
# option); the stack keeps one per folder.
cluster_id() { # file
  [[ -s "$1" && "$(head -c 1 "$1")" != - ]] || python3 -c '
import base64, uuid
while True:
    i = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not i.startswith("-"):
        print(i)
        break' >"$1"
  cat "$1"
}

up_kafka() {
  local dir="$STACK/kafka"
  mkdir -p "$dir"
  kafka_secrets "$dir"
  write_kafka_conf "$dir" 1 "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "1@$HOST:$KAFKA_CONTROLLER_PORT" 1 secure
  start_kafka_node "$dir" "$(cluster_id "$dir/cluster.id")" "$KAFKA_HEAP" secure
  wait_ready kafka kafka_ready
}

# Kafka cluster: three combined brokers + controllers (node ids 1..3), one quorum, every topic
# with 3 replicas and min.insync.replicas=2. The name `kafka-cluster` means the three.
kcluster_dir() { echo "$STACK/kafka-cluster/$1"; } # node id
kcluster_port() { echo "$((KAFKA_CLUSTER_PORT + $1 - 1))"; }
kcluster_cport() { echo "$((KAFKA_CLUSTER_PORT + 100 + $1 - 1))"; }
kcluster_alive() { alive "$(kcluster_dir "$1")/kafka.pid" kafka.Kafka; }
kcluster_brokers() {
  local n out=()
  for n in 1 2 3; do out+=("$HOST:$(kcluster_port "$n")"); done
  (IFS=,; echo "${out[*]}")
}

kafka_cluster_running() {
  local n
  for n in 1 2 3; do
    kcluster_alive "$n" && kafka_metadata "$(kcluster_port "$n")" 3 || return 1
  done
}

kafka_cluster_any_alive() {
  local n
  for n in 1 2 3; do kcluster_alive "$n" && return 0; done
  return 1
}

up_kafka_cluster() {
  local n dir voters="" id deadline
  mkdir -p "$STACK/kafka-cluster"
  id=$(cluster_id "$STACK/kafka-cluster/cluster.id")
  for n in 1 2 3; do voters+="${voters:+,}$n@$HOST:$(kcluster_cport "$n")"; done
  for n in 1 2 3; do
    dir=$(kcluster_dir "$n")
    mkdir -p "$dir"
    kcluster_alive "$n" && continue
    port_open "$(kcluster_port "$n")" &&
      die "kafka-cluster: port $HOST:$(kcluster_port "$n") is taken by a process this script did not start (SECKILL_KAFKA_CLUSTER_PORT)"
    write_kafka_conf "$dir" "$n" "$(kcluster_port "$n")" "$(kcluster_cport "$n")" "$voters" 3
    start_kafka_node "$dir" "$id" "$KAFKA_CLUSTER_HEAP"
  done
  deadline=$((SECONDS + READY_TIMEOUT))
  for n in 1 2 3; do
    until kafka_metadata "$(kcluster_port "$n")" 3 >/dev/null 2>&1; do
      kcluster_alive "$n" || fail_kafka_node "$n" "the process exited"
      ((SECONDS < deadline)) || fail_kafka_node "$n" "not ready with 3 brokers after ${READY_TIMEOUT} s"
      sleep 0.2
    done
  done
}

fail_kafka_node() { # node why
  printf '%s stack: error: kafka-cluster node %s did not come up: %s\n--- last lines of %s ---\n' \
    "$(date -u +%H:%M:%S)" "$1" "$2" "$(kcluster_dir "$1")/kafka.log" >&2
  tail -n 40 "$(kcluster_dir "$1")/kafka.log" >&2 2>/dev/null || echo "(no log)" >&2
  tail -n 20 "$(kcluster_dir "$1")/kafka.out" >&2 2>/dev/null || true
  exit 1
}

down_kafka_cluster() {
  local n
  for n in 1 2 3; do kcluster_alive "$n" && stop_pidfile "kafka-cluster node $n" "$(kcluster_dir "$n")/kafka.pid"; done
  return 0
}

kill_kafka_cluster() {
  local n
  for n in 1 2 3; do kcluster_alive "$n" && kill_pidfile "$(kcluster_dir "$n")/kafka.pid"; done
  return 0
}

status_kafka_cluster() {
  local n dir ok=0
  for n in 1 2 3; do
    dir=$(kcluster_dir "$n")
    if kcluster_alive "$n" && kafka_metadata "$(kcluster_port "$n")" 1; then
      printf '%-13s up    %s:%s  pid %s  log %s\n' kafka-cluster "$HOST" "$(kcluster_port "$n")" \
        "$(head -n 1 "$dir/kafka.pid")" "$dir/kafka.log"
    elif kcluster_alive "$n"; then
      printf '%-13s hung  %s:%s  process alive, no Metadata answer  log %s\n' kafka-cluster "$HOST" "$(kcluster_port "$n")" "$dir/kafka.log"
      ok=3
    else
      printf '%-13s down  %s:%s\n' kafka-cluster "$HOST" "$(kcluster_port "$n")"
      ok=3
    fi
  done
  return $ok
}

# ---------------------------------------------------------------------------------------------
# Toxiproxy (Shopify's TCP fault proxy, e2e/faults.sh's network faults): its server from the Go
# module proxy (`go install github.com/Shopify/toxiproxy/v2/cmd/server@TOXIPROXY_VERSION`, once,
# shared by every stack of this checkout; the module names the command `server`, kept as
# .stack/bin/toxiproxy-server), one process listening on 127.0.0.1:SECKILL_TOXIPROXY_PORT (its
# HTTP API; `up toxiproxy` installs it when missing). It starts with no proxy: its caller creates them through the API. Counts as up
# when GET /version answers. With SECKILL_KAFKA_PROXIED="NAME:PORT:ADVERTISED ..." the single
# Kafka broker gets one more PLAINTEXT listener per entry, bound to PORT and advertising
# ADVERTISED (a proxy's listen port in front of PORT), so a client bootstrapped through that proxy
# keeps talking through it (a broker's Metadata names the advertised address).

TOXIPROXY_VERSION=v2.5.0
TOXIPROXY_PORT=${SECKILL_TOXIPROXY_PORT:-18474}
TOXIPROXY_BIN=$ROOT/.stack/bin/toxiproxy-server

install_toxiproxy() {
  [[ -x "$TOXIPROXY_BIN" ]] && return 0
  command -v go >/dev/null 2>&1 || die "go not found (Toxiproxy is installed with go install)"
  mkdir -p "$ROOT/.stack/bin"
  (
    flock -w 600 9 || die "timed out waiting for another Toxiproxy install"
    [[ -x "$TOXIPROXY_BIN" ]] && exit 0
    log "installing toxiproxy-server $TOXIPROXY_VERSION (go install, from the Go module proxy)"
    local t=$SECONDS
    GOBIN="$ROOT/.stack/bin/toxiproxy" GOFLAGS=-buildvcs=false go install \
      "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" </dev/null \
      >"$ROOT/.stack/bin/toxiproxy-install.log" 2>&1 || {
      tail -n 20 "$ROOT/.stack/bin/toxiproxy-install.log" >&2
      die "go install of Toxiproxy's server failed (log: .stack/bin/toxiproxy-install.log)"
    }
    mv "$ROOT/.stack/bin/toxiproxy/server" "$TOXIPROXY_BIN"
    log "toxiproxy-server installed in $((SECONDS - t)) s"
  ) 9>"$ROOT/.stack/bin/toxiproxy.lock"
}

toxiproxy_ready() { curl -sf --max-time 1 "http://$HOST:$TOXIPROXY_PORT/version" >/dev/null; }

up_toxiproxy() {
  local dir="$STACK/toxiproxy"
  mkdir -p "$dir"
  # Its own log at warn: at its default it writes a trace line per connection event (50 MB a run).
  LOG_LEVEL=warn setsid "$TOXIPROXY_BIN" -host "$HOST" -port "$TOXIPROXY_PORT" </dev/null >>"$dir/toxiproxy.log" 2>&1 &
  echo $! >"$dir/toxiproxy.pid"
  wait_ready toxiproxy toxiproxy_ready
}

# The Kafka listeners of SECKILL_KAFKA_PROXIED: NAME:PORT:ADVERTISED entries, space-separated.
kafka_proxied_listeners() { # listeners advertised protocols: the three variables' names
  local e name bind adv
  for e in ${SECKILL_KAFKA_PROXIED:-}; do
    IFS=: read -r name bind adv <<<"$e"
    printf -v "$1" '%s,%s://%s:%s' "${!1}" "$name" "$HOST" "$bind"
    printf -v "$2" '%s,%s://%s:%s' "${!2}" "$name" "$HOST" "$adv"
    printf -v "$3" '%s,%s:PLAINTEXT' "${!3}" "$name"
  done
}

# ---------------------------------------------------------------------------------------------
# Commands

# stop_pid NAME: SIGTERM to the PID of our PID file, then wait (bounded), then SIGKILL.
stop_pid() {
  stop_pidfile "$1" "$(pidfile "$1")"
}

# kill_pidfile FILE: SIGKILL to the PID in FILE, waits (bounded) until it is gone, removes FILE.
kill_pidfile() {
  local pid
  pid=$(head -n 1 "$1")
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  rm -f "$1"
}

# stop_pidfile LABEL FILE: SIGTERM to the PID in FILE, then wait (bounded), then SIGKILL; removes
# FILE.
stop_pidfile() {
  local name=$1 pf=$2 pid deadline
  pid=$(head -n 1 "$pf")
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "$name (pid $pid) still running after ${STOP_TIMEOUT} s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.1
  done
  rm -f "$pf"
}

write_env() {
  cat >"$STACK/env" <<EOF
# Written by e2e/stack.sh up: where the local stack listens. Source it: . .stack/env
export SECKILL_REDIS_URL=redis://$HOST:$REDIS_PORT
export SECKILL_PG_ADMIN_URL=postgres://postgres@$HOST:$PG_PORT/postgres
export SECKILL_KAFKA_BROKER=$HOST:$KAFKA_PORT
export SECKILL_KAFKA_SASL_BROKER=$HOST:$KAFKA_SASL_PORT
export SECKILL_KAFKA_TLS_BROKER=$HOST:$KAFKA_TLS_PORT
export SECKILL_KAFKA_SASL_USER=$KAFKA_SASL_USER
export SECKILL_KAFKA_SASL_PASSWORD_FILE=$STACK/kafka/sasl.password
export SECKILL_KAFKA_CA_FILE=$STACK/kafka/tls/ca.pem
EOF
  if cluster_running; then
    echo "export SECKILL_REDIS_CLUSTER_URL='$(cluster_url)'" >>"$STACK/env"
  fi
  if kafka_cluster_running; then
    echo "export SECKILL_KAFKA_CLUSTER_BROKERS=$(kcluster_brokers)" >>"$STACK/env"
  fi
  if running toxiproxy; then
    echo "export SECKILL_TOXIPROXY_URL=http://$HOST:$TOXIPROXY_PORT" >>"$STACK/env"
  fi
}

cmd_up() {
  install_missing "$@"
  mkdir -p "$STACK"
  local s
  for s in "$@"; do
    if running "$s"; then
      log "$s already up on $HOST:$(port "$s")"
      continue
    fi
    if [[ $s == cluster ]]; then # each node is checked and started on its own
      local t=$SECONDS
      up_cluster
      log "cluster up on $HOST:${CLUSTER_PORTS[0]}..${CLUSTER_PORTS[2]} ($((SECONDS - t)) s)"
      continue
    fi
    if [[ $s == kafka-cluster ]]; then
      local t=$SECONDS
      up_kafka_cluster
      log "kafka-cluster up on $(kcluster_brokers) ($((SECONDS - t)) s)"
      continue
    fi
    if alive "$(pidfile "$s")" "$(progname "$s")"; then
      # Ours, but not answering on its port: a half-started or wedged server. Restart it.
      log "$s (pid $(head -n 1 "$(pidfile "$s")")) does not answer on $HOST:$(port "$s"): restarting"
      cmd_down "$s"
    fi
    refuse_foreign_port "$s"
    local t=$SECONDS
    "up_$s"
    log "$s up on $HOST:$(port "$s") ($((SECONDS - t)) s)"
  done
  write_env
  log "addresses written to ${STACK#$ROOT/}/env"
}

cmd_down() {
  local s
  for s in "$@"; do
    if [[ $s == cluster ]]; then
      if cluster_alive; then down_cluster && log "cluster stopped"; else log "cluster is not running"; fi
      continue
    fi
    if [[ $s == kafka-cluster ]]; then
      if kafka_cluster_any_alive; then down_kafka_cluster && log "kafka-cluster stopped"; else log "kafka-cluster is not running"; fi
      continue
    fi
    if ! alive "$(pidfile "$s")" "$(progname "$s")"; then
      log "$s is not running"
      [[ $s == postgres ]] || rm -f "$(pidfile "$s")"
      continue
    fi
    if [[ $s == postgres ]]; then down_postgres; else stop_pid "$s"; fi
    log "$s stopped"
  done
}

cmd_kill() {
  local s pid
  for s in "$@"; do
    if [[ $s == cluster ]]; then
      if cluster_alive; then kill_cluster && log "cluster killed"; else log "cluster is not running"; fi
      continue
    fi
    if [[ $s == kafka-cluster ]]; then
      if kafka_cluster_any_alive; then kill_kafka_cluster && log "kafka-cluster killed"; else log "kafka-cluster is not running"; fi
      continue
    fi
    if ! alive "$(pidfile "$s")" "$(progname "$s")"; then
      log "$s is not running"
      continue
    fi
    pid=$(head -n 1 "$(pidfile "$s")")
    if [[ $s == postgres ]]; then
      as_pg "$(pg_bin)/pg_ctl" -D "$STACK/pg/data" -s -w -t "$STOP_TIMEOUT" -m immediate stop ||
        die "postgres did not stop within ${STOP_TIMEOUT} s (see $(logfile postgres))"
    else
      kill_pidfile "$(pidfile "$s")"
    fi
    log "$s (pid $pid) killed"
  done
}

cmd_status() {
  local s all_up=0 pid
  for s in "$@"; do
    if [[ $s == cluster ]]; then
      status_cluster || all_up=3
      continue
    fi
    if [[ $s == kafka-cluster ]]; then
      status_kafka_cluster || all_up=3
      continue
    fi
    if running "$s"; then
      pid=$(head -n 1 "$(pidfile "$s")")
      printf '%-9s up    %s:%s  pid %s  log %s\n' "$s" "$HOST" "$(port "$s")" "$pid" "$(logfile "$s")"
    elif alive "$(pidfile "$s")" "$(progname "$s")"; then
      printf '%-9s hung  %s:%s  process alive, port closed  log %s\n' "$s" "$HOST" "$(port "$s")" "$(logfile "$s")"
      all_up=3
    else
      printf '%-9s down  %s:%s\n' "$s" "$HOST" "$(port "$s")"
      all_up=3
    fi
  done
  return $all_up
}

# One line per cluster node; fails unless every node is up with cluster_state:ok.
status_cluster() {
  local p dir state ok=0
  for p in "${CLUSTER_PORTS[@]}"; do
    dir=$(node_dir "$p")
    if node_alive "$p" && port_open "$p"; then
      state=$(node_info "$p" | sed -n 's/^cluster_state://p')
      printf '%-9s up    %s:%s  pid %s  cluster_state:%s  log %s\n' cluster "$HOST" "$p" \
        "$(head -n 1 "$dir/redis.pid")" "${state:-?}" "$dir/redis.log"
      [[ $state == ok ]] || ok=3
    elif node_alive "$p"; then
      printf '%-9s hung  %s:%s  process alive, port closed  log %s\n' cluster "$HOST" "$p" "$dir/redis.log"
      ok=3
    else
      printf '%-9s down  %s:%s\n' cluster "$HOST" "$p"
      ok=3
    fi
  done
  return $ok
}

cmd_stopped() {
  local s
  for s in "$@"; do running "$s" || echo "$s"; done
}

main() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  local services=("$@")
  if ((${#services[@]} == 0)); then
    services=("${ALL[@]}")
    [[ $cmd == status && -d "$STACK/cluster" ]] && services+=(cluster)
    [[ $cmd == status && -d "$STACK/kafka-cluster" ]] && services+=(kafka-cluster)
  fi
  local s
  for s in "${services[@]}"; do
    [[ " ${KNOWN[*]} " == *" $s "* ]] || die "unknown server '$s' (one of: ${KNOWN[*]})"
  done
  case $cmd in
    up) cmd_up "${services[@]}" ;;
    down) cmd_down "${services[@]}" ;;
    kill) cmd_kill "${services[@]}" ;;
    status) cmd_status "${services[@]}" ;;
    stopped) cmd_stopped "${services[@]}" ;;
    *)
      echo "usage: $0 up|down|kill|status|stopped [${KNOWN[*]}]..." >&2
      exit 2
      ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# Pebble, Let's Encrypt's ACME test server (the gateway's ACME tests start their own, each on its
# own loopback ports: nothing runs here). `up pebble` installs it (e2e/test.sh does; `up`
# without names does not, so the demo needs no Go). Built from the Go module proxy into $STACK/bin/pebble
# (`go install`, GOBIN there), once: a binary that reports the pinned version is kept. Needs Go
# 1.21 or newer (it fetches the toolchain Pebble's go.mod asks for, GOTOOLCHAIN=auto).
PEBBLE_MODULE=github.com/letsencrypt/pebble/v2
PEBBLE_VERSION=v2.10.3 # also named by gateway/tests/gateway/pebble.rs
install_pebble() {
  local bin=$STACK/bin/pebble t
  if ! command -v go >/dev/null 2>&1; then
    [[ -x $bin ]] && return 0 # built before; its version cannot be read without Go
    die "Pebble needs Go 1.21 or newer to build (https://go.dev/dl/, then put go/bin on PATH)"
  fi
  go version -m "$bin" 2>/dev/null | grep -q "mod[[:space:]]*$PEBBLE_MODULE[[:space:]]*$PEBBLE_VERSION" && return 0
  log "installing Pebble $PEBBLE_VERSION (go install) into $STACK/bin"
  t=$SECONDS
  mkdir -p "$STACK/bin"
  GOBIN="$STACK/bin" GOTOOLCHAIN=${GOTOOLCHAIN:-auto} go install "$PEBBLE_MODULE/cmd/pebble@$PEBBLE_VERSION" ||
    die "go install of Pebble failed"
  log "Pebble installed in $((SECONDS - t)) s"
}
if [[ ${1:-} == up && $# == 2 && $2 == pebble ]]; then
  install_pebble
  exit 0
fi

main "$@"
