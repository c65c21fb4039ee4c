#!/usr/bin/env bash
# Standard Kafka clients against the project's topic: what a backend team's own tools see.
#
#   bash e2e/interop.sh
#
# On the stack of .stack/env (Apache Kafka), with a sale's database and topic of its own:
#   1. `order-writer produce --generate` reserves units through lua/reserve.lua and produces the
#      signed records, exactly as the gateway and the sweeper write them;
#   2. kcat (librdkafka, Debian's package) and kafka-python (PyPI) each read the whole topic;
#      e2e/interop/records.py checks every record against the README's format (JSON value with its
#      fields and types, the optional ones when present (the audit's origin: client_ip, device,
#      registered_at), the user as key, the FNV-1a partition, the `seckill-signature` header =
#      HMAC-SHA256 of the value under the gateway key) and that both clients read the same;
#   3. foreign records are produced by the standard clients: kcat without the header, kcat with a
#      wrong signature, kafka-python signed with another key; the order writer then consumes the
#      topic: every signed record becomes an order, the three foreign ones are dead-lettered and
#      counted (`seckill_writer_dead_letters_total`), and none of them is an order;
#   4. kcat and kafka-python read the order events topic the writer's relay filled: one
#      `order.created` an order, keyed by order, schema and idempotency key as docs/integrating.md.
# Cleans up its database, topic and Redis keys. Exits non-zero on the first failure.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=${PROFILE:-debug}
WRITER_PORT=${WRITER_PORT:-18281}
KAFKA_PYTHON_VERSION=3.0.12
GENERATED=40

log() { printf '%s interop: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { printf '%s interop: FAIL: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; exit 1; }

# The standard clients: kcat from Debian, kafka-python in a virtual environment under .stack.
if ! command -v kcat >/dev/null 2>&1; then
  log "installing kcat (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kcat </dev/null >/dev/null ||
    { apt-get update -qq </dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kcat </dev/null >/dev/null; }
fi
PY=$ROOT/.stack/py
if ! "$PY/bin/python" -c "import kafka; assert kafka.__version__ == '$KAFKA_PYTHON_VERSION'" 2>/dev/null; then
  log "installing kafka-python $KAFKA_PYTHON_VERSION (pip, in .stack/py)"
  python3 -m venv "$PY" 2>/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv </dev/null >/dev/null
    python3 -m venv "$PY"
  }
  "$PY/bin/pip" install -q --disable-pip-version-check "kafka-python==$KAFKA_PYTHON_VERSION"
fi

bash e2e/stack.sh up redis postgres kafka >/dev/null
# shellcheck disable=SC1091
. .stack/env
# shellcheck source=e2e/lib.sh
source e2e/lib.sh
build_all "$PROFILE" 2>&1 | grep -v '^ *\(Compiling\|Finished\)' || true
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$([[ "$PROFILE" == release ]] && echo release || echo debug)"

