//! `reserve.lua` with many orders in one call ([`Scripts::reserve_batch`]) on a real Redis: a
//! batch mixing every answer (reserved, sold out, limit, bad quantity, replay, safe retry, a
//! refusal answered again, duplicate, a short bucket) gets, order by order, what the same orders
//! sent one call each would have got, and leaves the same state behind (stock, holdings, outbox,
//! nonces). On the stack's single Redis, and on a bucket of a campaign with buckets on its Redis
//! Cluster (`SECKILL_REDIS_CLUSTER_URL`; the single Redis when it is not set).

use std::collections::HashMap;

use e2e::outcome::{comparable, strip_record};
use e2e::stack;
use fred::prelude::*;
use protocol::keys::Bucket;
use protocol::scripts::{self, Nonce, PublishOutcome, PublishSpec, ReserveCall, ReserveOutcome, Scripts};

/// A published campaign of `stock` units in `buckets` buckets (limit 2 per buyer); its orders go
/// to bucket `index`.
struct Sale {
    redis: Client,
    scripts: Scripts,
    bucket: Bucket,
    _keys: e2e::cleanup::Campaign,
}

impl Sale {
    async fn new(url: &str, stock: i64, buckets: u32, index: u32) -> Self {
        let redis = stack::redis_client(url).await.unwrap();
        let scripts = Scripts::load(&scripts::default_dir()).unwrap();
        let campaign = e2e::cleanup::Campaign::on("batch-", url);
        let spec = PublishSpec {
            stock_version: 1,
            total: stock * i64::from(buckets),
            limit: 2,
            sku: "SKU".into(),
            price_cents: 100,
            price_version: 1,
        };
        let outcomes = scripts.publish_buckets(&redis, &campaign, buckets, &spec).await.unwrap();
        assert_eq!(outcomes, vec![PublishOutcome::Published; buckets as usize]);
        Self { redis, scripts, bucket: Bucket::nth(&campaign, index, buckets), _keys: campaign }
    }

    fn nonce(&self, n: &str, fingerprint: &str) -> Option<Nonce> {
        Some(Nonce { key: self.bucket.keys.nonce("jti", n), ttl_secs: 60, fingerprint: fingerprint.into() })
    }

    /// The orders of the mixed batch, for a bucket of 3 units (limit 2).
    fn orders(&self) -> Vec<ReserveCall> {
        let order = ReserveCall::new;
        vec![
            order("r1", "ann", 1),                                              // reserved: 2 left
            order("r2", "bob", 0),                                              // bad quantity
            order("r3", "bob", 3), // bad quantity (over the limit)
            order("r4", "bob", 2).with_nonce(self.nonce("n-bob", "sig-bob")), // reserved: 0 left
            order("r5", "ann", 2), // limit: ann holds 1
            order("r1", "cat", 1), // sold out before the duplicate check
            order("r6", "bob", 1).with_nonce(self.nonce("n-bob", "sig-other")), // replay
            order("r7", "bob", 2).with_nonce(self.nonce("n-bob", "sig-bob")), // safe retry of r4
            order("r8", "dan", 1).with_nonce(self.nonce("n-dan", "sig-dan")), // sold out
            order("r9", "dan", 1).with_nonce(self.nonce("n-dan", "sig-dan")), // sold out, again
            order("r10", "eve", 0).with_nonce(self.nonce("n-eve", "sig-eve")), // bad quantity
            order("r11", "eve", 1).with_fall_over(true), // a short bucket
            order("r12", "eve", 1).with_nonce(self.nonce("n-fay", "sig-fay")).with_fall_over(true),
            order("r13", "eve", 1).with_nonce(self.nonce("n-fay", "sig-fay")), // a new attempt
        ]
    }

