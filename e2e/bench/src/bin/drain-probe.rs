//! `drain-probe`: the order writer's drain rate, for `e2e/bench/polling.sh`.
//!
//! Reserves `--count` units of a published campaign through the real reservation script (one
//! user each), produces the records to the writer's topic as the gateway does (key = user, the
//! user's partition, signed with the gateway key; batches of 500), and times from the first produce until PostgreSQL holds that many orders of
//! the campaign. Prints the figures and a last line `RATE <orders per second>`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use fixtures::stack;
use protocol::scripts::{ReserveCall, ReserveOutcome, Scripts};
use protocol::signing::Signer;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

#[derive(Parser)]
#[command(about = "Times the order writer draining a backlog of reservations")]
struct Args {
    /// Published campaign to reserve from (its stock must cover `--count`).
    #[arg(long)]
    campaign: String,
    /// Reservations to queue.
    #[arg(long, default_value_t = 20_000)]
    count: usize,
    /// The writer's topic.
    #[arg(long)]
    topic: String,
    /// Its partition count.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// The writer's database URL (orders are counted there).
    #[arg(long)]
    pg_url: String,
    /// The gateway key the writer verifies records with, as a secret reference (`env:NAME` or
    /// `file:PATH`), like the writer's `gateway_key`.
    #[arg(long, default_value = "env:SECKILL_GATEWAY_KEY")]
    gateway_key: String,
    /// Most seconds to wait for the drain.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !(1..=1_000_000).contains(&a.count) || !(1..=1024).contains(&a.partitions) {
        bail!("--count must be 1 to 1000000 and --partitions 1 to 1024");
    }
    let key = protocol::secret::resolve(&a.gateway_key, std::path::Path::new("."))
        .map_err(|e| anyhow::anyhow!("--gateway-key: {e}"))?;
    let signer = Signer::new(&key);
    let redis = stack::redis_client(&stack::redis_url()).await?;
    let scripts = Scripts::load(&stack::workspace_root().join("lua"))?;
    let tag = stack::unique("");
    let mut per_partition: Vec<Vec<Record>> = (0..a.partitions).map(|_| Vec::new()).collect();
    for i in 0..a.count {
        let rid = uuid::Uuid::now_v7().to_string();
        let user = format!("probe-{tag}-{i}");
        let record = match scripts
            .reserve(&redis, &protocol::keys::Bucket::single(&a.campaign), &ReserveCall::new(&rid, &user, 1))
            .await?
        {
            ReserveOutcome::Reserved { record, .. } => record.into_bytes(),
            other => bail!("reservation {i} of {}: {other:?}", a.count),
        };
        let record = protocol::record::SignedRecord::sign(&signer, user, record);
        per_partition[record.partition(a.partitions) as usize].push(record.into_kafka(chrono::Utc::now()));
    }
    let kafka = stack::kafka_client(&stack::kafka_broker()).await?;
    let mut conn = stack::pg_connect(&a.pg_url).await?;
    let count_orders = "SELECT count(*) FROM orders WHERE campaign_id = $1";
    let before: i64 = sqlx::query_scalar(count_orders).bind(&a.campaign).fetch_one(&mut conn).await?;
    let target = before + a.count as i64;

    let started = Instant::now();
    for (p, records) in per_partition.into_iter().enumerate() {
        let pc = kafka
            .partition_client(a.topic.as_str(), p as i32, UnknownTopicHandling::Error)
            .await
            .with_context(|| format!("partition {}/{p}", a.topic))?;
        let mut records = records.into_iter().peekable();
        while records.peek().is_some() {
            let chunk: Vec<Record> = records.by_ref().take(500).collect();
            pc.produce(chunk, Compression::NoCompression).await?;
        }
    }
    let produced = started.elapsed();
    let deadline = started + Duration::from_secs(a.timeout_secs);
    let mut have = before;
    while have < target {
        if Instant::now() > deadline {
            bail!("{} of {} orders after {} s", have - before, a.count, a.timeout_secs);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        have = sqlx::query_scalar(count_orders).bind(&a.campaign).fetch_one(&mut conn).await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let rate = a.count as f64 / secs;
    println!(
        "drained {} orders in {secs:.2} s (produced in {:.2} s): {rate:.0} orders/s",
        a.count,
        produced.as_secs_f64()
    );
    println!("RATE {rate:.1}");
    Ok(())
}
