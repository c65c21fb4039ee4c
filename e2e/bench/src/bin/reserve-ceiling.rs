//! `reserve-ceiling`: the ceiling of `lua/reserve.lua` on one Redis, by batch size, in the
//! manner of `redis-benchmark` (many connections, one call outstanding on each).
//!
//! For each `--batches` size K, in the same run: a fresh campaign (a unique id, stock for every
//! order, limit 1), `--orders` orders of distinct buyers, each with a nonce as the gateway sends
//! them, sent as `reserve_batch` calls of K orders over `--connections` connections. Prints
//! reservations/s, Redis µs per reservation (`INFO commandstats`: `cmdstat_evalsha` usec / calls,
//! divided by the orders per call: the script's own time), the Redis process's CPU µs per
//! reservation (`INFO cpu`: the script plus reading the calls and writing the answers), and this
//! client's CPU µs per reservation. Other clients of the same Redis show up as EVALSHA calls
//! this run did not make: the line says how many (and their work is in the Redis figures). Only
//! the keys this run created are deleted.
//!
//! Then, for each `--releases` size, the same number of reserved orders given back by
//! `release.lua`, that many per call, one call at a time on one connection (as the order
//! writer's closer does): releases/s, and the same Redis and client figures per release.
//!
//! `--origin`: each order carries an origin into its record (the audit's fields), as the gateway's
//! do; a run beside one without tells what carrying it costs.
//!
//! `--lua DIR` reads the scripts from another folder (an older commit's, say), so that two
//! versions of a script are measured side by side on the same machine minute.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use fixtures::stack;
use fred::prelude::*;
use protocol::keys::Bucket;
use protocol::scripts::{
    self, Nonce, PublishSpec, ReleaseCall, ReleaseOutcome, ReserveCall, ReserveOutcome, Scripts,
};