    /// What the bucket holds after the orders: stock, holdings, outbox (records without their
    /// campaign and time), pending ids, claims and nonces.
    async fn state(&self) -> Vec<String> {
        let k = &self.bucket.keys;
        let stock: Option<i64> = self.redis.get(&k.stock).await.unwrap();
        let mut out = vec![format!("stock {stock:?}")];
        let bought: HashMap<String, i64> = self.redis.hgetall(&k.bought).await.unwrap();
        let outbox: HashMap<String, String> = self.redis.hgetall(&k.outbox).await.unwrap();
        let claims: HashMap<String, String> = self.redis.hgetall(&k.claims).await.unwrap();
        let pending: Vec<String> =
            self.redis.zrange(&k.pending, 0, -1, None, false, None, false).await.unwrap();
        out.extend(bought.iter().map(|(u, n)| format!("bought {u} {n}")));
        out.extend(outbox.iter().map(|(id, r)| format!("outbox {id} {}", strip_record(r))));
        out.extend(claims.iter().map(|(id, c)| format!("claim {id} {c}")));
        out.extend(pending.iter().map(|id| format!("pending {id}")));
        for n in ["n-bob", "n-dan", "n-eve", "n-fay"] {
            let v: Option<String> = self.redis.get(k.nonce("jti", n)).await.unwrap();
            out.push(format!("nonce {n} {v:?}"));
        }
        out.sort();
        out
    }

    async fn clean(&self) {
        let mut keys = Vec::new();
        for b in Bucket::all(&self.bucket.campaign, self.bucket.count) {
            keys.extend(b.keys.all());
            keys.extend([b.keys.sent.clone(), b.keys.received.clone()]);
            keys.extend(["n-bob", "n-dan", "n-eve", "n-fay"].map(|n| b.keys.nonce("jti", n)));
        }
        for key in keys {
            let _: () = self.redis.del(key).await.unwrap();
        }
    }
}

/// The same mixed orders as one batch and as one call each, on two campaigns of `buckets`
/// buckets (orders to the last bucket), compared answer by answer and state by state.
async fn batch_answers_as_single_calls(url: &str, buckets: u32) {
    let index = buckets - 1;
    let (one_by_one, batched) =
        (Sale::new(url, 3, buckets, index).await, Sale::new(url, 3, buckets, index).await);
    let mut singles = Vec::new();
    for order in one_by_one.orders() {
        singles
            .push(one_by_one.scripts.reserve(&one_by_one.redis, &one_by_one.bucket, &order).await.unwrap());
    }
    let batch =
        batched.scripts.reserve_batch(&batched.redis, &batched.bucket, &batched.orders()).await.unwrap();

    // The answers are each what they should be, not only equal.
    use ReserveOutcome::*;
    let again = |o: ReserveOutcome| Again(Box::new(o));
    let short = BucketShort { remaining: 0 };
    let expected_codes = [
        "Reserved 2",
        &format!("{:?}", BadQuantity { limit: 2 }),
        &format!("{:?}", BadQuantity { limit: 2 }),
        "Reserved 0",
        &format!("{:?}", LimitReached { held: 1 }),
        &format!("{:?}", SoldOut { remaining: 0 }),
        &format!("{:?}", Replay),
        &format!("{:?}", Retry { request_id: "r4".into() }),
        &format!("{:?}", SoldOut { remaining: 0 }),
        &format!("{:?}", again(SoldOut { remaining: 0 })),
        &format!("{:?}", BadQuantity { limit: 2 }),
        &format!("{:?}", short),
        &format!("{:?}", short),
        &format!("{:?}", SoldOut { remaining: 0 }),
    ]
    .map(str::to_string);
    let named = |o: &ReserveOutcome| match o {
        Reserved { remaining, .. } => format!("Reserved {remaining}"),
        other => format!("{other:?}"),
    };
    assert_eq!(batch.iter().map(named).collect::<Vec<_>>(), expected_codes);

    assert_eq!(
        batch.iter().map(comparable).collect::<Vec<_>>(),
        singles.iter().map(comparable).collect::<Vec<_>>(),
        "one call of {} orders answers as {} calls",
        batch.len(),
        singles.len()
    );
    let state = batched.state().await;
    assert_eq!(state, one_by_one.state().await);
    assert!(state.contains(&"claim r4 retry".to_string()), "{state:?}");
    let fay = r#"nonce n-fay Some("sig-fay r13 0 0")"#.to_string();
    assert!(state.contains(&fay), "forgotten by the short bucket, spent by r13: {state:?}");

    // A duplicate request id with stock left: its own answer, and its neighbour reserves.
    let tail = [ReserveCall::new("r1", "gus", 1), ReserveCall::new("r20", "gus", 1)];
    let mut singles = Vec::new();
    for s in [&batched, &one_by_one] {
        let _: () = s.redis.incr_by(&s.bucket.keys.stock, 2).await.unwrap();
    }
    for order in &tail {
        singles.push(one_by_one.scripts.reserve(&one_by_one.redis, &one_by_one.bucket, order).await.unwrap());
    }
    let batch = batched.scripts.reserve_batch(&batched.redis, &batched.bucket, &tail).await.unwrap();
    assert_eq!(batch[0], Duplicate);
    assert!(matches!(batch[1], Reserved { remaining: 1, .. }), "{batch:?}");
    assert_eq!(
        batch.iter().map(comparable).collect::<Vec<_>>(),
        singles.iter().map(comparable).collect::<Vec<_>>()
    );
    assert!(batched.scripts.reserve_batch(&batched.redis, &batched.bucket, &[]).await.unwrap().is_empty());
    one_by_one.clean().await;
    batched.clean().await;
}

