//! `lua/reserve.lua` and `lua/release.lua` write each key once per call (the call's reservations
//! or releases kept in Lua tables, then one `DECRBY`, one `HSET` of holdings, one of records, one
//! `ZADD`, ...). Their oracle is the scripts they replaced, kept in `tests/oracle/`: every command
//! run per order, one order per call. On a real Redis, random mixes of orders (buyers over their
//! limit, repeated request ids, nonces spent again with the same or another signature, bad
//! quantities, short buckets, the stock running out) and then of releases (twice the same, undo
//! with and without a nonce, undo of nothing, claimed entries, a paused replenishment) are sent
//! to two campaigns: one call per order with the oracle, random batches with today's scripts. The
//! answers, order by order, and everything left in Redis must be the same.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use e2e::outcome::{comparable, strip_record};
use e2e::stack;
use fred::prelude::*;
use protocol::keys::Bucket;
use protocol::scripts::{
    self, Nonce, PublishOutcome, PublishSpec, ReleaseCall, ReleaseOutcome, ReserveCall, ReserveOutcome,
    Scripts,
};

/// A small deterministic generator (xorshift64*), so that a failing seed can be run again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// 0..n.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with `percent` % chance.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A folder with today's scripts, `reserve.lua` and `release.lua` replaced by the oracle's.
fn oracle_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("script-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(scripts::default_dir()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("oracle");
    for name in ["reserve.lua", "release.lua"] {
        std::fs::copy(oracle.join(name), dir.join(name)).unwrap();
    }
    dir
}

/// A published campaign (`stock` units, limit 2 per buyer) and the scripts it is sold with.
struct Sale {
    redis: Client,
    scripts: Scripts,
    bucket: Bucket,
    _keys: e2e::cleanup::Campaign,
}

impl Sale {
    async fn new(redis: &Client, scripts: Scripts, stock: i64) -> Self {
        let campaign = e2e::cleanup::Campaign::new("oracle-");
        let spec = PublishSpec {
            stock_version: 1,
            total: stock,
            limit: 2,
            sku: "SKU \"quoted\"".into(),
            price_cents: 250,
            price_version: 3,
        };
        let outcomes = scripts.publish_buckets(redis, &campaign, 1, &spec).await.unwrap();
        assert_eq!(outcomes, vec![PublishOutcome::Published]);
        Self { redis: redis.clone(), scripts, bucket: Bucket::single(&campaign), _keys: campaign }
    }

    fn nonce(&self, n: u64, fingerprint: u64) -> Nonce {
        Nonce {
            key: self.bucket.keys.nonce("jti", &format!("n{n}")),
            ttl_secs: 60,
            fingerprint: format!("sig{fingerprint}"),
        }
    }

    /// Everything the two scripts read or write in the bucket, comparable across campaigns.
    async fn state(&self, nonces: u64) -> Vec<String> {
        let k = &self.bucket.keys;
        let stock: Option<i64> = self.redis.get(&k.stock).await.unwrap();
        let mut out = vec![format!("stock {stock:?}")];
        let meta: HashMap<String, String> = self.redis.hgetall(&k.meta).await.unwrap();
        out.push(format!("state {:?}", meta.get("state")));
        for (name, key) in
            [("bought", &k.bought), ("released", &k.released), ("claims", &k.claims), ("stats", &k.stats)]
        {
            let map: BTreeMap<String, String> = self.redis.hgetall(key).await.unwrap();
            out.push(format!("{name} {map:?}"));
        }
        let outbox: BTreeMap<String, String> = self.redis.hgetall(&k.outbox).await.unwrap();
        out.extend(outbox.iter().map(|(id, r)| format!("outbox {id} {}", strip_record(r))));
        let pending: Vec<String> =
            self.redis.zrange(&k.pending, 0, -1, None, false, None, false).await.unwrap();
        let mut pending = pending;
        pending.sort();
        out.push(format!("pending {pending:?}"));
        for n in 0..nonces {
            let key = k.nonce("jti", &format!("n{n}"));
            let v: Option<String> = self.redis.get(&key).await.unwrap();
            let ttl: i64 = self.redis.ttl(&key).await.unwrap();
            out.push(format!("nonce n{n} {v:?} expires {}", ttl > 0));
        }
        out
    }
}

/// One seed's orders: `n` of them over 12 buyers and 40 nonces.
fn orders(rng: &mut Rng, n: u64, sale: &Sale) -> Vec<ReserveCall> {
    let mut out: Vec<ReserveCall> = Vec::new();
    for i in 0..n {
        let request_id = if i > 0 && rng.chance(8) {
            out[rng.below(i) as usize].request_id.clone()
        } else {
            format!("r{i}")
        };
        let user = format!("u{}", rng.below(12));
        let qty = [1, 1, 1, 1, 2, 2, 3, 0][rng.below(8) as usize];
        let mut order = ReserveCall::new(request_id, user, qty);
        if rng.chance(75) {
            // Mostly a fresh nonce; else one spent before, with the same signature (a resent
            // request) or another (a replay).
            let n = if rng.chance(70) { 100 + i } else { rng.below(40) };
            let fingerprint = if rng.chance(50) { n } else { rng.below(3) + 1000 };
            order = order.with_nonce(Some(sale.nonce(n.min(100 + i), fingerprint)));
        }
        out.push(order.with_fall_over(rng.chance(10)));
    }
    out
}

