//! `presign`: signed order requests for an outside load tool (`wrk`), so a benchmark drives the
//! whole client protocol without signing anything while it measures.
//!
//! For each of `--users` new buyers: a login JWT (the shop's auth service, played with
//! `SECKILL_LOGIN_KEY`), a captcha challenge solved and a campaign token from the gateway at
//! `--base`, then one signed order (`qty=1`, a fresh nonce, the time of signing). Writes one line
//! per order to `--out`, tab-separated: `path?query`, `Authorization`, `X-Device-Id`,
//! `X-Timestamp`, `X-Nonce`, `X-Signature`. Each line is one valid order until the campaign's
//! timestamp window and token life run out (set them long for a benchmark); sent twice, the
//! second is a safe retry.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use futures::stream::{self, StreamExt};

#[derive(Parser)]
#[command(about = "Signed order requests for a load tool")]
struct Args {
    /// The gateway, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    base: String,
    /// The campaign.
    #[arg(long)]
    campaign: String,
    /// Buyers (one order each).
    #[arg(long, default_value_t = 100_000)]
    users: usize,
    /// Token requests in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Where the lines go.
    #[arg(long)]
    out: std::path::PathBuf,
    /// The login JWT key (HS256), the gateway's `defense.login_key`.
    #[arg(long, env = "SECKILL_LOGIN_KEY", hide_env_values = true)]
    login_key: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !(1..=2_000_000).contains(&a.users) || !(1..=1024).contains(&a.concurrency) {
        bail!("--users 1..2000000, --concurrency 1..1024");
    }
    let auth = fixtures::client::Auth::hs256(a.login_key.as_bytes())?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(a.concurrency).build()?;
    let tag = fixtures::stack::unique("");
    let started = Instant::now();
    let lines: Vec<Result<String, String>> = stream::iter(0..a.users)
        .map(|i| {
            let (http, auth, a, tag) = (&http, &auth, &a, &tag);
            async move {
                let user = format!("bench{tag}-{i}");
                let login = auth.login(&user, serde_json::json!({"level": 1}));
                let t =
                    fixtures::client::get_ticket(http, &a.base, &a.campaign, &login, &format!("dev-{user}"))
                        .await
                        .map_err(|(status, body)| format!("{status} {body}"))?;
                let o = t.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
                Ok(format!(
                    "{}?{}\tBearer {}\t{}\t{}\t{}\t{}",
                    o.path, o.query, t.token, t.device, o.timestamp, o.nonce, o.signature
                ))
            }
        })
        .buffer_unordered(a.concurrency)
        .collect()
        .await;
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?,
    );
    let mut refused = Vec::new();
    for line in lines {
        match line {
            Ok(l) => writeln!(out, "{l}")?,
            Err(e) => refused.push(e),
        }
    }
    out.flush()?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} signed orders in {secs:.1} s ({:.0} tokens/s); {} refused{}",
        a.users - refused.len(),
        (a.users - refused.len()) as f64 / secs,
        refused.len(),
        refused.first().map(|e| format!(", e.g. {e}")).unwrap_or_default()
    );
    if refused.len() * 100 > a.users {
        bail!("more than 1% of the token requests were refused");
    }
    Ok(())
}