#[tokio::test]
async fn a_batch_answers_each_order_as_a_call_of_its_own() {
    batch_answers_as_single_calls(&stack::redis_url(), 1).await;
}

#[tokio::test]
async fn a_batch_on_a_bucket_of_the_cluster_answers_as_single_calls() {
    let url = stack::cluster_or_single_redis_url();
    batch_answers_as_single_calls(&url, 3).await;
}

/// Releases of one bucket as one call (`release.lua` with many requests, the closer's path) and
/// as one call each: the same answers (released, already released, an undo that forgets the
/// nonce, an undo with nothing held) and the same state.
#[tokio::test]
async fn a_release_batch_answers_each_request_as_a_call_of_its_own() {
    use protocol::scripts::{ReleaseCall, ReleaseOutcome};
    let url = stack::redis_url();
    let (one_by_one, batched) = (Sale::new(&url, 3, 1, 0).await, Sale::new(&url, 3, 1, 0).await);
    let mut answers = Vec::new();
    for sale in [&one_by_one, &batched] {
        let orders = [
            ReserveCall::new("r1", "ann", 1),
            ReserveCall::new("r2", "bob", 2).with_nonce(sale.nonce("n-bob", "sig-bob")),
        ];
        sale.scripts.reserve_batch(&sale.redis, &sale.bucket, &orders).await.unwrap();
    }
    let releases = |sale: &Sale| {
        let release = |id: &str, user: &str, qty| ReleaseCall {
            request_id: id.into(),
            user: user.into(),
            qty,
            ..Default::default()
        };
        let undo = |id: &str, nonce: Option<Nonce>| ReleaseCall {
            request_id: id.into(),
            qty: 1,
            undo: true,
            nonce_key: nonce.map(|n| n.key),
            ..Default::default()
        };
        vec![
            release("r1", "ann", 1),
            release("r1", "ann", 1),
            undo("r2", sale.nonce("n-bob", "")),
            undo("r9", None),
        ]
    };
    for order in releases(&one_by_one) {
        answers.push(
            one_by_one.scripts.release_batch(&one_by_one.redis, &one_by_one.bucket, &[order]).await.unwrap()
                [0],
        );
    }
    let batch =
        batched.scripts.release_batch(&batched.redis, &batched.bucket, &releases(&batched)).await.unwrap();
    use ReleaseOutcome::*;
    assert_eq!(
        batch,
        vec![Released { remaining: 1 }, AlreadyReleased, Released { remaining: 3 }, NothingHeld]
    );
    assert_eq!(batch, answers);
    let state = batched.state().await;
    assert_eq!(state, one_by_one.state().await);
    assert!(state.contains(&"nonce n-bob None".to_string()), "the undo forgot the nonce: {state:?}");
    assert!(state.contains(&"stock Some(3)".to_string()), "{state:?}");
    one_by_one.clean().await;
    batched.clean().await;
}
