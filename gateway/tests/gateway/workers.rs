//! The worker model (`[server] workers`): a request behaves the same whichever worker takes it.
//! The per-IP and per-account limits are the process's, not a worker's: a burst spread over
//! both workers of a gateway (each request on a connection of its own; both workers' threads
//! are seen to work) is limited as one gateway of one worker would limit it.

use std::collections::HashMap;

use serde_json::Value;

use crate::support::*;

/// CPU time in nanoseconds (`schedstat`) of each of `pid`'s threads named `gw-worker-*`.
fn worker_cpu(pid: u32) -> HashMap<String, u64> {
    let mut ticks = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !comm.starts_with("gw-worker-") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        let ns = stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        *ticks.entry(comm.to_string()).or_default() += ns;
    }
    ticks
}

/// Sends rounds of 10 requests at once, each on a connection of its own, for 3 s; returns the
/// answers' codes and how long it took.
async fn burst<F, Fut>(send: F) -> (HashMap<String, usize>, std::time::Duration)
where
    F: Fn(reqwest::Client) -> Fut,
    Fut: std::future::Future<Output = (u16, Value)> + Send + 'static,
{
    let started = std::time::Instant::now();
    let mut codes = HashMap::new();
    for _ in 0..200 {
        if started.elapsed() >= std::time::Duration::from_secs(3) {
            break;
        }
        let mut round = Vec::new();
        for _ in 0..10 {
            // No connection reuse: each request is a new connection, which either worker accepts.
            let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
            round.push(tokio::spawn(send(http)));
        }
        for t in round {
            let (_, body) = t.await.unwrap();
            *codes.entry(body["code"].as_str().unwrap_or("?").to_string()).or_insert(0) += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (codes, started.elapsed())
}

/// Most requests a limit of `per_sec` lets through in `took`: one per started one-second window
/// of the estimator, whose boundaries are its own (so one more window than whole seconds). A
/// limiter per worker would let through `workers` times as many in each whole second.
fn at_most(per_sec: usize, took: std::time::Duration) -> usize {
    per_sec * (took.as_secs() as usize + 2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_per_ip_and_per_account_limits_hold_across_workers() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("wk");
    publish(&redis, &campaign, 10, 1).await;
    let upstream = wiremock::MockServer::start().await;
    let mut conf = GatewayConf::new(
        &fixtures::stack::redis_url(),
        &upstream.address().to_string(),
        &campaign,
        "[limits]\nip_per_sec = 5\nuser_per_sec = 3",
    );
    conf.workers = 2;
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let t = ticket(&http, &gw, &campaign, "eager").await.unwrap();
    let before = worker_cpu(gw.pid());
    assert_eq!(before.len(), 2, "two workers: {before:?}");

    // Per IP: captcha requests from 127.0.0.1 for 3 s. One limiter lets 5 through in each
    // one-second window (25 at most); one per worker would let 10 through in each (30 at least).
    let base = gw.url("");
    let c = campaign.clone();
    let (codes, took) = burst(move |http| {
        let (base, c) = (base.clone(), c.clone());
        async move {
            let r = http
                .post(format!("{base}/seckill/{c}/captcha"))
                .header("x-device-id", "dev-eager")
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
        }
    })
    .await;
    let passed = codes.get("CHALLENGE").copied().unwrap_or(0);
    assert!(passed <= at_most(5, took), "per IP, in {took:?}: {codes:?}");
    assert!(passed >= 5, "the limit lets some through: {codes:?}");

    // Per account: one buyer's orders (forged signatures: refused after the account's rate, so
    // nothing is reserved) for 3 s over both workers: 15 at most through, 18 at least with a
    // limiter per worker.
    let base = gw.url("");
    let (codes, took) = burst(move |http| {
        let (t, base) = (t.clone(), base.clone());
        async move {
            let now = chrono::Utc::now().timestamp();
            let mut signed = t.sign(1, now, &fixtures::client::nonce());
            signed.signature = "0".repeat(64);
            t.send(&http, &base, &signed).await
        }
    })
    .await;
    let passed = codes.get("BAD_SIGNATURE").copied().unwrap_or(0);
    assert!(passed <= at_most(3, took), "per account, in {took:?}: {codes:?}");
    assert!(passed >= 3, "the limit lets some through: {codes:?}");

    let after = worker_cpu(gw.pid());
    for (name, ns) in &after {
        assert!(
            *ns > before.get(name).copied().unwrap_or(0),
            "{name} served part of the burst: {before:?} {after:?}"
        );
    }
}

/// CPU time in nanoseconds (`schedstat`) of each thread name of `pid`, threads of one name summed.
fn thread_cpu(pid: u32) -> HashMap<String, u64> {
    let mut ns = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        let t = stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        *ns.entry(comm.trim().to_string()).or_default() += t;
    }
    ns
}

/// The sale's I/O (the Redis connections, the reservation batches, the Kafka lanes) runs on one
/// thread of its own, `gw-sale-io`: orders placed at once are reserved through it, and no
/// other thread is started for the batches or the producer (each one more would be a hand-over
/// between threads per batch, measured in `e2e/bench/gateway.sh`'s CPU by thread).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sales_io_runs_on_one_thread_of_its_own() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("io");
    publish(&redis, &campaign, 100, 1).await;
    let upstream = wiremock::MockServer::start().await;
    let mut conf =
        GatewayConf::new(&fixtures::stack::redis_url(), &upstream.address().to_string(), &campaign, "");
    conf.workers = 2;
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let mut tickets = Vec::new();
    for i in 0..40 {
        tickets.push(ticket(&http, &gw, &campaign, &format!("io-{i}")).await.unwrap());
    }
    let before = thread_cpu(gw.pid());
    let base = gw.url("");
    let orders: Vec<_> = tickets
        .into_iter()
        .map(|t| {
            let (http, base) = (http.clone(), base.clone());
            tokio::spawn(async move { t.order(&http, &base, 1).await })
        })
        .collect();
    for o in orders {
        let (status, body) = o.await.unwrap();
        assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
    }
    let after = thread_cpu(gw.pid());
    let io = |t: &HashMap<String, u64>| t.get("gw-sale-io").copied();
    assert!(io(&after).is_some(), "a thread named gw-sale-io: {after:?}");
    assert!(io(&after) > io(&before), "it worked for the orders: {before:?} {after:?}");
    for other in ["reserve-batch", "gw-kafka"] {
        assert!(!after.contains_key(other), "no thread {other}: {after:?}");
    }
}
