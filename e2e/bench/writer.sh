#!/usr/bin/env bash
# Order writer benchmark: orders/s from Kafka into PostgreSQL with the writer's batching against
# one order per transaction (the peer), in one run, and the time to drain a backlog of queued
# reservations. Release build, against the local stack (e2e/stack.sh up).
#
# Usage: e2e/bench/writer.sh [RECORDS] [ONE_BY_ONE]     (defaults: 100000 and 3000)
#   Env: SECKILL_PG_ADMIN_URL, SECKILL_REDIS_URL, SECKILL_KAFKA_BROKER (defaults: the stack's),
#        BENCH_PARTITIONS (4), BENCH_BATCH (1000 orders per transaction),
#        BENCH_FETCH_BYTES (1048576, most bytes per fetch).
#
# The bench creates a throwaway database and its own topics, produces the backlog first, then
# times the writers from their start until every partition's committed offset reaches the end.
# Both runs do the same work per record (decode, checks, order, ledger row, offset, Redis ack);
# only the transaction size differs. Beside them, the two ceilings of the batched run: the
# broker's read alone (fetch + decode, no database) and the database stage alone (the same
# batches through the writer's code, fed from memory). On one machine the two stages share the
# cores: with no overlap at all the batched run would do 1 / (1/read + 1/database), which the
# bench prints too; above it, the pipeline overlaps the stages.
# Absolute numbers depend on the machine; the ratios hold.
# shellcheck source=e2e/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_env SECKILL_PG_ADMIN_URL
RECORDS=${1:-100000}
ONE_BY_ONE=${2:-3000}
build_all release
exec timeout 900 target/release/seckill-writer-bench \
  --records "$RECORDS" --one-by-one "$ONE_BY_ONE" \
  --partitions "${BENCH_PARTITIONS:-4}" --batch "${BENCH_BATCH:-1000}" \
  --fetch-max-bytes "${BENCH_FETCH_BYTES:-1048576}" \
  --lua-dir lua --migrations-dir sql
