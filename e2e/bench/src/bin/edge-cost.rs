//! `edge-cost`: the CPU of each check an order passes before Redis, alone, in this process (no
//! network, no Pingora), so the gateway's per-request figures of `e2e/bench/gateway.sh` can be
//! split: what the checks cost and what the framework around them costs.
//!
//! Issues one campaign token with the gateway's own code (`plugins::issue::token`), signs an order with
//! it as a client would, then times `--rounds` calls of each step: the campaign token's
//! verification (JWT HS256: base64, JSON, HMAC, claims), the hidden path, the signing key's
//! derivation, the signature headers' parse, the request signature's check (SHA-256 of the body
//! and HMAC), a forged signature's check, and the rate limiter's three estimators. Prints ns per
//! call of each, best of three passes.

use std::hint::black_box;
use std::time::Instant;

use clap::Parser;
use plugins::checks::signature::{self, Request, Signed};
use plugins::checks::RateLimiter;
use plugins::issue::EdgeKeys;
use plugins::issue::Login;
use protocol::campaign::Limits;

#[derive(Parser)]
#[command(about = "CPU per call of each edge check")]
struct Args {
    /// Calls of each step per pass.
    #[arg(long, default_value_t = 200_000)]
    rounds: u32,
}

/// Best ns per call of `f` over three passes of `rounds` calls.
fn time(rounds: u32, mut f: impl FnMut()) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..rounds {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(rounds)
        })
        .fold(f64::MAX, f64::min)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!((1_000..=10_000_000).contains(&a.rounds), "--rounds 1000..10000000");
    let keys = EdgeKeys::derive(b"edge-cost-master-key-0123456789abcdef").map_err(anyhow::Error::msg)?;
    let now = chrono::Utc::now().timestamp();
    let login = Login { user: "buyer-000123".into(), level: Some(1), ..Login::default() };
    let issued = keys
        .issue(&login, "campaign-1", "device-000123", 600, now)
        .map_err(|d| anyhow::anyhow!("{}", d.message))?;
    let authorization = format!("Bearer {}", issued.token).into_bytes();
    let path = format!("/seckill/campaign-1/{}/order", issued.path);
    let request = Request { method: "POST", path: &path, query: "qty=1", body: b"" };
    let ts = now.to_string();
    let nonce = "n0123456789abcdef";
    let claims = keys
        .verify(Some(&authorization), "campaign-1", Some("device-000123"))
        .map_err(|d| anyhow::anyhow!("{}", d.message))?;
    let key = keys.signing_key(&claims.jti);
    let good = signature::sign(&key, &request, &ts, nonce);
    let forged = format!("{}{}", if good.starts_with('0') { "1" } else { "0" }, &good[1..]);
    let signed = |sig: &'static str| Signed { timestamp: &ts, unix_secs: now, nonce, signature: sig };
    let good: &'static str = Box::leak(good.into_boxed_str());
    let forged: &'static str = Box::leak(forged.into_boxed_str());
    let limiter = RateLimiter::new();
    let limits = Limits {
        ip_per_sec: 1_000_000_000,
        device_per_sec: 1_000_000_000,
        user_per_sec: 1_000_000_000,
        ..Limits::default()
    };
    let ip = Some("10.1.2.3".parse()?);
    let n = a.rounds;

    let rows: Vec<(&str, f64)> = vec![
        (
            "campaign token verify (JWT HS256 + claims)",
            time(n, || {
                black_box(
                    keys.verify(Some(black_box(&authorization)), "campaign-1", Some("device-000123")).is_ok(),
                );
            }),
        ),
        (
            "hidden path check (HMAC, hex)",
            time(n, || {
                black_box(keys.check_path(black_box(&claims), &issued.path).is_ok());
            }),
        ),
        (
            "signing key derivation (HMAC + key setup)",
            time(n, || {
                black_box(keys.signing_key(black_box(&claims.jti)));
            }),
        ),
        (
            "signature headers parse",
            time(n, || {
                black_box(
                    signature::parse(Some(ts.as_bytes()), Some(nonce.as_bytes()), Some(good.as_bytes()))
                        .is_ok(),
                );
            }),
        ),
        (
            "request signature verify (valid)",
            time(n, || {
                black_box(signature::verify(&key, black_box(&request), &signed(good)).is_ok());
            }),
        ),
        (
            "request signature verify (forged)",
            time(n, || {
                black_box(signature::verify(&key, black_box(&request), &signed(forged)).is_err());
            }),
        ),
        (
            "rate limits: IP, device, account",
            time(n, || {
                black_box(
                    limiter.check("campaign-1", &limits, ip, Some("device-000123"), "buyer-000123").is_ok(),
                );
            }),
        ),
    ];
    let total: f64 = rows.iter().filter(|(name, _)| !name.contains("(valid)")).map(|(_, ns)| ns).sum();
    println!("{:<46} {:>10}", "edge check (one core, no I/O)", "ns/call");
    for (name, ns) in &rows {
        println!("{name:<46} {ns:>10.0}");
    }
    println!("{:<46} {:>10.0}", "a forged order's checks, summed", total);
    Ok(())
}
