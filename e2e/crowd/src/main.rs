//! `seckill-load`: a flash sale's crowd, and the report of what happened.
//!
//! Gets every user (and bot) a campaign token (login JWT, proof of work, token endpoint); early
//! birds knock before the window opens; everyone idles until the gateway's clock says open; then
//! the step burst of signed orders, mixed with hot users and bots; every queued request is polled
//! until it settles and a share of the winners pay; optionally, once the others' orders closed,
//! a resale wave buys the released stock. Then the outcome is checked against PostgreSQL and
//! Redis: never more orders than stock, never more than the limit per user, no accepted
//! reservation without an order or a refusal, Redis and PostgreSQL agree, no bot reserved
//! anything. Exits non-zero when one fails.

use anyhow::Context;
use clap::Parser;

use e2e::load::{self, Crowd, Mix};
use e2e::report::{self, Report};

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "seckill-load", about = "Run a crowd of buyers and bots against the gateway and report")]
struct Args {
    /// Gateway base URL (loopback only); give it twice for two gateways (round robin).
    #[arg(long, required = true)]
    gateway: Vec<String>,
    /// Campaign id.
    #[arg(long)]
    campaign: String,
    /// Distinct users in the crowd.
    #[arg(long, default_value_t = 50_000)]
    users: u32,
    /// Order requests each user sends in the burst (more than the limit exercises the dedupe).
    #[arg(long, default_value_t = 4)]
    requests_per_user: u32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Hot users: users who also fire many attempts at once.
    #[arg(long, default_value_t = 50)]
    hot_users: u32,
    /// Concurrent attempts of each hot user.
    #[arg(long, default_value_t = 20)]
    hot_attempts: u32,
    /// Bot requests of each kind (bad signature, resent request, reused nonce, stale timestamp,
    /// rotated device).
    #[arg(long, default_value_t = 250)]
    bots_per_kind: u32,
    /// Users who send an order before the window opens.
    #[arg(long, default_value_t = 200)]
    early_birds: u32,
    /// Percentage of winners who pay (the others let their order close).
    #[arg(long, default_value_t = 50)]
    pay_percent: u32,
    /// Percentage of buyers who give up on a `TRY_LATER` or `SERVICE_DEGRADED` answer; the
    /// others resend their signed order as the buyer's page does (`web/app.js`: after
    /// `Retry-After` with jitter, within 20 s, 6 sends at most).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    give_up_percent: u32,
    /// The order writer's base URL, for payments (none without it).
    #[arg(long)]
    writer: Option<String>,
    /// The payment provider's key (the order writer's `payment_key`).
    #[arg(long, env = "SECKILL_PAYMENT_KEY", hide_env_values = true)]
    payment_key: Option<String>,
    /// After the drain, wait (at most this many seconds) until every unpaid order closed, then
    /// send a resale wave of `--resale-users` losers at the released stock. 0: no resale.
    #[arg(long, default_value_t = 0)]
    close_wait_secs: u64,
    /// Users in the resale wave.
    #[arg(long, default_value_t = 200)]
    resale_users: u32,
    /// Seconds to wait for every queued request to settle.
    #[arg(long, default_value_t = 60)]
    settle_secs: u64,
    /// A shell command run after the drain, before the checks (a reconcile --repair, say).
    #[arg(long)]
    after_drain: Option<String>,
    /// Queued answers that may end without an order or a refusal: measured, not judged (a
    /// durability window); "any" for no bound.
    #[arg(long, default_value = "0")]
    lost_allowed: String,
    /// A process whose peak RSS the report shows: NAME=PID (repeatable).
    #[arg(long)]
    process: Vec<String>,
    /// A /metrics endpoint the report scrapes after the drain: NAME=URL (repeatable).
    #[arg(long)]
    metrics: Vec<String>,
    /// PostgreSQL URL of the order writer's database (for the checks).
    #[arg(long, env = "SECKILL_PG_URL")]
    pg_url: String,
    /// Redis URL (for the checks).
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6390")]
    redis_url: String,
    /// The shop auth service's HS256 key, to mint the users' login JWTs (the gateway's
    /// `defense.login_key`).
    #[arg(long, env = "SECKILL_LOGIN_KEY", hide_env_values = true)]
    login_key: String,
    /// A shop page behind the gateway (a shop route): one GET every 10 ms for the whole run,
    /// reported before the window opens, during the tokens and the burst, and after.
    #[arg(long)]
    shop: Option<String>,
    /// The same shop page straight, without the gateway: the floor beside `--shop`.
    #[arg(long, requires = "shop")]
    shop_direct: Option<String>,
    /// The flood instead of the token phase and the burst: every account sends its token
    /// request in the first second of the sale (`--flood-spread-ms`), then its orders at once;
    /// `--script-percent` of them at the very start instant. The report adds peak EVALSHA and
    /// reservations per second of the sale's Redis, the QUEUED answers' p99, the ETA errors and
    /// the scripts' share of the winners, and, with `--admit-per-sec`, the room's targets.
    #[arg(long)]
    flood: bool,
    /// The flood: percentage of the accounts that fire at T-0, as a script would.
    #[arg(long, default_value_t = 10, requires = "flood")]
    script_percent: u32,
    /// The flood: the other accounts arrive evenly over this many ms ...
    #[arg(long, default_value_t = 1000, requires = "flood")]
    flood_spread_ms: u64,
    /// ... from this many ms before the start (0: all after it; the pre-queue's share before).
    #[arg(long, default_value_t = 0, requires = "flood")]
    flood_lead_ms: u64,
    /// The flood: the campaign's `[waiting_room] admit_per_sec`, when its room is on (the
    /// targets are judged against it).
    #[arg(long, requires = "flood")]
    admit_per_sec: Option<u64>,
    /// The flood: each account's first token request without the work, as the buyer's page
    /// sends it when the room is on (else the captcha first, then the token with its answer).
    #[arg(long, requires = "flood")]
    flood_room_first: bool,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Also write the report as a self-contained HTML page (SVG plots) to this file.
    #[arg(long)]
    html: Option<std::path::PathBuf>,
}

