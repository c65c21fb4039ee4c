//! The crowd: every simulated user gets a campaign token (its login JWT from the shop's auth
//! service, played with the demo's key; the captcha's proof of work; the token endpoint), then
//! the burst of signed order requests, then result polling with backoff.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hdrhistogram::Histogram;
use serde::Deserialize;

use crate::client::{get_ticket, nonce, Ticket};

/// What the crowd looks like.
#[derive(Debug, Clone)]
pub struct Crowd {
    /// Gateway base URL, without a trailing slash.
    pub gateway: String,
    /// Campaign id.
    pub campaign: String,
    /// Distinct users.
    pub users: u32,
    /// Requests per user.
    pub requests_per_user: u32,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// How long queued requests may take to settle.
    pub settle: Duration,
    /// The shop's auth service (mints the users' login JWTs).
    pub auth: crate::client::Auth,
}

/// What the crowd saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Order answers by code (`HTTP_<status>` when the body had no code, `ERROR` on transport errors).
    pub answers: BTreeMap<String, u64>,
    /// Latency of order requests, microseconds.
    pub latency_us: Option<Histogram<u64>>,
    /// Wall time of the token phase (captcha, proof of work, token, for every user).
    pub tokens: Duration,
    /// Users refused a token, by code.
    pub token_refusals: BTreeMap<String, u64>,
    /// Wall time of the burst.
    pub burst: Duration,
    /// request id -> user, for every QUEUED answer.
    pub queued: HashMap<String, String>,
    /// Final results of queued requests by code (`UNSETTLED` when still queued at the deadline).
    pub results: BTreeMap<String, u64>,
    /// Wall time until every queued request settled (or the deadline).
    pub settle: Duration,
}

#[derive(Debug, Deserialize)]
struct Answer {
    code: Option<String>,
    request_id: Option<String>,
}

/// Refuses targets off the loopback range: load goes only to this machine.
pub fn require_loopback(url: &str) -> anyhow::Result<()> {
    let host = url.split("://").nth(1).and_then(|rest| rest.split(['/', ':']).next()).unwrap_or_default();
    if host == "localhost" || host.starts_with("127.") || host == "[::1]" {
        Ok(())
    } else {
        anyhow::bail!("refusing to send load to {url}: only loopback targets are allowed")
    }
}