#[derive(Parser)]
#[command(about = "Ceiling of reserve.lua by batch size")]
struct Args {
    /// The Redis (one master).
    #[arg(long, default_value = "redis://127.0.0.1:6390")]
    redis: String,
    /// Connections, each with one call outstanding.
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Orders per batch size.
    #[arg(long, default_value_t = 100_000)]
    orders: u64,
    /// Batch sizes, in the order run.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    batches: Vec<usize>,
    /// Release batch sizes, in the order run: reserved orders given back by `release.lua` one
    /// call after another on one connection, as the order writer's closer does (`--releases`
    /// with no value: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,100")]
    releases: Vec<usize>,
    /// The scripts' folder (default: the repository's `lua/`), e.g. an older commit's scripts
    /// beside today's in the same run.
    #[arg(long)]
    lua: Option<std::path::PathBuf>,
    /// Each order carries an origin into its record, as the gateway's do (an address, a device
    /// id, an account creation time: `protocol::record::Origin`), for a run beside one without.
    #[arg(long)]
    origin: bool,
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

/// What the Redis server has done so far: `cmdstat_evalsha`'s calls and usec (the scripts' own
/// time), and the process's CPU time in µs (`INFO cpu`: the scripts plus reading the calls and
/// writing the answers).
#[derive(Clone, Copy)]
struct RedisWork {
    calls: u64,
    script_us: u64,
    cpu_us: u64,
}

impl RedisWork {
    async fn read(redis: &Client) -> anyhow::Result<Self> {
        let stats: String = redis.info(Some(fred::types::InfoKind::CommandStats)).await?;
        let line = stats.lines().find(|l| l.starts_with("cmdstat_evalsha:")).unwrap_or("");
        let field = |name: &str| {
            line.split([':', ','])
                .find_map(|kv| kv.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let cpu: String = redis.info(Some(fred::types::InfoKind::Cpu)).await?;
        let seconds = |name: &str| {
            cpu.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let cpu_us = ((seconds("used_cpu_user:") + seconds("used_cpu_sys:")) * 1e6) as u64;
        Ok(Self { calls: field("calls="), script_us: field("usec="), cpu_us })
    }

    /// What was done between `before` and `self`.
    fn since(self, before: Self) -> Self {
        Self {
            calls: self.calls.saturating_sub(before.calls),
            script_us: self.script_us.saturating_sub(before.script_us),
            cpu_us: self.cpu_us.saturating_sub(before.cpu_us),
        }
    }
}

/// Publishes a new campaign named after `prefix` with `orders` units, one per buyer; returns its id.
async fn publish(scripts: &Scripts, redis: &Client, prefix: &str, orders: u64) -> anyhow::Result<String> {
    let campaign = stack::unique(prefix);
    let spec = PublishSpec {
        stock_version: 1,
        total: orders as i64,
        limit: 1,
        sku: "SKU".into(),
        price_cents: 100,
        price_version: 1,
    };
    scripts.publish_buckets(redis, &campaign, 1, &spec).await?;
    Ok(campaign)
}

/// A gateway-like origin of order `i`: an address, a device id, an account creation time.
fn origin(i: u64) -> protocol::record::Origin {
    protocol::record::Origin {
        client_ip: Some(format!("198.51.{}.{}", (i >> 8) % 256, i % 256)),
        device: Some(format!("device-user-{i}")),
        registered_at: Some(1_700_000_000 - (i % 1000) as i64 * 86_400),
    }
}

/// One batch size's run; returns its line.
async fn run(a: &Args, scripts: &Scripts, clients: &[Client], k: usize) -> anyhow::Result<String> {
    let admin = &clients[0];
    let campaign = publish(scripts, admin, "ceiling-", a.orders).await?;
    let bucket = Arc::new(Bucket::single(&campaign));
    let next = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let (work0, cpu0, t0) = (RedisWork::read(admin).await?, cpu(), Instant::now());
    let mut tasks = Vec::new();
    for client in clients {
        let (client, scripts, bucket, next, calls) =
            (client.clone(), scripts.clone(), bucket.clone(), next.clone(), calls.clone());
        let (orders, with_origin) = (a.orders, a.origin);
        tasks.push(tokio::spawn(async move {
            let mut reserved = 0u64;
            loop {
                let from = next.fetch_add(k as u64, Ordering::Relaxed);
                if from >= orders {
                    return Ok::<u64, anyhow::Error>(reserved);
                }
                let batch: Vec<ReserveCall> = (from..(from + k as u64).min(orders))
                    .map(|i| {
                        let nonce = Nonce {
                            key: bucket.keys.nonce("jti", &i.to_string()),
                            ttl_secs: 300,
                            fingerprint: format!("sig{i}"),
                        };
                        let call =
                            ReserveCall::new(format!("r{i}"), format!("u{i}"), 1).with_nonce(Some(nonce));
                        if with_origin {
                            call.with_origin(&origin(i))
                        } else {
                            call
                        }
                    })
                    .collect();
                let out = scripts.reserve_batch(&client, &bucket, &batch).await?;
                calls.fetch_add(1, Ordering::Relaxed);
                reserved +=
                    out.iter().filter(|o| matches!(o, ReserveOutcome::Reserved { .. })).count() as u64;
            }
        }));
    }
    let mut reserved = 0;
    for t in tasks {
        reserved += t.await??;
    }
    let (elapsed, cpu_used, work) = (t0.elapsed(), cpu() - cpu0, RedisWork::read(admin).await?.since(work0));
    let calls = calls.load(Ordering::Relaxed);
    // Clean what this run created: the campaign's keys and its nonces.
    let mut keys = bucket.keys.all();
    keys.extend([bucket.keys.sent.clone(), bucket.keys.received.clone()]);
    for key in keys {
        let _: () = admin.unlink(key).await?;
    }
    for chunk in (0..a.orders).collect::<Vec<_>>().chunks(1000) {
        let keys: Vec<String> = chunk.iter().map(|i| bucket.keys.nonce("jti", &i.to_string())).collect();
        let _: () = admin.unlink(keys).await?;
    }
    if reserved != a.orders {
        bail!("batch {k}: {reserved} of {} orders reserved", a.orders);
    }
    let per = |x: f64| x / reserved as f64;
    // µs per EVALSHA (others' calls, if any, included), over the orders of one of this run's calls.
    let usec_per_call = work.script_us as f64 / work.calls.max(1) as f64;
    let orders_per_call = reserved as f64 / calls.max(1) as f64;
    Ok(format!(
        "{k:>6} {:>14.0} {:>12.2} {:>14.2} {:>12.2} {:>12.2} {:>10} {:>16}",
        reserved as f64 / elapsed.as_secs_f64(),
        usec_per_call / orders_per_call,
        usec_per_call,
        per(work.cpu_us as f64),
        per(cpu_used.as_micros() as f64),
        calls,
        work.calls.saturating_sub(calls),
    ))
}

/// Releases of `a.orders` reserved orders, `k` per call, one call at a time; returns its line.
async fn release_run(a: &Args, scripts: &Scripts, redis: &Client, k: usize) -> anyhow::Result<String> {
    let campaign = publish(scripts, redis, "release-", a.orders).await?;
    let bucket = Bucket::single(&campaign);
    let calls: Vec<ReserveCall> =
        (0..a.orders).map(|i| ReserveCall::new(format!("r{i}"), format!("u{i}"), 1)).collect();
    for chunk in calls.chunks(128) {
        scripts.reserve_batch(redis, &bucket, chunk).await?;
    }
    let releases: Vec<ReleaseCall> = calls
        .iter()
        .map(|c| ReleaseCall {
            request_id: c.request_id.clone(),
            user: c.user.clone(),
            qty: 1,
            ..Default::default()
        })
        .collect();
    let (work0, cpu0, t0) = (RedisWork::read(redis).await?, cpu(), Instant::now());
    let mut released = 0;
    for chunk in releases.chunks(k) {
        let out = scripts.release_batch(redis, &bucket, chunk).await?;
        released += out.iter().filter(|o| matches!(o, ReleaseOutcome::Released { .. })).count();
    }
    let (elapsed, cpu_used, work) = (t0.elapsed(), cpu() - cpu0, RedisWork::read(redis).await?.since(work0));
    let stock: Option<i64> = redis.get(&bucket.keys.stock).await?;
    let mut keys = bucket.keys.all();
    keys.extend([bucket.keys.sent.clone(), bucket.keys.received.clone()]);
    for key in keys {
        let _: () = redis.unlink(key).await?;
    }
    if released as u64 != a.orders || stock != Some(a.orders as i64) {
        bail!("release batch {k}: {released} of {} released, stock {stock:?}", a.orders);
    }
    let per = |x: f64| x / released as f64;
    Ok(format!(
        "{k:>6} {:>14.0} {:>12.2} {:>12.2} {:>14.2}",
        released as f64 / elapsed.as_secs_f64(),
        per(work.script_us as f64),
        per(work.cpu_us as f64),
        per(cpu_used.as_micros() as f64)
    ))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let bad = |ks: &[usize]| ks.iter().any(|&k| k == 0 || k > 10_000);
    if a.connections == 0 || a.orders == 0 || bad(&a.batches) || bad(&a.releases) {
        bail!("--connections and --orders at least 1, --batches and --releases each 1..10000");
    }
    let scripts = Scripts::load(&a.lua.clone().unwrap_or_else(scripts::default_dir))?;
    let mut clients = Vec::new();
    for _ in 0..a.connections {
        clients.push(stack::redis_client(&a.redis).await.context("redis")?);
    }
    scripts.preload(&clients[0]).await?;
    println!(
        "{:>6} {:>14} {:>12} {:>14} {:>12} {:>12} {:>10} {:>16}",
        "batch",
        "reservations/s",
        "redis us/res",
        "redis us/call",
        "redis cpu/res",
        "client us/res",
        "calls",
        "others' calls"
    );
    for &k in &a.batches {
        println!("{}", run(&a, &scripts, &clients, k).await?);
    }
    if a.releases.is_empty() {
        return Ok(());
    }
    println!(
        "\n{:>6} {:>14} {:>12} {:>12} {:>14}",
        "batch", "releases/s", "redis us/rel", "redis cpu/rel", "client us/rel"
    );
    for &k in &a.releases {
        println!("{}", release_run(&a, &scripts, &clients[0], k).await?);
    }
    Ok(())
}
