//! `order-writer bench`: orders/s from Kafka into PostgreSQL with the writer's batching against
//! one order per transaction (the peer), in one run, and the time to drain a backlog.
//!
//! It works on its own throwaway database (created from the admin URL, dropped at the end) and
//! its own topics, so it never touches a real campaign. The backlog is produced first; the clock
//! runs from the writers' start until every partition's committed offset reaches the end.
//! Beside them, the ceiling of the consume side: the same backlog read back from the broker and
//! decoded, with the writer's fetch settings and no database.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use rskafka::client::partition::{Compression, OffsetAt};
use rskafka::record::Record;
use sqlx::{Connection, Executor};
use tokio::sync::watch;

use crate::config::WriterConfig;
use crate::redis::RedisScripts;
use crate::writer::{run_partition, settle, write_batch, Incoming, WriterCtx};
use crate::{db, kafka, redis};

/// Arguments of `order-writer bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// PostgreSQL admin URL (a throwaway database is created and dropped there).
    #[arg(long, env = "SECKILL_PG_ADMIN_URL", default_value = "postgres://postgres@127.0.0.1:5440/postgres")]
    pub pg_admin_url: String,
    /// Redis URL (the writer acks there after each commit, as in production).
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6390")]
    pub redis_url: String,
    /// Kafka broker.
    #[arg(long, env = "SECKILL_KAFKA_BROKER", default_value = "127.0.0.1:19092")]
    pub kafka: String,
    /// Reservations in the batched run (the backlog to drain).
    #[arg(long, default_value_t = 100_000)]
    pub records: usize,
    /// Reservations in the one-order-per-transaction run.
    #[arg(long, default_value_t = 3_000)]
    pub one_by_one: usize,
    /// Partitions of each topic (one writer task each).
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Orders per transaction in the batched run.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Most bytes per fetch, for the writers and the read ceiling alike.
    #[arg(long, default_value_t = 1 << 20)]
    pub fetch_max_bytes: i32,
    /// Folder of the Lua scripts.
    #[arg(long, default_value = "lua")]
    pub lua_dir: PathBuf,
    /// Folder of the migrations.
    #[arg(long, default_value = "sql")]
    pub migrations_dir: PathBuf,
}

/// Runs the benchmark and prints its figures.
pub async fn run(a: &BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.records >= 1 && a.records <= 1_000_000, "--records must be 1 to 1000000");
    anyhow::ensure!(a.one_by_one >= 1 && a.one_by_one <= 100_000, "--one-by-one must be 1 to 100000");
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..10];
    let dbname = format!("bench_{tag}");
    let mut admin = sqlx::PgConnection::connect(&a.pg_admin_url).await.context("PostgreSQL admin")?;
    admin.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {dbname}"))).await?;
    let base = a.pg_admin_url.rsplit_once('/').map(|(b, _)| b).unwrap_or(&a.pg_admin_url);
    let url = format!("{base}/{dbname}");
    let result = run_in(a, &url, tag).await;
    let _ =
        admin.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {dbname} WITH (FORCE)"))).await;
    result
}

async fn run_in(a: &BenchArgs, url: &str, tag: &str) -> anyhow::Result<()> {
    let pool = db::connect(url, 4 + a.partitions as u32).await?;
    db::migrate(&pool, &a.migrations_dir).await?;
    let redis = redis::connect(&a.redis_url).await?;
    let scripts = RedisScripts::load(&a.lua_dir)?;
    let kc = Arc::new(kafka::client(std::slice::from_ref(&a.kafka), Duration::from_secs(10)).await?);

    println!(
        "order-writer bench: {} partitions, batch {}, per-user limit 1 (unique index active)",
        a.partitions, a.batch
    );
    let batched = leg(a, &pool, &redis, &scripts, &kc, &format!("bench-b-{tag}"), a.records, a.batch).await?;
    let single = leg(a, &pool, &redis, &scripts, &kc, &format!("bench-s-{tag}"), a.one_by_one, 1).await?;
    let ceiling = read_ceiling(a, &kc, &format!("bench-b-{tag}")).await?;
    let stage = database_stage(a, &pool, &redis, &scripts, &format!("bench-m-{tag}")).await?;
    let rb = a.records as f64 / batched.as_secs_f64();
    let rs = a.one_by_one as f64 / single.as_secs_f64();
    println!(
        "batched ({} per tx): {} orders in {:.2} s = {:.0} orders/s",
        a.batch,
        a.records,
        batched.as_secs_f64(),
        rb
    );
    println!(
        "one order per tx (peer): {} orders in {:.2} s = {:.0} orders/s",
        a.one_by_one,
        single.as_secs_f64(),
        rs
    );
    let rc = a.records as f64 / ceiling.as_secs_f64();
    println!(
        "Kafka read ceiling (fetch + decode, no database): {} records in {:.2} s = {:.0} records/s",
        a.records,
        ceiling.as_secs_f64(),
        rc
    );
    let rm = a.records as f64 / stage.as_secs_f64();
    println!(
        "database stage alone (same batches from memory, no broker): {} orders in {:.2} s = {:.0} orders/s",
        a.records,
        stage.as_secs_f64(),
        rm
    );
    // Both stages are mostly CPU on the same cores: with no overlap at all their times add up.
    let bound = 1.0 / (1.0 / rc + 1.0 / rm);
    println!("the two stages back to back, 1 / (1/read + 1/database): {bound:.0} orders/s");
    println!("ratio batched / one-by-one: {:.1}x", rb / rs);
    println!("ratio batched / read ceiling: {:.2}", rb / rc);
    println!("ratio batched / stages back to back: {:.2}", rb / bound);
    println!("ratio database stage / one-by-one: {:.1}x", rm / rs);
    println!("drain of {} queued reservations: {:.2} s", a.records, batched.as_secs_f64());
    Ok(())
}

/// Creates the campaign `name` with stock `n` and returns its backlog: `n` reservations of
/// distinct users, spread over the partitions by user as the intake does.
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
        };
        per[kafka::partition_for(&user, a.partitions) as usize].push(Record {
            key: Some(user.into_bytes()),
            value: Some(serde_json::to_vec(&rec)?),
            headers: Default::default(),
            timestamp: now,
        });
    }
    Ok(per)
}

/// The database stage alone: the same backlog handed to the writer's own batch code
/// ([`write_batch`] then [`settle`], one task per partition) straight from memory, no broker.
/// What the writer could do if the broker fed it for free: the ceiling of the batched leg.
async fn database_stage(
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
                    .map(|(i, r)| Incoming { offset: i as i64, value: r.value })
                    .collect();
                for chunk in incoming.chunks(batch) {
                    let outcome = write_batch(&pool, &name, p as i32, chunk).await?;
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

#[allow(clippy::too_many_arguments)]
async fn leg(
    a: &BenchArgs,
    pool: &sqlx::PgPool,
    redis: &fred::prelude::Client,
    scripts: &RedisScripts,
    kc: &Arc<rskafka::client::Client>,
    name: &str,
    n: usize,
    batch: usize,
) -> anyhow::Result<Duration> {
    kafka::create_topic(kc, name, a.partitions).await?;
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
        cfg: WriterConfig {
            batch_size: batch,
            max_wait_ms: 20,
            fetch_max_bytes: a.fetch_max_bytes,
            idle_wait_ms: 100,
            batch_retries: 3,
        },
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
/// fetch settings, and decodes each record: how fast the broker alone can feed the writers.
async fn read_ceiling(
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
