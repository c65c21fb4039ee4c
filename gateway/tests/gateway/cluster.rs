//! The sale on a Redis Cluster: the stack's three masters (`e2e/stack.sh up cluster`, whose URL
//! `.stack/env` exports as SECKILL_REDIS_CLUSTER_URL). A real gateway process and the order
//! writer both run in cluster mode; the campaign's slot is moved to another master in the middle
//! of a burst of signed orders (SETSLOT IMPORTING/MIGRATING, MIGRATE of its keys in batches,
//! SETSLOT NODE on every master), and the invariants hold. Without a cluster in the environment
//! these tests fail: they never pass by doing nothing.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::Value;
use protocol::keys::{Bucket, CampaignKeys};
use protocol::scripts::{ReleaseOutcome, ReserveCall, ReserveOutcome};

use crate::sale::Sale;
use crate::support::*;

/// The cluster's URL, from the environment; a clear failure when there is none.
fn cluster_url() -> String {
    match std::env::var("SECKILL_REDIS_CLUSTER_URL") {
        Ok(url) if url.starts_with("redis-cluster://") => url,
        _ => panic!(
            "SECKILL_REDIS_CLUSTER_URL is not set to a redis-cluster:// URL: these tests need the \
             stack's Redis Cluster (bash e2e/stack.sh up cluster; . .stack/env)"
        ),
    }
}

/// `host:port` of every node named in the cluster URL.
fn node_addrs(url: &str) -> Vec<String> {
    let rest = url.trim_start_matches("redis-cluster://");
    let (first, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut addrs = vec![first.trim_end_matches('/').to_string()];
    addrs.extend(query.split('&').filter_map(|kv| kv.strip_prefix("node=")).map(str::to_string));
    addrs
}

/// One master: a plain (non-cluster) connection to it, its id and address.
struct Node {
    client: Client,
    id: String,
    addr: String,
}

/// A connection to every master named in the URL.
async fn masters(url: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    for addr in node_addrs(url) {
        let client = client(&format!("redis://{addr}")).await.unwrap_or_else(|e| {
            panic!("cluster node {addr} is not reachable ({e}): bash e2e/stack.sh up cluster")
        });
        let id: String = cluster(&client, &["MYID"]).await.convert().unwrap();
        nodes.push(Node { client, id, addr });
    }
    assert!(nodes.len() >= 2, "the cluster URL names at least two masters: {url}");
    nodes
}

async fn cluster(node: &Client, args: &[&str]) -> Value {
    node.custom(fred::cmd!("CLUSTER"), args.to_vec())
        .await
        .unwrap_or_else(|e| panic!("CLUSTER {args:?}: {e}"))
}

/// The hash slot of `campaign`'s keys (CLUSTER KEYSLOT of its stock key).
async fn slot_of(node: &Client, campaign: &str) -> u16 {
    let stock = CampaignKeys::new(campaign).stock;
    let slot: i64 = cluster(node, &["KEYSLOT", &stock]).await.convert().unwrap();
    slot as u16
}

/// The id of the master that owns `slot` as `node` sees it (CLUSTER NODES).
async fn owner_seen_by(node: &Client, slot: u16) -> String {
    let text: String = cluster(node, &["NODES"]).await.convert().unwrap();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 || !fields[2].contains("master") {
            continue;
        }
        for range in &fields[8..] {
            if range.starts_with('[') {
                continue; // a migration in progress, not an owned range
            }
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            if (lo.parse::<u16>().unwrap()..=hi.parse::<u16>().unwrap()).contains(&slot) {
                return fields[0].to_string();
            }
        }
    }
    panic!("no master owns slot {slot} in:\n{text}")
}

