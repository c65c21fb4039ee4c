//! `seckill-writer-bench`: orders/s from Kafka into PostgreSQL with the writer's batching against
//! one order per transaction (the peer), in one run, and the time to drain a backlog.
//!
//! It works on its own throwaway database (created from the admin URL, dropped at the end) and
//! its own topics, so it never touches a real campaign. The backlog is produced first; the clock
//! runs from the writers' start until every partition's committed offset reaches the end.
//! Beside them, the ceiling of the consume side: the same backlog read back from the broker,
//! verified (the gateway key's signature) and decoded, with the writer's fetch settings and no database, and the database stage alone.
//!
//! It drives the order writer's own code (`backend::writer`) through the library's public API;
//! `e2e/bench/writer.sh` runs it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use backend::redis::RedisScripts;
use backend::{db, kafka, redis};
use clap::Parser;
use sqlx::{Connection, Executor};

mod legs;

/// Command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "seckill-writer-bench",
    about = "Batched vs one-order-per-transaction throughput, and the drain time of a backlog"
)]
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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    protocol::logging::init();
    let args = BenchArgs::parse();
    match run(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seckill-writer-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the benchmark and prints its figures.
async fn run(a: &BenchArgs) -> anyhow::Result<()> {
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
    let kc = Arc::new(
        kafka::client(
            &protocol::kafka::KafkaConnection::plaintext(vec![a.kafka.clone()]),
            Duration::from_secs(10),
        )
        .await?,
    );

    println!(
        "order-writer bench: {} partitions, batch {}, per-user limit 1 (unique index active)",
        a.partitions, a.batch
    );
    let batched =
        legs::leg(a, &pool, &redis, &scripts, &kc, &format!("bench-b-{tag}"), a.records, a.batch).await?;
    let single =
        legs::leg(a, &pool, &redis, &scripts, &kc, &format!("bench-s-{tag}"), a.one_by_one, 1).await?;
    let ceiling = legs::read_ceiling(a, &kc, &format!("bench-b-{tag}")).await?;
    let stage = legs::database_stage(a, &pool, &redis, &scripts, &format!("bench-m-{tag}")).await?;
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
        "Kafka read ceiling (fetch + verify + decode, no database): {} records in {:.2} s = {:.0} records/s",
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
    events_cost(a, &pool, &redis, &scripts, tag, rm).await
}

/// The order events' trigger (`sql/0006_order_events.sql`, an outbox row an order) in the
/// database stage: the stage again without it, then with it once more (the machine's noise
/// between two identical legs beside the difference).
async fn events_cost(
    a: &BenchArgs,
    pool: &sqlx::PgPool,
    redis: &fred::prelude::Client,
    scripts: &RedisScripts,
    tag: &str,
    with_first: f64,
) -> anyhow::Result<()> {
    sqlx::query("ALTER TABLE orders DISABLE TRIGGER orders_events_created").execute(pool).await?;
    let off = legs::database_stage(a, pool, redis, scripts, &format!("bench-n-{tag}")).await?;
    sqlx::query("ALTER TABLE orders ENABLE TRIGGER orders_events_created").execute(pool).await?;
    let again = legs::database_stage(a, pool, redis, scripts, &format!("bench-e-{tag}")).await?;
    let (off, again) = (a.records as f64 / off.as_secs_f64(), a.records as f64 / again.as_secs_f64());
    println!("database stage without the order events' trigger: {off:.0} orders/s");
    println!("database stage with it again: {again:.0} orders/s");
    let with = (with_first + again) / 2.0;
    println!(
        "ratio database stage with events / without: {:.2} (the two with-legs: {:.2})",
        with / off,
        again / with_first
    );
    Ok(())
}
