//! `queue-cost`: the gateway's CPU per record for handing reserved records to Kafka, alone.
//!
//! Starts the gateway's reservation queue (`plugins::queue`, the same code and conf knobs as
//! the gateway's `[kafka]`) on a topic of its own (deleted at the end), enqueues `--count`
//! signed-size records at `--rate` per second (in 1 ms steps, as a sale's requests would
//! arrive), waits until every record is produced or dropped, and prints this process's CPU time
//! per record (user + system, from /proc/self/stat). The figure is the queue's share of a
//! reservation's CPU in the gateway.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use fixtures::stack;
use plugins::queue::{QueueConf, ReservationQueue};

#[derive(Parser)]
#[command(about = "CPU per record of the gateway's Kafka queue")]
struct Args {
    /// Records in all.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Records per second offered.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Partitions (lanes).
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Batch linger, ms.
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
}

/// User + system CPU time of this process.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // Fields 14 and 15 of the file (utime, stime), in clock ticks of 10 ms.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !(1..=10_000_000).contains(&a.count) || !(1..=1_000_000).contains(&a.rate) {
        bail!("--count 1..10000000, --rate 1..1000000");
    }
    let kafka = stack::kafka_client(&stack::kafka_broker()).await?;
    let topic = stack::unique("queue-cost");
    backend::kafka::create_topic(&kafka, &topic, a.partitions, 1).await?;
    let _owned = fixtures::cleanup::Topic::adopt(&topic);
    let conf = QueueConf {
        connection: stack::kafka_connection(),
        topic,
        partitions: a.partitions,
        batch_max: 500,
        linger: Duration::from_millis(a.linger_ms),
        produce_timeout: Duration::from_millis(1000),
        capacity: 100_000,
    };
    let queue = ReservationQueue::start(conf, &tokio::runtime::Handle::current());
    let value = format!("{{\"request_id\":\"{}\",\"campaign\":\"c\",\"user\":\"u\",\"sku\":\"S\",\"qty\":1,\"price_cents\":1,\"price_version\":1,\"stock_version\":1,\"reserved_at_ms\":1}}", "0".repeat(36));
    let signature = "0".repeat(64);
    tokio::time::sleep(Duration::from_millis(500)).await; // lanes connected
    let (cpu0, t0) = (cpu(), Instant::now());
    let per_ms = (a.rate / 1000).max(1);
    let mut sent = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    while sent < a.count {
        tick.tick().await;
        for _ in 0..per_ms.min(a.count - sent) {
            queue.enqueue(&format!("user-{sent}"), value.clone(), signature.clone());
            sent += 1;
        }
    }
    let s = queue.stats();
    let done = || {
        s.produced.load(Ordering::Relaxed)
            + s.dropped_full.load(Ordering::Relaxed)
            + s.dropped_kafka.load(Ordering::Relaxed)
    };
    let limit = Instant::now() + Duration::from_secs(60);
    while done() < a.count && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (cpu_used, secs) = (cpu() - cpu0, t0.elapsed().as_secs_f64());
    println!(
        "{} records in {secs:.2} s: produced {}, dropped {} (full) {} (kafka); CPU {:.2} us per record",
        a.count,
        s.produced.load(Ordering::Relaxed),
        s.dropped_full.load(Ordering::Relaxed),
        s.dropped_kafka.load(Ordering::Relaxed),
        cpu_used.as_secs_f64() * 1e6 / a.count as f64
    );
    Ok(())
}