/// Moves `slot` from `from` to `to` the way `redis-cli --cluster reshard` does: IMPORTING on
/// the target, MIGRATING on the source, MIGRATE of its keys `batch` at a time, then SETSLOT NODE
/// on the target, the source and every other master. Returns how many keys moved.
async fn migrate_slot(nodes: &[Node], slot: u16, from: &Node, to: &Node, batch: usize) -> usize {
    let s = slot.to_string();
    cluster(&to.client, &["SETSLOT", &s, "IMPORTING", &from.id]).await;
    cluster(&from.client, &["SETSLOT", &s, "MIGRATING", &to.id]).await;
    let (host, port) = to.addr.split_once(':').unwrap();
    let mut moved = 0;
    for _ in 0..10_000 {
        let keys: Vec<String> =
            cluster(&from.client, &["GETKEYSINSLOT", &s, &batch.to_string()]).await.convert().unwrap();
        if keys.is_empty() {
            break;
        }
        let mut args: Vec<String> = [host, port, "", "0", "5000", "KEYS"].map(String::from).to_vec();
        args.extend(keys.iter().cloned());
        let _: Value = from.client.custom(fred::cmd!("MIGRATE"), args).await.expect("MIGRATE");
        moved += keys.len();
    }
    cluster(&to.client, &["SETSLOT", &s, "NODE", &to.id]).await;
    cluster(&from.client, &["SETSLOT", &s, "NODE", &to.id]).await;
    for n in nodes.iter().filter(|n| n.id != from.id && n.id != to.id) {
        cluster(&n.client, &["SETSLOT", &s, "NODE", &to.id]).await;
    }
    moved
}

/// Owner and another master of `campaign`'s slot.
async fn owner_and_other(nodes: &[Node], slot: u16) -> (&Node, &Node) {
    let owner = owner_seen_by(&nodes[0].client, slot).await;
    let from = nodes.iter().find(|n| n.id == owner).expect("the owner is one of the URL's masters");
    let to = nodes.iter().find(|n| n.id != owner).unwrap();
    (from, to)
}

/// One answer of the burst: the user, the HTTP status, the body, when it came.
type Answer = (String, u16, serde_json::Value, Instant);

/// `requests` orders (user `prefix-{i % users}`), `in_flight` at a time, through the gateway;
/// `done` counts the answers as they come.
async fn burst(
    gw: &Gateway,
    campaign: &str,
    prefix: &str,
    users: usize,
    requests: usize,
    done: &AtomicUsize,
) -> Vec<Answer> {
    use futures::StreamExt;
    let http = reqwest::Client::builder().pool_max_idle_per_host(256).build().unwrap();
    futures::stream::iter(0..requests)
        .map(|i| {
            let (http, user) = (http.clone(), format!("{prefix}-{}", i % users));
            async move {
                let (status, body) = order(&http, gw, campaign, &user).await;
                done.fetch_add(1, Ordering::Relaxed);
                (user, status, body, Instant::now())
            }
        })
        .buffer_unordered(48)
        .collect()
        .await
}

/// Every answer is QUEUED, SOLD_OUT, LIMIT_REACHED, SERVICE_DEGRADED or TRY_LATER (an order
/// never sent while Redis still answered the bucket: nothing reserved) with its status; returns
/// the QUEUED ones as (user, request id, when).
fn queued(answers: &[Answer]) -> Vec<(String, String, Instant)> {
    let mut out = Vec::new();
    for (user, status, body, at) in answers {
        match (body["code"].as_str(), status) {
            (Some("QUEUED"), 202) => {
                out.push((user.clone(), body["request_id"].as_str().unwrap().to_string(), *at))
            }
            (Some("SOLD_OUT"), 410)
            | (Some("LIMIT_REACHED"), 409)
            | (Some("SERVICE_DEGRADED"), 503)
            | (Some("TRY_LATER"), 429) => {}
            other => panic!("unexpected answer {other:?}: {body}"),
        }
    }
    out
}

/// How many answers of each status and code (the test's summary line).
fn codes(answers: &[Answer]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for (_, s, b, _) in answers {
        *m.entry(format!("{s} {}", b["code"])).or_insert(0) += 1;
    }
    m
}