/// The nonce names `orders` may use.
const NONCES: u64 = 40;

async fn same_answers_and_state(seed: u64) {
    let redis = stack::redis_client(&stack::redis_url()).await.unwrap();
    let oracle_dir = oracle_dir();
    let oracle = Sale::new(&redis, Scripts::load(&oracle_dir).unwrap(), 15).await;
    let today = Sale::new(&redis, Scripts::load(&scripts::default_dir()).unwrap(), 15).await;
    let _ = std::fs::remove_dir_all(&oracle_dir);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);

    // Reservations: one call per order with the oracle, random batches (1..40) today.
    let count = 160;
    let nonce_names = NONCES.max(100 + count);
    let (expected, sent) = (orders(&mut Rng(rng.0), count, &oracle), orders(&mut rng, count, &today));
    let mut want = Vec::new();
    for order in &expected {
        want.push(oracle.scripts.reserve(&oracle.redis, &oracle.bucket, order).await.unwrap());
    }
    let mut got = Vec::new();
    let mut at = 0;
    while at < sent.len() {
        let k = (1 + rng.below(40) as usize).min(sent.len() - at);
        got.extend(
            today.scripts.reserve_batch(&today.redis, &today.bucket, &sent[at..at + k]).await.unwrap(),
        );
        at += k;
    }
    let (want, got): (Vec<_>, Vec<_>) =
        (want.iter().map(comparable).collect(), got.iter().map(comparable).collect());
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g, w, "seed {seed}, order {i} ({:?})", sent[i]);
    }
    let reserved = got.iter().filter(|o| matches!(o, ReserveOutcome::Reserved { .. })).count();
    assert!(reserved > 10, "seed {seed}: the mix reserves ({reserved})");
    assert!(got.iter().any(|o| matches!(o, ReserveOutcome::SoldOut { .. })), "seed {seed}: and sells out");
    assert_eq!(
        today.state(nonce_names).await,
        oracle.state(nonce_names).await,
        "seed {seed}: after the orders"
    );

    // Releases of what was asked (reserved or not), some twice, some as undos; one entry
    // claimed by the sweeper; then the same again with replenishment paused.
    for sale in [&oracle, &today] {
        let _: () = sale.redis.hset(&sale.bucket.keys.claims, ("r3", "sweeper")).await.unwrap();
    }
    for paused in [false, true] {
        if paused {
            for sale in [&oracle, &today] {
                let _: () = sale.redis.hset(&sale.bucket.keys.meta, ("pause_replenish", "1")).await.unwrap();
            }
        }
        let releases = |rng: &mut Rng, sale: &Sale| {
            (0..60)
                .map(|_| {
                    let order = &expected[rng.below(count) as usize];
                    let undo = rng.chance(30);
                    ReleaseCall {
                        request_id: if rng.chance(5) { "r-none".into() } else { order.request_id.clone() },
                        user: order.user.clone(),
                        qty: order.qty.max(1),
                        undo,
                        nonce_key: order
                            .nonce
                            .as_ref()
                            .filter(|_| undo)
                            .map(|n| n.key.replace(&*oracle.bucket.campaign, &sale.bucket.campaign)),
                        aside: false,
                    }
                })
                .collect::<Vec<_>>()
        };
        let mut r = Rng(rng.next() | 1);
        let (expected, sent) = (releases(&mut Rng(r.0), &oracle), releases(&mut r, &today));
        let mut want: Vec<ReleaseOutcome> = Vec::new();
        for call in &expected {
            want.extend(
                oracle
                    .scripts
                    .release_batch(&oracle.redis, &oracle.bucket, std::slice::from_ref(call))
                    .await
                    .unwrap(),
            );
        }
        let mut got = Vec::new();
        let mut at = 0;
        while at < sent.len() {
            let k = (1 + rng.below(30) as usize).min(sent.len() - at);
            got.extend(
                today.scripts.release_batch(&today.redis, &today.bucket, &sent[at..at + k]).await.unwrap(),
            );
            at += k;
        }
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(g, w, "seed {seed}, paused {paused}, release {i} ({:?})", sent[i]);
        }
        let kinds: Vec<_> = got.iter().map(std::mem::discriminant).collect();
        for kind in [ReleaseOutcome::AlreadyReleased, ReleaseOutcome::NothingHeld] {
            assert!(kinds.contains(&std::mem::discriminant(&kind)), "seed {seed}: the mix has {kind:?}");
        }
        let moved = if paused { ReleaseOutcome::SetAside } else { ReleaseOutcome::Released { remaining: 0 } };
        assert!(kinds.contains(&std::mem::discriminant(&moved)), "seed {seed}: the mix has {moved:?}");
        assert_eq!(
            today.state(nonce_names).await,
            oracle.state(nonce_names).await,
            "seed {seed}, paused {paused}: after the releases"
        );
    }
}

#[tokio::test]
async fn batched_scripts_answer_and_write_as_the_per_order_scripts_did() {
    for seed in 1..=6 {
        same_answers_and_state(seed).await;
    }
}
