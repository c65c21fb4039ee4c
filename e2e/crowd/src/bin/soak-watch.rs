//! `soak-watch`: what `e2e/soak.sh` keeps an eye on for as long as the soak runs. Every
//! `--every-secs` it samples each `--process` (resident memory, descriptors, threads, its
//! established connections to each `--peer` port), Redis (used memory, keys) and PostgreSQL (the
//! soak database's connections), tagging the sample quiet when `--phase-file` says `quiet`; all
//! along, one shop GET through the gateway every `--shop-every-ms`. When `--stop-file` appears (or
//! after `--max-secs`) it judges (`e2e::soak`), writes `report.txt`, `report.json` and
//! `report.html` to `--out` (and every sample to `samples.jsonl` as it goes), prints the text,
//! and exits 1 when the soak failed.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use e2e::soak::{self, procfs, Report, Sample, ShopFigures};
use fred::prelude::*;
use fred::types::InfoKind;

#[derive(Parser)]
#[command(about = "Samples the soak's processes, Redis and PostgreSQL, sends the shop's GETs, judges growth")]
struct Args {
    /// Where the samples and reports go.
    #[arg(long)]
    out: PathBuf,
    /// A process to sample, `name=pid`; repeat.
    #[arg(long, value_parser = named::<u32>)]
    process: Vec<(String, u32)>,
    /// A port whose established connections each process holds are counted, `name=port`.
    #[arg(long, value_parser = named::<u16>)]
    peer: Vec<(String, u16)>,
    /// The Redis to sample (used memory, keys).
    #[arg(long)]
    redis_url: String,
    /// PostgreSQL's admin database; the watcher holds one connection to it.
    #[arg(long, env = "SECKILL_PG_ADMIN_URL")]
    pg_admin_url: String,
    /// The database whose connections are counted.
    #[arg(long)]
    database: String,
    /// A shop page through the gateway.
    #[arg(long)]
    shop: String,
    /// One shop GET this often.
    #[arg(long, default_value_t = 50)]
    shop_every_ms: u64,
    /// One sample this often.
    #[arg(long, default_value_t = 10)]
    every_secs: u64,
    /// Holds `quiet` between two sales after the first one (the samples growth is judged on).
    #[arg(long)]
    phase_file: PathBuf,
    /// The soak is over when this file exists.
    #[arg(long)]
    stop_file: PathBuf,
    /// One verdict line per sale (`PASS ...` / `FAIL ...`), read at the end.
    #[arg(long)]
    sales_file: PathBuf,
    /// Stop after this long even without the stop file.
    #[arg(long, default_value_t = 3 * 3600)]
    max_secs: u64,
    /// A series that counts a pool's connections, `series=size` (e.g. `pg/connections=24`): it
    /// passes while within the pool's size (`e2e::soak::judge`); repeat.
    #[arg(long, value_parser = named::<u32>)]
    pool: Vec<(String, u32)>,
}

/// `name=value`.
fn named<T: std::str::FromStr>(s: &str) -> Result<(String, T), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected name=value"))?;
    let value = value.parse().map_err(|_| format!("{s:?}: {value:?} is not a valid value"))?;
    Ok((name.to_string(), value))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out)?;
    let redis = Client::new(Config::from_url(&args.redis_url)?, None, None, None);
    redis.init().await?;
    let pg = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&args.pg_admin_url).await?;
    let bound = Duration::from_secs(args.max_secs);
    let probe = e2e::shop::Probe::start(args.shop.clone(), Duration::from_millis(args.shop_every_ms), bound)?;
    let mut log = std::fs::File::create(args.out.join("samples.jsonl"))?;
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut next = start;
    while !args.stop_file.exists() && start.elapsed() < bound {
        if Instant::now() >= next {
            next += Duration::from_secs(args.every_secs);
            let sample = take(&args, &redis, &pg, start.elapsed().as_secs_f64()).await;
            writeln!(log, "{}", serde_json::to_string(&sample)?)?;
            samples.push(sample);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shop = shop_figures(&probe.stop());
    let sales = std::fs::read_to_string(&args.sales_file).unwrap_or_default();
    let pools = args.pool.iter().map(|(series, size)| (series.clone(), f64::from(*size))).collect();
    let sales = sales.lines().map(String::from).collect();
    let report = Report::new(start.elapsed().as_secs_f64(), samples, &pools, shop, sales);
    std::fs::write(args.out.join("report.txt"), report.text(true))?;
    std::fs::write(args.out.join("report.json"), serde_json::to_string_pretty(&report)?)?;
    std::fs::write(args.out.join("report.html"), soak::html::render(&report))?;
    print!("{}", report.text(false));
    let _ = tokio::time::timeout(Duration::from_secs(1), redis.quit()).await;
    std::process::exit(if report.passed() { 0 } else { 1 });
}

/// One sample of every process, Redis and PostgreSQL (a part that does not answer within 2 s
/// leaves its series out of this sample).
async fn take(args: &Args, redis: &Client, pg: &sqlx::PgPool, t: f64) -> Sample {
    let quiet = std::fs::read_to_string(&args.phase_file).is_ok_and(|p| p.trim() == "quiet");
    let mut series = std::collections::BTreeMap::new();
    for (name, pid) in &args.process {
        let Some(held) = procfs::held(*pid) else { continue };
        series.insert(format!("{name}/rss_mib"), held.rss_mib);
        series.insert(format!("{name}/fds"), held.fds);
        series.insert(format!("{name}/threads"), held.threads);
        for (peer, port) in &args.peer {
            series.insert(format!("{name}/conns:{peer}"), held.conns.get(port).copied().unwrap_or(0.0));
        }
    }
    let bound = Duration::from_secs(2);
    if let Ok(Ok(info)) = tokio::time::timeout(bound, redis.info::<String>(Some(InfoKind::Memory))).await {
        if let Some(bytes) = info_field(&info, "used_memory") {
            series.insert("redis/used_mib".into(), bytes / 1048576.0);
        }
    }
    if let Ok(Ok(keys)) = tokio::time::timeout(bound, redis.dbsize::<i64>()).await {
        series.insert("redis/keys".into(), keys as f64);
    }
    let count = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
        .bind(&args.database)
        .fetch_one(pg);
    if let Ok(Ok(n)) = tokio::time::timeout(bound, count).await {
        series.insert("pg/connections".into(), n as f64);
    }
    Sample { t, quiet, series }
}

/// A field of Redis's `INFO` text.
fn info_field(info: &str, name: &str) -> Option<f64> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

/// The shop's figures from its GETs.
fn shop_figures(samples: &[e2e::shop::Sample]) -> ShopFigures {
    let mut ms: Vec<f64> = samples.iter().map(|s| s.took.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        ms.get(((ms.len() as f64 * q) as usize).min(ms.len().saturating_sub(1))).copied().unwrap_or(0.0)
    };
    ShopFigures {
        requests: samples.len() as u64,
        errors: samples.iter().filter(|s| !s.ok).count() as u64,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: ms.last().copied().unwrap_or(0.0),
    }
}