/// The order in which requests go out: every user's n-th request before anyone's (n+1)-th,
/// users interleaved by a fixed stride so neighbours do not arrive together.
fn schedule(users: u32, per_user: u32) -> Vec<u32> {
    let stride = 7919 % users.max(1);
    let stride = if stride == 0 || gcd(stride, users) != 1 { 1 } else { stride };
    let mut order = Vec::with_capacity((users * per_user) as usize);
    for _ in 0..per_user {
        order.extend((0..users).map(|i| (i as u64 * stride as u64 % users as u64) as u32));
    }
    order
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Runs the burst, then polls results until all settle or the deadline passes.
pub async fn run(crowd: &Crowd) -> anyhow::Result<Outcome> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(crowd.concurrency)
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut out =
        Outcome { latency_us: Some(Histogram::new_with_bounds(1, 60_000_000, 3)?), ..Default::default() };

    let started = Instant::now();
    let got: Vec<(u32, Result<Ticket, String>)> = futures::stream::iter(0..crowd.users)
        .map(|u| {
            let (client, crowd) = (client.clone(), crowd.clone());
            async move {
                let login = crowd.auth.login(&format!("user-{u}"), serde_json::json!({"level": 1}));
                let device = format!("device-{u}");
                let t = get_ticket(&client, &crowd.gateway, &crowd.campaign, &login, &device).await;
                (
                    u,
                    t.map_err(|(status, body)| {
                        body["code"].as_str().map_or(format!("HTTP_{status}"), str::to_string)
                    }),
                )
            }
        })
        .buffer_unordered(crowd.concurrency)
        .collect()
        .await;
    let mut tickets = HashMap::new();
    for (u, t) in got {
        match t {
            Ok(t) => {
                tickets.insert(u, t);
            }
            Err(code) => *out.token_refusals.entry(code).or_default() += 1,
        }
    }
    out.tokens = started.elapsed();

    let started = Instant::now();
    let jobs: Vec<(u32, &Ticket)> = schedule(crowd.users, crowd.requests_per_user)
        .into_iter()
        .filter_map(|u| tickets.get(&u).map(|t| (u, t)))
        .collect();
    let mut answers = futures::stream::iter(jobs)
        .map(|(u, ticket)| {
            let client = client.clone();
            let base = crowd.gateway.clone();
            async move {
                let user = format!("user-{u}");
                let signed = ticket.sign(1, chrono::Utc::now().timestamp(), &nonce());
                let t = Instant::now();
                let (status, body) = ticket.send(&client, &base, &signed).await;
                let answer: Answer =
                    serde_json::from_value(body).unwrap_or(Answer { code: None, request_id: None });
                let code = match (status, answer.code) {
                    (0, _) => ("ERROR".to_string(), None),
                    (_, Some(code)) => (code, answer.request_id),
                    (status, None) => (format!("HTTP_{status}"), None),
                };
                (user, code, t.elapsed())
            }
        })
        .buffer_unordered(crowd.concurrency);
    while let Some((user, (code, request_id), took)) = answers.next().await {
        if let Some(h) = out.latency_us.as_mut() {
            h.saturating_record(took.as_micros() as u64);
        }
        if code == "QUEUED" {
            if let Some(id) = request_id {
                out.queued.insert(id, user);
            }
        }
        *out.answers.entry(code).or_default() += 1;
    }
    out.burst = started.elapsed();

    let settle_started = Instant::now();
    let deadline = settle_started + crowd.settle;
    let ids: Vec<String> = out.queued.keys().cloned().collect();
    let results = futures::stream::iter(ids)
        .map(|id| {
            let client = client.clone();
            let url = format!("{}/seckill/{}/result/{}", crowd.gateway, crowd.campaign, id);
            async move { poll(&client, &url, deadline).await }
        })
        .buffer_unordered(crowd.concurrency.min(64));
    let codes: Vec<String> = results.collect().await;
    for code in codes {
        *out.results.entry(code).or_default() += 1;
    }
    out.settle = settle_started.elapsed();
    Ok(out)
}

/// Result codes that end polling; anything else (QUEUED, NOT_FOUND while the order writer has
/// not seen the record yet, a 5xx code, a transport error) is asked again.
const FINAL: [&str; 5] = ["SUCCESS", "SOLD_OUT", "FAILED", "PAID", "CLOSED"];

/// Polls one result with exponential backoff (50 ms doubling to 1 s) until it is final.
async fn poll(client: &reqwest::Client, url: &str, deadline: Instant) -> String {
    let mut wait = Duration::from_millis(50);
    loop {
        let code = match client.get(url).send().await {
            Ok(r) => r.json::<Answer>().await.ok().and_then(|a| a.code).unwrap_or_else(|| "ERROR".into()),
            Err(_) => "ERROR".into(),
        };
        if FINAL.contains(&code.as_str()) {
            return code;
        }
        if Instant::now() + wait > deadline {
            return "UNSETTLED".into();
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_sends_each_user_the_asked_number_of_times() {
        let s = schedule(10, 3);
        assert_eq!(s.len(), 30);
        for u in 0..10 {
            assert_eq!(s.iter().filter(|&&x| x == u).count(), 3);
        }
        // Users are interleaved, not in id order.
        assert_ne!(&s[..3], &[0, 1, 2]);
    }

    #[test]
    fn only_loopback_targets_are_allowed() {
        assert!(require_loopback("http://127.0.0.1:8080").is_ok());
        assert!(require_loopback("http://localhost:1/x").is_ok());
        assert!(require_loopback("http://10.0.0.1:8080").is_err());
        assert!(require_loopback("http://example.com").is_err());
    }
}