fn pair(s: &str) -> anyhow::Result<(String, String)> {
    s.split_once('=')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .with_context(|| format!("expected NAME=VALUE, got {s:?}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    protocol::logging::init();
    let args = Args::parse();
    for g in &args.gateway {
        load::require_loopback(g)?;
    }
    let lost_allowed = match args.lost_allowed.as_str() {
        "any" => u64::MAX,
        n => n.parse().context("--lost-allowed: a number or \"any\"")?,
    };
    let payments = match (&args.writer, &args.payment_key) {
        (Some(w), Some(k)) => {
            load::require_loopback(w)?;
            Some((w.trim_end_matches('/').to_string(), k.as_bytes().to_vec()))
        }
        _ => None,
    };
    let crowd = Crowd {
        gateways: args.gateway.iter().map(|g| g.trim_end_matches('/').to_string()).collect(),
        campaign: args.campaign.clone(),
        users: args.users,
        requests_per_user: args.requests_per_user,
        concurrency: args.concurrency,
        settle: std::time::Duration::from_secs(args.settle_secs),
        auth: e2e::client::Auth::hs256(args.login_key.as_bytes())?,
        mix: Mix {
            hot_users: args.hot_users,
            hot_attempts: args.hot_attempts,
            bots_per_kind: args.bots_per_kind,
            early_birds: args.early_birds,
            pay_percent: if payments.is_some() { args.pay_percent } else { 0 },
            give_up_percent: args.give_up_percent,
        },
        payments,
        stock_at: Some((args.redis_url.clone(), args.pg_url.clone())),
    };
    let metrics_urls: Vec<String> =
        args.metrics.iter().filter_map(|m| pair(m).ok()).map(|(_, url)| url).collect();
    for url in &metrics_urls {
        load::require_loopback(url)?;
    }
    // The report's timelines; a sale whose servers cannot be sampled runs without them.
    let start =
        e2e::sampler::Sampler::start(&args.campaign, &args.pg_url, &args.redis_url, metrics_urls.clone());
    let sampler = match tokio::time::timeout(std::time::Duration::from_secs(5), start)
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("Redis or PostgreSQL did not answer within 5 s")))
    {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("seckill-load: no timelines in the report (the sampler did not start: {e:#})");
            None
        }
    };
    // -- the rest of the shop during the sale: its client starts before the crowd --
    let probe = |url: &String| {
        e2e::shop::Probe::start(
            url.clone(),
            std::time::Duration::from_millis(10),
            std::time::Duration::from_secs(3600),
        )
    };
    let shop = args.shop.as_ref().map(probe).transpose()?;
    let shop_direct = args.shop_direct.as_ref().map(probe).transpose()?;
    // -- end of the shop --
    let flood = args.flood.then(|| e2e::flood::Flood {
        script_percent: args.script_percent.min(100),
        spread_ms: args.flood_spread_ms,
        lead_ms: args.flood_lead_ms,
        admit_per_sec: args.admit_per_sec,
        room_first: args.flood_room_first,
    });
    let (run, flooded) = match &flood {
        None => (load::run(&crowd).await, None),
        Some(f) => {
            let redis = e2e::flood::Sampler::start(
                &args.campaign,
                &args.pg_url,
                &args.redis_url,
                metrics_urls.clone(),
            )
            .await
            .context("sampling the sale's Redis for the flood")?;
            match e2e::flood::run(&crowd, f).await {
                Ok(r) => {
                    let samples = redis.stop(r.start).await;
                    let figures = e2e::flood::Figures::of(f, &r.outcome, &r.accounts, samples, r.offset_ms);
                    (Ok(r.outcome), Some(figures))
                }
                Err(e) => (Err(e), None),
            }
        }
    };
    let samples = match sampler {
        Some(s) => s.stop().await,
        None => Vec::new(),
    };
    let mut outcome = run.context("running the crowd")?;
    if args.close_wait_secs > 0 {
        report::wait_closed(
            &args.campaign,
            &args.pg_url,
            std::time::Duration::from_secs(args.close_wait_secs),
        )
        .await?;
        load::resale(&crowd, &mut outcome, args.resale_users).await.context("the resale wave")?;
    }
    if let Some(cmd) = &args.after_drain {
        eprintln!("seckill-load: after the drain: {cmd}");
        let status = std::process::Command::new("sh").arg("-c").arg(cmd).status()?;
        anyhow::ensure!(status.success(), "--after-drain command failed: {status}");
    }
    let checks = report::check(&args.campaign, &args.pg_url, &args.redis_url, &outcome)
        .await
        .context("checking the outcome against PostgreSQL and Redis")?;
    let mut report =
        Report::new(&crowd, &outcome, checks, lost_allowed).with_samples(outcome.opened, samples);
    report.flood = flooded;
    // -- the rest of the shop during the sale --
    if let Some(probe) = shop {
        let samples = probe.stop();
        let burst_end = outcome.burst_started.map_or_else(std::time::Instant::now, |s| s + outcome.burst);
        let mut through = e2e::shop::Shop::of(&samples, outcome.opened, burst_end);
        if let Some(direct) = shop_direct {
            through = through.with_direct(e2e::shop::Shop::of(&direct.stop(), outcome.opened, burst_end));
        }
        report.shop = Some(through);
    }
    // -- end of the shop --
    for p in &args.process {
        let (name, pid) = pair(p)?;
        report.peak_rss_mib.insert(name, e2e::watch::peak_rss_mib(&pid));
    }
    for m in &args.metrics {
        let (name, url) = pair(m)?;
        load::require_loopback(&url)?;
        report.metrics.insert(name, e2e::watch::scrape(&url).await);
    }
    println!("{}", report.render());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, e2e::page::html(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !report.passed() {
        anyhow::bail!("the sale broke an invariant: see the report above");
    }
    Ok(())
}
