//! Hot-stock buckets on a real Redis: the reservation of `plugins::reserve::Reserver` with the
//! campaign's stock split over buckets (`protocol::keys::Bucket`, `lua/transfer.lua`). What must
//! hold: the per-user limit and the nonce across buckets (also after a bucket is replenished), a
//! quantity gathered from several buckets (the fragmented remainder), "sold out everywhere" only
//! when every bucket is empty, and never more reserved than the stock under concurrency, every
//! unit sold to the buyers who ask (units a race left in a bucket to the next ones).
//!
//! On the stack's Redis Cluster when it is up (`SECKILL_REDIS_CLUSTER_URL`, as `e2e/test.sh`
//! runs them), else on its single Redis.

use std::collections::HashMap;
use std::time::Duration;

use e2e::stack;
use fred::prelude::*;
use plugins::reserve::{Decision, Order, Reserver};
use protocol::keys::{home_bucket, Bucket};
use protocol::scripts::{self, Nonce, PublishOutcome, PublishSpec, ReserveOutcome, Scripts};

struct Sale {
    redis: Client,
    reserver: Reserver,
    scripts: Scripts,
    campaign: e2e::cleanup::Campaign,
    buckets: u32,
}

impl Sale {
    /// A campaign of `stock` units over `buckets` buckets, `limit` per user, published.
    async fn new(stock: i64, limit: i64, buckets: u32) -> Self {
        let url = stack::cluster_or_single_redis_url();
        let redis = stack::redis_client(&url).await.unwrap();
        let pool = Builder::from_config(Config::from_url(&url).unwrap()).build_pool(4).unwrap();
        pool.init().await.unwrap();
        let scripts = Scripts::load(&scripts::default_dir()).unwrap();
        let campaign = e2e::cleanup::Campaign::on("bk-", &url);
        let spec = PublishSpec {
            stock_version: 1,
            total: stock,
            limit,
            sku: "SKU".into(),
            price_cents: 100,
            price_version: 1,
        };
        let outcomes = scripts.publish_buckets(&redis, &campaign, buckets, &spec).await.unwrap();
        assert_eq!(outcomes, vec![PublishOutcome::Published; buckets as usize]);
        let reserver = Reserver::new(pool, scripts.clone(), Duration::from_secs(2));
        Self { redis, reserver, scripts, campaign, buckets }
    }

    async fn reserve(&self, user: &str, qty: i64, tries: u32, nonce: Option<&Nonce>) -> Decision {
        let id = uuid::Uuid::now_v7().to_string();
        let home = Bucket::of_user(&self.campaign, user, self.buckets);
        let order = Order {
            campaign: &self.campaign,
            home: &home,
            bucket_tries: tries,
            request_id: &id,
            user,
            qty,
            nonce,
            limits: None,
            origin: "",
        };
        self.reserver.decide(&order).await.unwrap()
    }

    async fn stocks(&self) -> Vec<i64> {
        let mut out = Vec::new();
        for b in Bucket::all(&self.campaign, self.buckets) {
            out.push(self.redis.get::<Option<i64>, _>(&b.keys.stock).await.unwrap().unwrap_or(0));
        }
        out
    }

    /// Units held by buyers in every bucket, and units sent and received by transfers.
    async fn ledgers(&self) -> (i64, i64, i64) {
        let (mut held, mut sent, mut received) = (0, 0, 0);
        for b in Bucket::all(&self.campaign, self.buckets) {
            let bought: HashMap<String, i64> = self.redis.hgetall(&b.keys.bought).await.unwrap();
            held += bought.values().sum::<i64>();
            let s: HashMap<String, String> = self.redis.hgetall(&b.keys.sent).await.unwrap();
            sent += s.values().map(|v| v.split(' ').nth(1).unwrap().parse::<i64>().unwrap()).sum::<i64>();
            let r: HashMap<String, i64> = self.redis.hgetall(&b.keys.received).await.unwrap();
            received += r.values().sum::<i64>();
        }
        (held, sent, received)
    }

    /// `n` user ids whose home bucket is `index`.
    fn users_of(&self, index: u32, n: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("{}-u{i}", self.campaign))
            .filter(|u| home_bucket(u, self.buckets) == index)
            .take(n)
            .collect()
    }
}

fn reserved(d: &Decision) -> bool {
    matches!(d.outcome, ReserveOutcome::Reserved { .. })
}