RUN="$ROOT/.stack/interop"
rm -rf "$RUN"
mkdir -p "$RUN"
ID="interop$(date -u +%Y%m%d%H%M%S)"
TOPIC="reservations.$ID"
SECKILL_GATEWAY_KEY=$(random_key interop-gateway-key-)
SECKILL_PAYMENT_KEY=$(random_key interop-payment-key-)
export SECKILL_GATEWAY_KEY SECKILL_PAYMENT_KEY
WRITER_PID=""
cleanup() {
  local rc=$?
  [[ -n "$WRITER_PID" ]] && { kill "$WRITER_PID" 2>/dev/null; wait "$WRITER_PID" 2>/dev/null || true; }
  "$PY/bin/python" e2e/interop/records.py delete "$SECKILL_KAFKA_BROKER" "$TOPIC" 2>/dev/null || true
  "$PY/bin/python" e2e/interop/records.py delete "$SECKILL_KAFKA_BROKER" "$TOPIC.order-events" 2>/dev/null || true
  psql "$SECKILL_PG_ADMIN_URL" -qc "DROP DATABASE IF EXISTS sale_$ID" >/dev/null 2>&1 || true
  redis-cli -u "$SECKILL_REDIS_URL" --scan --pattern "sk:{$ID*" 2>/dev/null |
    xargs -r -n 100 redis-cli -u "$SECKILL_REDIS_URL" del >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT

log "sale $ID: database, topic $TOPIC, stock published"
sale_create "$RUN" "$ID" 100 "$(date -u -d '-1 minute' +%Y-%m-%dT%H:%M:%SZ)" "$WRITER_PORT" "$BIN" >"$RUN/create.log" 2>&1 ||
  { cat "$RUN/create.log" >&2; die "could not create the sale"; }
OW=("$BIN/order-writer" --conf "$RUN/order-writer.toml")
PARTITIONS=$(sed -n 's/^partitions = \([0-9]*\).*/\1/p' "$RUN/order-writer.toml" | head -n 1)

log "the project's records: order-writer produce --generate $GENERATED"
"${OW[@]}" produce --generate "$GENERATED" --campaign "$ID" >"$RUN/produce.log" 2>&1 ||
  { cat "$RUN/produce.log" >&2; die "order-writer produce failed"; }

log "kcat reads the topic"
kcat -C -b "$SECKILL_KAFKA_BROKER" -t "$TOPIC" -o beginning -e -q -J >"$RUN/kcat.jsonl" 2>"$RUN/kcat.err" ||
  { cat "$RUN/kcat.err" >&2; die "kcat could not read $TOPIC"; }
log "kafka-python reads the topic and checks every record against the README's format"
summary=$("$PY/bin/python" e2e/interop/records.py read "$SECKILL_KAFKA_BROKER" "$TOPIC" SECKILL_GATEWAY_KEY "$RUN/kcat.jsonl") ||
  die "the records do not match the README's format"
log "  $summary"
[[ $summary == *"\"records\": $GENERATED,"* ]] || die "expected $GENERATED records: $summary"
# Every generated record carries its origin (client_ip, device: the audit's fields), as the
# gateway's do.
[[ $summary == *"\"with_origin\": $GENERATED,"* ]] || die "expected $GENERATED records with an origin: $summary"

log "foreign records: kcat unsigned, kcat with a wrong signature, kafka-python with another key"
foreign_value() { # request_id
  printf '{"request_id":"%s","campaign":"%s","user":"forger","sku":"SKU-FORGED","qty":1,"price_cents":1,"price_version":1,"stock_version":1,"reserved_at_ms":%s}' \
    "$1" "$ID" "$(date +%s%3N)"
}
foreign_value kcat-unsigned-1 | kcat -P -b "$SECKILL_KAFKA_BROKER" -t "$TOPIC" -p 0 -k forger -X acks=all
foreign_value kcat-forged-1 | kcat -P -b "$SECKILL_KAFKA_BROKER" -t "$TOPIC" -p 0 -k forger -X acks=all \
  -H "seckill-signature=$(printf '%064d' 0)"
forged_py=$("$PY/bin/python" e2e/interop/records.py forge "$SECKILL_KAFKA_BROKER" "$TOPIC" "$PARTITIONS")

log "the order writer consumes the topic"
"${OW[@]}" serve >"$RUN/order-writer.log" 2>&1 &
WRITER_PID=$!
wait_port order-writer "$WRITER_PORT" "$RUN/order-writer.log"
DB=$(sale_db_url "$ID")
count() { psql "$DB" -tAc "$1" 2>/dev/null || echo -1; }
for _ in $(seq 1 120); do # 60 s at most
  [[ $(count "SELECT count(*) FROM dead_letters") == 3 && $(count "SELECT count(*) FROM orders") == "$GENERATED" ]] && break
  sleep 0.5
done
orders=$(count "SELECT count(*) FROM orders")
dead=$(count "SELECT count(*) FROM dead_letters")
foreign_orders=$(count "SELECT count(*) FROM orders WHERE request_id IN ('kcat-unsigned-1', 'kcat-forged-1', '$forged_py') OR user_id = 'forger'")
counted=$(curl -s "http://127.0.0.1:$((WRITER_PORT + 1000))/metrics" |
  awk '/^seckill_writer_dead_letters_total/ {s += $NF} END {print s + 0}')
log "  orders $orders (want $GENERATED), dead letters $dead (want 3), foreign orders $foreign_orders (want 0), counted $counted (want 3)"
[[ $orders == "$GENERATED" && $dead == 3 && $foreign_orders == 0 && $counted == 3 ]] ||
  die "the foreign records were not all dead-lettered, or the project's not all written"
origins=$(count "SELECT count(*) FROM orders WHERE client_ip IS NOT NULL AND device_id IS NOT NULL")
log "  orders with their origin (client address, device) $origins (want $GENERATED)"
[[ $origins == "$GENERATED" ]] || die "the orders do not carry their records' origin"
reasons=$(count "SELECT string_agg(error, ' | ' ORDER BY id) FROM dead_letters")
log "  dead-letter reasons: $reasons"
[[ $(grep -o 'unsigned record' <<<"$reasons" | wc -l) == 1 && $(grep -o 'signature does not match' <<<"$reasons" | wc -l) == 2 ]] ||
  die "expected one unsigned and two forged records among the dead letters"

# The order events (backend::events): one `order.created` an order, read by kcat and kafka-python.
EVENTS="$TOPIC.order-events"
log "kcat and kafka-python read the order events ($EVENTS)"
for _ in $(seq 1 60); do # 30 s at most
  [[ $(count "SELECT count(*) FROM order_events WHERE produced_at IS NULL") == 0 ]] && break
  sleep 0.5
done
kcat -C -b "$SECKILL_KAFKA_BROKER" -t "$EVENTS" -o beginning -e -q -J >"$RUN/events.jsonl" 2>"$RUN/events.err" ||
  { cat "$RUN/events.err" >&2; die "kcat could not read $EVENTS"; }
events=$("$PY/bin/python" e2e/interop/records.py events "$SECKILL_KAFKA_BROKER" "$EVENTS" "$RUN/events.jsonl") ||
  die "the order events are not as docs/integrating.md says"
log "  $events (want $orders order.created, as many keys)"
[[ $events == *"\"events\": $orders,"* && $events == *"\"order.created\": $orders}"* && $events == *"\"idempotency_keys\": $orders,"* ]] ||
  die "not one order.created event an order"
log "PASS"
