//! `broker-probe`: the broker's own produce rate, a ceiling for everything that writes
//! reservations to Kafka (the gateway's lanes, the sweeper, `order-writer produce`).
//!
//! Creates a topic of its own (deleted at the end), then produces `--count` records of a
//! reservation's size, spread over `--partitions`, in batches of `--batch` records with
//! `--inflight` produce requests in flight per partition, and prints records/s. Run it with several batch sizes to see what a
//! produce request costs the broker apart from its records.

use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use fixtures::stack;
use futures::stream::{self, StreamExt, TryStreamExt};
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

#[derive(Parser)]
#[command(about = "Times the broker taking in records, by batch size")]
struct Args {
    /// Records in all.
    #[arg(long, default_value_t = 20_000)]
    count: usize,
    /// Records per produce request.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Partitions of the probe's topic (one producer each, all at once).
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Produce requests in flight per partition.
    #[arg(long, default_value_t = 1)]
    inflight: usize,
    /// Then read every record back, one fetch at a time per partition (as the order writer
    /// does), and time that too.
    #[arg(long)]
    read: bool,
}

/// A record the size of a signed reservation (key, ~230-byte value, signature header).
fn record(i: usize) -> Record {
    let value = format!(
        r#"{{"request_id":"01a2295a-6a17-7292-a969-{i:012}","campaign":"probe","user":"user-{i}","sku":"SKU-PROBE","qty":1,"price_cents":99900,"price_version":1,"stock_version":1,"reserved_at_ms":1764450000000}}"#
    );
    Record {
        key: Some(format!("user-{i}").into_bytes()),
        value: Some(value.into_bytes()),
        headers: [("seckill-signature".to_string(), vec![b'0'; 64])].into(),
        timestamp: chrono::Utc::now(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !(1..=1_000_000).contains(&a.count)
        || !(1..=10_000).contains(&a.batch)
        || !(1..=64).contains(&a.partitions)
        || !(1..=64).contains(&a.inflight)
    {
        bail!("--count 1..1000000, --batch 1..10000, --partitions 1..64, --inflight 1..64");
    }
    let kafka = stack::kafka_client(&stack::kafka_broker()).await?;
    let topic = stack::unique("probe");
    backend::kafka::create_topic(&kafka, &topic, a.partitions, 1).await?;
    let _owned = fixtures::cleanup::Topic::adopt(&topic);
    let per_partition = a.count.div_ceil(a.partitions as usize);
    let mut clients = Vec::new();
    for p in 0..a.partitions {
        let pc = kafka
            .partition_client(topic.as_str(), p, UnknownTopicHandling::Retry)
            .await
            .with_context(|| format!("partition {topic}/{p}"))?;
        clients.push(pc);
    }
    let started = Instant::now();
    let lanes = clients.iter().enumerate().map(|(p, pc)| {
        let batches: Vec<Vec<Record>> = (0..per_partition)
            .map(|i| record(p * per_partition + i))
            .collect::<Vec<_>>()
            .chunks(a.batch)
            .map(<[Record]>::to_vec)
            .collect();
        stream::iter(batches)
            .map(move |b| async move { pc.produce(b, Compression::NoCompression).await.map(|_| ()) })
            .buffer_unordered(a.inflight)
            .try_collect::<Vec<()>>()
    });
    futures::future::try_join_all(lanes).await?;
    let secs = started.elapsed().as_secs_f64();
    let total = per_partition * a.partitions as usize;
    let requests = per_partition.div_ceil(a.batch) * a.partitions as usize;
    println!(
        "produced {total} records in {requests} requests of {} in {secs:.2} s: {:.0} records/s, {:.0} requests/s",
        a.batch,
        total as f64 / secs,
        requests as f64 / secs
    );
    if a.read {
        let started = Instant::now();
        let mut fetches = 0usize;
        for pc in &clients {
            let mut at = 0;
            while at < per_partition as i64 && started.elapsed().as_secs() < 120 {
                let (records, _) = pc.fetch_records(at, 1..4 * 1024 * 1024, 20).await?;
                fetches += 1;
                at = records.last().map_or(at, |r| r.offset + 1);
            }
        }
        let rsecs = started.elapsed().as_secs_f64();
        println!(
            "read them back in {fetches} fetches in {rsecs:.2} s: {:.0} records/s, {:.0} records per fetch",
            total as f64 / rsecs,
            total as f64 / fetches as f64
        );
    }
    println!("RATE {:.1}", total as f64 / secs);
    Ok(())
}