#[tokio::test]
async fn the_limit_and_the_nonce_hold_across_buckets_also_after_a_release() {
    let sale = Sale::new(3, 1, 3).await;
    assert_eq!(sale.stocks().await, vec![1, 1, 1]);
    let users = sale.users_of(0, 2);
    let (a, b) = (&users[0], &users[1]);

    let first = sale.reserve(a, 1, 2, None).await;
    assert!(reserved(&first), "{first:?}");
    // Bucket 0 is empty now: b is served with a unit moved from bucket 1, in b's home bucket.
    let moved = sale.reserve(b, 1, 2, None).await;
    assert!(reserved(&moved), "{moved:?}");
    assert_eq!(sale.stocks().await, vec![0, 0, 1]);
    assert_eq!(sale.ledgers().await, (2, 1, 1), "held 2; one unit sent by bucket 1, received by 0");

    // a's record is in a's home bucket, whatever bucket the stock came from.
    let again = sale.reserve(a, 1, 2, None).await;
    assert_eq!(again.outcome, ReserveOutcome::LimitReached { held: 1 });

    // a's unit comes back (an unpaid order closed) into a's home bucket; a may buy once more,
    // and only once.
    let ReserveOutcome::Reserved { record, .. } = first.outcome else { unreachable!() };
    let rec = protocol::record::Reservation::from_json(record.as_bytes()).unwrap();
    assert_eq!(rec.buckets, 3);
    assert_eq!(rec.bucket(), Bucket::of_user(&sale.campaign, a, 3));
    sale.scripts.release(&sale.redis, &rec.bucket(), &rec.request_id, a, 1).await.unwrap();
    assert!(reserved(&sale.reserve(a, 1, 2, None).await));
    assert_eq!(sale.reserve(a, 1, 2, None).await.outcome, ReserveOutcome::LimitReached { held: 1 });

    // A nonce lives in the buyer's home bucket: the same signed request again is a safe retry,
    // another request with it a replay, even when its stock came from another bucket.
    let c = &sale.users_of(0, 3)[2];
    let home = Bucket::of_user(&sale.campaign, c, 3);
    let nonce = |fp: &str| Nonce { key: home.keys.nonce("jti", "n-1"), ttl_secs: 60, fingerprint: fp.into() };
    let got = sale.reserve(c, 1, 2, Some(&nonce("sig-1"))).await;
    assert!(reserved(&got), "the last unit, moved from bucket 2: {got:?}");
    let retry = sale.reserve(c, 1, 2, Some(&nonce("sig-1"))).await;
    assert!(matches!(retry.outcome, ReserveOutcome::Retry { .. }), "{retry:?}");
    let replay = sale.reserve(c, 1, 2, Some(&nonce("sig-2"))).await;
    assert_eq!(replay.outcome, ReserveOutcome::Replay);
    assert_eq!(sale.stocks().await, vec![0, 0, 0]);
}

#[tokio::test]
async fn sold_out_everywhere_only_when_every_bucket_was_found_empty() {
    let sale = Sale::new(3, 1, 3).await;
    let users = sale.users_of(0, 4);
    assert!(reserved(&sale.reserve(&users[0], 1, 1, None).await));
    assert!(reserved(&sale.reserve(&users[1], 1, 1, None).await), "moved from bucket 1");
    // One other bucket asked (bucket_tries = 1): bucket 1 is empty, bucket 2 was not asked.
    let bounded = sale.reserve(&users[2], 1, 1, None).await;
    assert_eq!(bounded.outcome, ReserveOutcome::SoldOut { remaining: 0 });
    assert!(!bounded.sold_out_everywhere, "bucket 2 still has a unit: {:?}", sale.stocks().await);
    // Asking every other bucket finds it.
    assert!(reserved(&sale.reserve(&users[2], 1, 2, None).await));
    let last = sale.reserve(&users[3], 1, 2, None).await;
    assert_eq!(last.outcome, ReserveOutcome::SoldOut { remaining: 0 });
    assert!(last.sold_out_everywhere);
}