/// When the campaign's slot moves during [`sale_across_a_migration`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Move {
    /// Once 100 answers of the first burst came: refusals (`ASK`, `TRYAGAIN`, `MOVED`) meet
    /// requests in flight; while the keys move, the campaign's orders answer
    /// `SERVICE_DEGRADED` (a reservation's new nonce key is missing on the source: `TRYAGAIN`).
    MidBurst,
    /// After the first burst: the gateway and the order writer meet `MOVED` on their next calls.
    BetweenBursts,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_survives_a_migration_of_its_slot_mid_burst() {
    sale_across_a_migration(Move::MidBurst).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_goes_on_after_its_slot_moved_between_bursts() {
    sale_across_a_migration(Move::BetweenBursts).await;
}

/// A sale of 600 units through a real gateway in cluster mode, with the order writer running:
/// a first burst of 400 users, the campaign's slot moved to another master (`when`), a second
/// burst of 700 users twice each that sells out; then the invariants.
async fn sale_across_a_migration(when: Move) {
    const STOCK: i64 = 600;
    let url = cluster_url();
    let nodes = masters(&url).await;
    let sale = Sale::on(&url, STOCK).await;
    let slot = slot_of(&nodes[0].client, &sale.campaign).await;
    let (from, to) = owner_and_other(&nodes, slot).await;

    let gw = Gateway::start(&sale.gateway_conf(&fixtures::stack::kafka_broker(), "")).await;
    let writer = sale.start_writer_with(Duration::from_secs(1), None).await;

    // First burst: 400 users once each (at most 400 sold); the slot moves once 100 answered,
    // or after the burst.
    let done = AtomicUsize::new(0);
    let wait_for = if when == Move::MidBurst { 100 } else { 400 };
    let migration = async {
        let started = Instant::now();
        while done.load(Ordering::Relaxed) < wait_for {
            assert!(started.elapsed() < Duration::from_secs(120), "the burst did not get going");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let answered = done.load(Ordering::Relaxed);
        let moved = migrate_slot(&nodes, slot, from, to, 20).await;
        (moved, answered, Instant::now())
    };
    let (first, (moved, answered_before, migrated_at)) =
        tokio::join!(burst(&gw, &sale.campaign, "a", 400, 400, &done), migration);
    if when == Move::MidBurst {
        assert!(answered_before < 400, "the slot started moving mid-burst ({answered_before} answered)");
    }
    assert!(moved >= 8, "the campaign's keys moved ({moved} keys)");

    // The slot really moved: every master names the new owner, the old one has no key left.
    for n in &nodes {
        assert_eq!(owner_seen_by(&n.client, slot).await, to.id, "{} sees the new owner", n.addr);
    }
    let left: i64 = cluster(&from.client, &["COUNTKEYSINSLOT", &slot.to_string()]).await.convert().unwrap();
    let there: i64 = cluster(&to.client, &["COUNTKEYSINSLOT", &slot.to_string()]).await.convert().unwrap();
    assert_eq!((left, there > 0), (0, true), "the keys are on the new owner only");

    // Second burst on the new owner: 700 more users twice each, more than the stock left.
    let done = AtomicUsize::new(0);
    let second = burst(&gw, &sale.campaign, "b", 700, 1400, &done).await;
    let mut sold = queued(&first);
    let after = queued(&second);
    assert!(!after.is_empty(), "the new owner sold (the gateway followed the MOVED slot)");
    sold.extend(after);
    assert!(
        first.iter().chain(&second).any(|(_, _, body, _)| body["code"] == "SOLD_OUT"),
        "the sale ran out of stock: before {:?}, after {:?}",
        codes(&first),
        codes(&second)
    );
    let late = sold.iter().filter(|(_, _, at)| *at > migrated_at).count();
    assert!(late > 0, "orders were queued after the migration");

    // Invariants: never more than the stock, nobody over the limit, every QUEUED an order.
    assert!(sold.len() as i64 <= STOCK, "{} sold of {STOCK}", sold.len());
    let users: HashSet<&String> = sold.iter().map(|(u, _, _)| u).collect();
    assert_eq!(users.len(), sold.len(), "no user holds two");
    let ids: HashSet<String> = sold.iter().map(|(_, id, _)| id.clone()).collect();
    let drained = eventually(Duration::from_secs(90), || async {
        sale.outbox().await.is_empty() && ids.is_subset(&sale.orders().await)
    })
    .await;
    let orders = sale.orders().await;
    assert!(
        drained,
        "the outbox drained and every QUEUED request is an order ({} of {})",
        orders.len(),
        ids.len()
    );
    let stock: i64 = sale.redis.get(CampaignKeys::new(&sale.campaign).stock).await.unwrap();
    assert_eq!(stock + orders.len() as i64, STOCK, "Redis stock + orders = total");
    writer.stop().await;
    eprintln!(
        "cluster sale: slot {slot} {} -> {}, {moved} keys moved after {answered_before} answers; \
         {} sold, {late} after the move; answers before {:?}, after {:?}",
        from.addr,
        to.addr,
        sold.len(),
        codes(&first),
        codes(&second)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_refused_with_tryagain_did_not_run_and_runs_once_the_slot_has_moved() {
    let url = cluster_url();
    let nodes = masters(&url).await;
    let redis = client(&url).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::on("gw", &url);
    publish(&redis, &campaign, 5, 1).await;
    let keys = CampaignKeys::new(&campaign);
    let slot = slot_of(&nodes[0].client, &campaign).await;
    let (from, to) = owner_and_other(&nodes, slot).await;

    // Half a migration: the stock key is on the target, the others still on the source.
    let s = slot.to_string();
    cluster(&to.client, &["SETSLOT", &s, "IMPORTING", &from.id]).await;
    cluster(&from.client, &["SETSLOT", &s, "MIGRATING", &to.id]).await;
    let (host, port) = to.addr.split_once(':').unwrap();
    let _: Value =
        from.client.custom(fred::cmd!("MIGRATE"), vec![host, port, &keys.stock, "0", "5000"]).await.unwrap();
    let refused =
        scripts().reserve(&redis, &Bucket::single(&campaign), &ReserveCall::new("r-1", "alice", 1)).await;
    let err = refused.expect_err("a script over split keys is refused");
    assert!(
        err.to_string().contains("TRYAGAIN"),
        "fred does not follow TRYAGAIN; the retries gave up: {err}"
    );

    // The rest of the migration; the same call now runs on the new owner, once.
    migrate_slot(&nodes, slot, from, to, 20).await;
    let out = scripts()
        .reserve(&redis, &Bucket::single(&campaign), &ReserveCall::new("r-1", "alice", 1))
        .await
        .unwrap();
    assert!(matches!(out, ReserveOutcome::Reserved { remaining: 4, .. }), "{out:?}");
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 4, "the refused call took nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_the_cluster_clears_the_gateways_sold_out_flag() {
    let url = cluster_url();
    let redis = client(&url).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::on("gw", &url);
    publish(&redis, &campaign, 1, 1).await;
    let upstream = wiremock::MockServer::start().await;
    let mut conf = GatewayConf::new(&url, &upstream.address().to_string(), &campaign, "");
    conf.sold_out_ttl_ms = 60_000; // only the message can clear the flag within the test
    let gw = Gateway::start(&conf).await;
    let subscribed = eventually(Duration::from_secs(10), || async {
        gw.log().contains("subscribed to replenish messages")
    })
    .await;
    assert!(subscribed, "the gateway subscribed on the cluster:\n{}", gw.log());

    let http = reqwest::Client::new();
    let (status, body) = order(&http, &gw, &campaign, "buyer").await;
    assert_eq!(status, 202, "{body}");
    let id = body["request_id"].as_str().unwrap().to_string();
    let (status, body) = order(&http, &gw, &campaign, "late").await;
    assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "{body}");

    // release.lua publishes on REPLENISH_CHANNEL from the campaign's node; the cluster bus
    // carries it to the node the gateway's subscriber is on.
    let released = scripts().release(&redis, &Bucket::single(&campaign), &id, "buyer", 1).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released { .. }), "{released:?}");
    let sold = eventually(Duration::from_secs(5), || {
        let (http, campaign, gw) = (http.clone(), campaign.clone(), &gw);
        async move { order(&http, gw, &campaign, "after-release").await.0 == 202 }
    })
    .await;
    assert!(sold, "the flag was cleared by the replenish message:\n{}", gw.log());
}
