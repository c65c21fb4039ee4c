//! `seckill-load`: a flash sale's crowd, and the report of what happened.
//!
//! Gets every user a campaign token (login JWT, proof of work, token endpoint), sends a burst
//! of signed order requests from simulated users to the gateway, polls each queued
//! request's result with backoff, then checks the outcome against PostgreSQL and Redis: never
//! more orders than stock, never more than the limit per user, and no accepted reservation
//! without an order or a release.

use anyhow::Context;
use clap::Parser;

use e2e::load::{self, Crowd};
use e2e::report::{self, Report};

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "seckill-load", about = "Run a crowd of buyers against the gateway and report")]
struct Args {
    /// Gateway base URL (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    gateway: String,
    /// Campaign id.
    #[arg(long)]
    campaign: String,
    /// Distinct users in the crowd.
    #[arg(long, default_value_t = 5_000)]
    users: u32,
    /// Order requests each user sends (more than the limit exercises the per-user dedupe).
    #[arg(long, default_value_t = 2)]
    requests_per_user: u32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Seconds to wait for every queued request to settle.
    #[arg(long, default_value_t = 60)]
    settle_secs: u64,
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
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    protocol::logging::init();
    let args = Args::parse();
    load::require_loopback(&args.gateway)?;
    let crowd = Crowd {
        gateway: args.gateway.trim_end_matches('/').to_string(),
        campaign: args.campaign.clone(),
        users: args.users,
        requests_per_user: args.requests_per_user,
        concurrency: args.concurrency,
        settle: std::time::Duration::from_secs(args.settle_secs),
        auth: e2e::client::Auth::hs256(args.login_key.as_bytes())?,
    };
    let outcome = load::run(&crowd).await.context("running the crowd")?;
    let checks = report::check(&args.campaign, &args.pg_url, &args.redis_url, &outcome)
        .await
        .context("checking the outcome against PostgreSQL and Redis")?;
    let report = Report::new(&crowd, &outcome, checks);
    println!("{}", report.render());
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !report.passed() {
        anyhow::bail!("the sale broke an invariant: see the report above");
    }
    Ok(())
}