#[tokio::test]
async fn a_quantity_is_gathered_from_the_fragments_of_several_buckets() {
    let sale = Sale::new(3, 3, 3).await;
    let user = &sale.users_of(1, 1)[0];
    let got = sale.reserve(user, 3, 2, None).await;
    assert!(reserved(&got), "1 unit in each bucket make 3: {got:?}");
    assert_eq!(sale.stocks().await, vec![0, 0, 0]);
    assert_eq!(sale.ledgers().await, (3, 2, 2));
    // Asking for more than is left anywhere: the answer says how many are left.
    let sale = Sale::new(2, 3, 3).await;
    let user = &sale.users_of(0, 1)[0];
    let short = sale.reserve(user, 3, 2, None).await;
    assert_eq!(short.outcome, ReserveOutcome::SoldOut { remaining: 2 }, "{:?}", sale.stocks().await);
    assert!(!short.sold_out_everywhere);
    assert_eq!(sale.stocks().await.iter().sum::<i64>(), 2, "moved, not lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_buyers_never_get_more_than_the_stock_nor_one_more_than_the_limit() {
    let sale = std::sync::Arc::new(Sale::new(50, 1, 3).await);
    let mut tasks = Vec::new();
    for i in 0..150 {
        for _ in 0..2 {
            let sale = sale.clone();
            let user = format!("{}-c{i}", sale.campaign);
            tasks.push(tokio::spawn(async move { (user.clone(), sale.reserve(&user, 1, 2, None).await) }));
        }
    }
    let mut per_user: HashMap<String, i64> = HashMap::new();
    let mut sold_out_everywhere = 0;
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for t in tasks {
        let (user, d) = t.await.unwrap();
        if reserved(&d) {
            *per_user.entry(user).or_default() += 1;
        }
        let name = format!("{:?}", d.outcome);
        *outcomes.entry(name.split([' ', '{', '(']).next().unwrap_or_default().to_string()).or_default() += 1;
        sold_out_everywhere += i64::from(d.sold_out_everywhere);
    }
    let burst = per_user.values().sum::<i64>();
    assert!(burst <= 50, "never more than the stock: {burst} ({outcomes:?})");
    assert!(
        burst >= 45,
        "the burst sells the stock but the few units of a race below: {burst} ({outcomes:?})"
    );
    assert!(per_user.values().all(|n| *n == 1), "one per user");
    // A unit a user's second concurrent order moved to its home bucket, then could not take (its
    // first order took the limit meanwhile), stays in that bucket's stock: the next buyer who
    // asks gets it, none is lost. Buyers who come after the burst sell what is left.
    for i in 0..60 {
        if sale.stocks().await.iter().sum::<i64>() == 0 {
            break;
        }
        let user = format!("{}-late{i}", sale.campaign);
        if reserved(&sale.reserve(&user, 1, 2, None).await) {
            *per_user.entry(user).or_default() += 1;
        }
    }
    eprintln!("the burst sold {burst} of 50, late buyers the rest ({outcomes:?})");
    assert_eq!(per_user.values().sum::<i64>(), 50, "every unit sold, none twice (burst {burst})");
    assert_eq!(sale.stocks().await, vec![0, 0, 0]);
    let (held, sent, received) = sale.ledgers().await;
    assert_eq!((held, sent), (50, received), "every transfer sent was received");
    assert!(sold_out_everywhere > 0, "the late buyers were told sold out everywhere");
}

#[tokio::test]
async fn on_the_cluster_three_buckets_are_on_three_masters() {
    let Ok(url) = std::env::var("SECKILL_REDIS_CLUSTER_URL") else {
        panic!("no Redis Cluster: start it with `bash e2e/stack.sh up cluster` and source .stack/env")
    };
    let redis = stack::redis_client(&url).await.unwrap();
    // CLUSTER SLOTS: [[first, last, [host, port, id], ...], ...]
    let slots: Vec<Vec<Value>> = redis.custom(fred::cmd!("CLUSTER"), vec!["SLOTS"]).await.unwrap();
    let owner = |slot: u16| -> String {
        slots
            .iter()
            .find(|r| r[0].as_i64().unwrap() <= i64::from(slot) && i64::from(slot) <= r[1].as_i64().unwrap())
            .map(|r| format!("{:?}", r[2]))
            .unwrap()
    };
    let campaign = stack::unique("placed-");
    let owners: std::collections::HashSet<String> =
        Bucket::all(&campaign, 3).iter().map(|b| owner(b.slot())).collect();
    assert_eq!(owners.len(), 3, "the buckets' slots are owned by three masters: {owners:?}");
}
