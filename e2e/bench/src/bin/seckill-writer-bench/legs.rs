//! The timed legs of the writer bench and their ceilings: a backlog produced to Kafka and
//! drained by the writer's partition tasks, the same batches through the writer's code straight
//! from memory, and the broker's read alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use backend::conf::WriterConf;
use backend::kafka;
use backend::redis::RedisScripts;
use backend::writer::{run_partition, settle, write_batch, Incoming, WriterCtx};
use protocol::record::SignedRecord;
use protocol::signing::{Signer, RECORD_SIGNATURE_HEADER};
use rskafka::client::partition::{Compression, OffsetAt};
use rskafka::record::Record;
use tokio::sync::watch;

use crate::BenchArgs;

/// The gateway key of the bench: it signs the backlog's records and the writers verify them, as
/// the gateway and the order writer share theirs.
fn signer() -> Signer {
    Signer::new(b"seckill-writer-bench-gateway-key")
}

/// Creates the campaign `name` with stock `n` and returns its backlog: `n` reservations of
/// distinct users, spread over the partitions by user and signed, as the gateway produces them.
async fn backlog(
    a: &BenchArgs,
    pool: &sqlx::PgPool,
    name: &str,
    n: usize,
) -> anyhow::Result<Vec<Vec<Record>>> {
    sqlx::query(
        "INSERT INTO campaigns (id, sku, total_stock, per_user_limit, price_cents, starts_at, ends_at, pay_window_secs, state)
         VALUES ($1, 'SKU-BENCH', $2, 1, 999, now(), now() + interval '1 hour', 900, 'LIVE')",
    )
    .bind(name)
    .bind(n as i64)
    .execute(pool)
    .await?;
    let mut per: Vec<Vec<Record>> = (0..a.partitions).map(|_| Vec::new()).collect();
    let now = chrono::Utc::now();
    let signer = signer();
    for i in 0..n {
        let user = format!("user-{i}");
        let rec = protocol::record::Reservation {
            request_id: uuid::Uuid::now_v7().to_string(),
            campaign: name.to_string(),
            user: user.clone(),
            sku: "SKU-BENCH".into(),
            qty: 1,
            price_cents: 999,
            price_version: 1,
            stock_version: 1,
            reserved_at_ms: now.timestamp_millis(),
            client_ip: None,
            device: None,
            registered_at: None,
            buckets: 1,
        };
        let value = serde_json::to_vec(&rec)?;
        let record = SignedRecord::sign(&signer, user, value);
        per[record.partition(a.partitions) as usize].push(record.into_kafka(now));
    }
    Ok(per)
}

/// The database stage alone: the same backlog handed to the writer's own batch code
/// ([`write_batch`] then [`settle`], one task per partition) straight from memory, no broker.
/// What the writer could do if the broker fed it for free: the ceiling of the batched leg.
pub async fn database_stage(
    a: &BenchArgs,
    pool: &sqlx::PgPool,
    redis: &fred::prelude::Client,
    scripts: &RedisScripts,
    name: &str,
) -> anyhow::Result<Duration> {
    let per = backlog(a, pool, name, a.records).await?;
    let start = Instant::now();
    let tasks: Vec<_> = per
        .into_iter()
        .enumerate()
        .map(|(p, recs)| {
            let (pool, redis, scripts, name, batch) =
                (pool.clone(), redis.clone(), scripts.clone(), name.to_string(), a.batch);
            tokio::spawn(async move {
                let incoming: Vec<Incoming> = recs
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut r)| Incoming {
                        offset: i as i64,
                        signature: r.headers.remove(RECORD_SIGNATURE_HEADER),
                        value: r.value,
                    })
                    .collect();
                let signer = signer();
                for chunk in incoming.chunks(batch) {
                    let outcome = write_batch(&pool, &name, p as i32, chunk, &signer).await?;
                    settle(&redis, &scripts, &outcome).await;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let took = start.elapsed();
    ensure_orders(pool, name, a.records).await?;
    Ok(took)
}

/// One timed run: produces a backlog of `n` reservations to a new topic `name`, then times the
/// writer's partition tasks (`batch` orders per transaction) until every committed offset
/// reaches the end.
#[allow(clippy::too_many_arguments)]
pub async fn leg(
    a: &BenchArgs,
    pool: &sqlx::PgPool,
    redis: &fred::prelude::Client,
    scripts: &RedisScripts,
    kc: &Arc<rskafka::client::Client>,
    name: &str,
    n: usize,
    batch: usize,
) -> anyhow::Result<Duration> {
    kafka::create_topic(kc, name, a.partitions, 1).await?;
    let per = backlog(a, pool, name, n).await?;
    let mut ends = Vec::new();
    for (p, recs) in per.into_iter().enumerate() {
        let pc = kafka::partition(kc, name, p as i32, Duration::from_secs(10)).await?;
        let mut it = recs.into_iter().peekable();
        while it.peek().is_some() {
            let chunk: Vec<Record> = it.by_ref().take(500).collect();
            tokio::time::timeout(Duration::from_secs(30), pc.produce(chunk, Compression::NoCompression))
                .await
                .context("produce timed out")??;
        }
        ends.push(pc.get_offset(OffsetAt::Latest).await?);
    }
    let total_end: i64 = ends.iter().sum();

    let (tx, _) = watch::channel(false);
    let ctx = WriterCtx {
        pool: pool.clone(),
        redis: redis.clone(),
        scripts: scripts.clone(),
        kafka: kc.clone(),
        topic: name.to_string(),
        signer: Arc::new(signer()),
        cfg: WriterConf {
            batch_size: batch,
            max_wait: protocol::conf::Millis::new(20).expect("a wait"),
            fetch_max_bytes: a.fetch_max_bytes,
            idle_wait: protocol::conf::Millis::new(100).expect("a wait"),
            batch_retries: 3,
        },
        metrics: Arc::new(backend::admin::metrics::WriterMetrics::new()),
    };
    let start = Instant::now();
    let tasks: Vec<_> =
        (0..a.partitions).map(|p| tokio::spawn(run_partition(ctx.clone(), p, tx.subscribe()))).collect();
    let limit = Instant::now() + Duration::from_secs(600);
    loop {
        let done: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(next_offset), 0)::int8 FROM consumer_offsets WHERE topic = $1",
        )
        .bind(name)
        .fetch_one(pool)
        .await?;
        if done >= total_end {
            break;
        }
        anyhow::ensure!(Instant::now() < limit, "drain did not finish within 600 s ({done} of {total_end})");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = start.elapsed();
    let _ = tx.send(true);
    for t in tasks {
        t.await??;
    }
    ensure_orders(pool, name, n).await?;
    Ok(took)
}

/// Fails unless campaign `name` has exactly `n` orders: a timed run counts only if it wrote them.
async fn ensure_orders(pool: &sqlx::PgPool, name: &str, n: usize) -> anyhow::Result<()> {
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE campaign_id = $1")
        .bind(name)
        .fetch_one(pool)
        .await?;
    anyhow::ensure!(orders == n as i64, "{name}: {orders} orders for {n} reservations");
    Ok(())
}

/// Reads every partition of `topic` from offset 0 to its end, in parallel, with the writer's
/// fetch settings, and verifies and decodes each record as the writer does: how fast the broker
/// alone can feed the writers.
pub async fn read_ceiling(
    a: &BenchArgs,
    kc: &Arc<rskafka::client::Client>,
    topic: &str,
) -> anyhow::Result<Duration> {
    let mut clients = Vec::new();
    for p in 0..a.partitions {
        let pc = kafka::partition(kc, topic, p, Duration::from_secs(10)).await?;
        let end = pc.get_offset(OffsetAt::Latest).await?;
        clients.push((pc, end));
    }
    let start = Instant::now();
    let max_bytes = a.fetch_max_bytes;
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(pc, end)| {
            tokio::spawn(async move {
                let signer = signer();
                let mut offset = 0;
                let limit = Instant::now() + Duration::from_secs(300);
                while offset < end {
                    anyhow::ensure!(Instant::now() < limit, "read-back did not finish within 300 s");
                    let (records, _) = tokio::time::timeout(
                        Duration::from_secs(10),
                        pc.fetch_records(offset, 1..max_bytes, 20),
                    )
                    .await
                    .context("fetch timed out")??;
                    let from = offset;
                    for r in records.iter().filter(|r| r.offset >= from) {
                        let value = r.record.value.as_deref().unwrap_or_default();
                        let sig = r.record.headers.get(RECORD_SIGNATURE_HEADER).context("unsigned record")?;
                        signer.verify(value, std::str::from_utf8(sig)?)?;
                        protocol::record::Reservation::from_json(value)?;
                        offset = r.offset + 1;
                    }
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed())
}
