//! A campaign's `[[global_limit]]` rules counted in the reservation's own `reserve.lua` call,
//! on a real Redis: a batch mixing orders within and past the rules gets, order by order, the
//! answers the two-call path gave (one limit script call, then the reservation, per order), and
//! leaves the same state behind (stock, holdings, outbox, nonces, the rules' counters). On the
//! stack's single Redis, and on a bucket of a campaign with buckets on its Redis Cluster
//! (`SECKILL_REDIS_CLUSTER_URL`; the single Redis when it is not set): every key of the call is
//! in the bucket's slot, the rule by campaign counted with the bucket's share of its max.

use std::collections::HashMap;

use e2e::stack;
use fred::prelude::*;
use plugins::checks::{limit_rules, Subject};
use protocol::global_limit::{GlobalLimit, LimitBy, OnError};
use protocol::keys::Bucket;
use protocol::scripts::{self, LimitRule, Nonce, PublishSpec, ReserveCall, ReserveOutcome, Scripts};

/// The oracle: the limit script of the two-call path, as it ran in a call of its own before
/// each reservation until the rules were folded into `reserve.lua` (KEYS: per rule its current
/// and previous counters; ARGV: per rule max, window ms, ms into the window; returns {0, 0}
/// passed and counted, {i, ms} over rule i, nothing counted).
const TWO_CALL_LIMIT: &str = r#"
local n = #KEYS / 2
for i = 1, n do
  local max, window, into = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  local cur = tonumber(redis.call('GET', KEYS[2 * i - 1]) or '0')
  local prev = tonumber(redis.call('GET', KEYS[2 * i]) or '0')
  local estimate = prev * (window - into) / window + cur
  if estimate + 1 > max then
    return {i, window - into}
  end
end
for i = 1, n do
  if redis.call('INCR', KEYS[2 * i - 1]) == 1 then
    redis.call('PEXPIRE', KEYS[2 * i - 1], 2 * tonumber(ARGV[3 * i - 1]))
  end
end
return {0, 0}
"#;

/// The rules: 2 orders per user, 6 per campaign (split over the buckets), in 60 s windows.
const RULES: [GlobalLimit; 2] = [
    GlobalLimit { by: LimitBy::User, max: 2, window_secs: 60, on_error: OnError::Open },
    GlobalLimit { by: LimitBy::Campaign, max: 6, window_secs: 60, on_error: OnError::Closed },
];

/// The orders' time: 30 s into a window, so the previous window's count weighs half.
const NOW_MS: u64 = 1_000 * 60_000 + 30_000;

/// A published campaign of 10 units a bucket, limit 2 per buyer; its orders go to its last bucket.
struct Sale {
    redis: Client,
    scripts: Scripts,
    bucket: Bucket,
    users: Vec<String>,
}

impl Sale {
    async fn new(url: &str, buckets: u32) -> Self {
        let redis = stack::redis_client(url).await.unwrap();
        let scripts = Scripts::load(&scripts::default_dir()).unwrap();
        let campaign = stack::unique("glimit-");
        let spec = PublishSpec {
            stock_version: 1,
            total: 10 * i64::from(buckets),
            limit: 2,
            sku: "SKU".into(),
            price_cents: 100,
            price_version: 1,
        };
        scripts.publish_buckets(&redis, &campaign, buckets, &spec).await.unwrap();
        let users = ["ann", "bob", "cat", "dan"].map(str::to_string).to_vec();
        Self { redis, scripts, bucket: Bucket::nth(&campaign, buckets - 1, buckets), users }
    }

    fn rules(&self, user: &str) -> Vec<LimitRule> {
        limit_rules(&self.bucket, &RULES, Subject { ip: None, device: None, user }, NOW_MS)
    }

    fn nonce(&self, n: &str, fingerprint: &str) -> Option<Nonce> {
        Some(Nonce { key: self.bucket.keys.nonce("jti", n), ttl_secs: 60, fingerprint: fingerprint.into() })
    }

    /// The mixed orders, each with its rules (what the gateway sends).
    fn orders(&self) -> Vec<ReserveCall> {
        let order = |id: &str, user: &str, qty| ReserveCall::new(id, user, qty).with_limits(self.rules(user));
        vec![
            order("r1", "ann", 1).with_nonce(self.nonce("n1", "s1")), // reserved
            order("r2", "ann", 2),                                    // passes the rule, limit reached
            order("r3", "ann", 1).with_nonce(self.nonce("n3", "s3")), // over the user rule: nonce kept
            order("r4", "bob", 1).with_nonce(self.nonce("n4", "s4")), // reserved
            order("r5", "bob", 1).with_nonce(self.nonce("n4", "s4")), // safe retry of r4, not counted
            order("r6", "cat", 1),                                    // counted
            order("r7", "dan", 0),                                    // the campaign rule's last
            order("r8", "dan", 1),                                    // over the campaign rule
        ]
    }

    /// Today's path: per order one call of the limit script, then (when it passed) a
    /// reservation call without the rules. An order whose nonce is spent already (a resent
    /// request, or a replay) skips the limit call: it gets its answer from the nonce and counts
    /// in no rule.
    async fn two_calls(&self, orders: &[ReserveCall]) -> Vec<ReserveOutcome> {
        let mut out = Vec::new();
        for order in orders {
            let spent = match &order.nonce {
                Some(n) => self.redis.exists::<i64, _>(&n.key).await.unwrap() == 1,
                None => false,
            };
            if spent {
                let alone = ReserveCall { limits: Vec::new(), ..order.clone() };
                out.push(self.scripts.reserve(&self.redis, &self.bucket, &alone).await.unwrap());
                continue;
            }
            let keys: Vec<String> =
                order.limits.iter().flat_map(|r| [r.current.clone(), r.previous.clone()]).collect();
            let args: Vec<String> = order
                .limits
                .iter()
                .flat_map(|r| [r.max.to_string(), r.window_ms.to_string(), r.into_ms.to_string()])
                .collect();
            let (rule, ms): (i64, i64) = self.redis.eval(TWO_CALL_LIMIT, keys, args).await.unwrap();
            if rule > 0 {
                out.push(ReserveOutcome::Limited { rule: rule as usize - 1, retry_after_ms: ms as u64 });
                continue;
            }
            let alone = ReserveCall { limits: Vec::new(), ..order.clone() };
            out.push(self.scripts.reserve(&self.redis, &self.bucket, &alone).await.unwrap());
        }
        out
    }

    /// Seeds the previous window of the campaign rule with `n` orders.
    async fn seed_previous(&self, n: i64) {
        let previous = self.rules("any")[1].previous.clone();
        let _: () = self.redis.set(previous, n, None, None, false).await.unwrap();
    }

    /// What the bucket holds: stock, holdings, outbox (records without their campaign and
    /// time), nonces and the rules' counters.
    async fn state(&self) -> Vec<String> {
        let k = &self.bucket.keys;
        let stock: Option<i64> = self.redis.get(&k.stock).await.unwrap();
        let mut out = vec![format!("stock {stock:?}")];
        let bought: HashMap<String, i64> = self.redis.hgetall(&k.bought).await.unwrap();
        let outbox: HashMap<String, String> = self.redis.hgetall(&k.outbox).await.unwrap();
        out.extend(bought.iter().map(|(u, n)| format!("bought {u} {n}")));
        out.extend(outbox.keys().map(|id| format!("outbox {id}")));
        for n in ["n1", "n3", "n4"] {
            let v: Option<String> = self.redis.get(k.nonce("jti", n)).await.unwrap();
            out.push(format!("nonce {n} {v:?}"));
        }
        for user in &self.users {
            for (i, r) in self.rules(user).iter().enumerate() {
                let count: Option<i64> = self.redis.get(&r.current).await.unwrap();
                let ttl: i64 = self.redis.pttl(&r.current).await.unwrap();
                out.push(format!("rule {i} {user} {count:?} expires {}", ttl > 0));
            }
        }
        out.sort();
        out.dedup();
        out
    }

    async fn clean(&self) {
        let k = &self.bucket.keys;
        let mut keys = k.all();
        keys.extend(["n1", "n3", "n4"].map(|n| k.nonce("jti", n)));
        for user in &self.users {
            for r in self.rules(user) {
                keys.extend([r.current, r.previous]);
            }
        }
        for b in Bucket::all(&self.bucket.campaign, self.bucket.count) {
            keys.extend(b.keys.all());
        }
        for key in keys {
            let _: () = self.redis.del(key).await.unwrap();
        }
    }
}

/// The mixed orders as one batch and through the two-call path, on two campaigns of
/// `buckets` buckets, compared answer by answer and state by state.
async fn batch_answers_as_two_calls(url: &str, buckets: u32) {
    let (two_calls, batched) = (Sale::new(url, buckets).await, Sale::new(url, buckets).await);
    // The campaign rule's max in this bucket: 6 over `buckets` (the last bucket's share), and
    // 2 orders of the previous window weigh 1 (half of it still covered).
    let share = batched.rules("ann")[1].max;
    assert_eq!(share, if buckets == 1 { 6 } else { 6 / buckets }, "the last bucket's share");
    for s in [&two_calls, &batched] {
        s.seed_previous(2).await;
    }
    // With 6 per campaign (one bucket): the previous window's 1 and 5 counted pass (the safe
    // retry r5 is not counted), the next is over.
    let (expected, batch) = (
        two_calls.two_calls(&two_calls.orders()).await,
        batched.scripts.reserve_batch(&batched.redis, &batched.bucket, &batched.orders()).await.unwrap(),
    );
    let stripped = |v: &[ReserveOutcome]| {
        v.iter()
            .map(|o| match o {
                ReserveOutcome::Reserved { remaining, .. } => format!("Reserved {remaining}"),
                other => format!("{other:?}"),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(stripped(&batch), stripped(&expected), "one call answers as two calls per order");
    if buckets == 1 {
        use ReserveOutcome::*;
        let over = |rule| format!("{:?}", Limited { rule, retry_after_ms: 30_000 });
        let want = [
            "Reserved 9".to_string(),
            format!("{:?}", LimitReached { held: 1 }),
            over(0),
            "Reserved 8".to_string(),
            format!("{:?}", Retry { request_id: "r4".into() }),
            "Reserved 7".to_string(),
            format!("{:?}", BadQuantity { limit: 2 }),
            over(1),
        ];
        assert_eq!(stripped(&batch), want, "each answer is what it should be");
    } else {
        // A share of 2 (6 over 3 buckets), 1 of it taken by the previous window: the first
        // order passes, every later one is over the campaign rule.
        assert!(matches!(batch[0], ReserveOutcome::Reserved { remaining: 9, .. }), "{batch:?}");
        assert!(batch[1..].iter().all(|o| matches!(o, ReserveOutcome::Limited { .. })), "{batch:?}");
    }
    let state = batched.state().await;
    assert_eq!(state, two_calls.state().await);
    assert!(state.contains(&"nonce n3 None".to_string()), "an order over a rule spends no nonce: {state:?}");
    two_calls.clean().await;
    batched.clean().await;
}

#[tokio::test]
async fn a_batch_with_global_limits_answers_as_the_two_call_path() {
    batch_answers_as_two_calls(&stack::redis_url(), 1).await;
}

#[tokio::test]
async fn global_limits_on_a_bucket_of_the_cluster_count_in_its_slot() {
    let url = stack::cluster_or_single_redis_url();
    batch_answers_as_two_calls(&url, 3).await;
}

/// A resent order (the same signed bytes after a lost answer: the same nonce and fingerprint)
/// is the documented safe retry: it gets the first answer, QUEUED with the first request id,
/// even under a user rule of `max = 1` that the first order used up, and counts in no rule.
/// A replay (the nonce under another signature) is refused as one and counts nowhere either.
#[tokio::test]
async fn a_safe_retry_gets_the_first_answer_and_counts_in_no_rule() {
    let sale = Sale::new(&stack::redis_url(), 1).await;
    let one = GlobalLimit { by: LimitBy::User, max: 1, window_secs: 60, on_error: OnError::Closed };
    let rules = limit_rules(&sale.bucket, &[one], Subject { ip: None, device: None, user: "ann" }, NOW_MS);
    let order = |id: &str, fingerprint: &str| {
        ReserveCall::new(id, "ann", 1).with_limits(rules.clone()).with_nonce(sale.nonce("n1", fingerprint))
    };
    let first = sale.scripts.reserve(&sale.redis, &sale.bucket, &order("r1", "s1")).await.unwrap();
    assert!(matches!(first, ReserveOutcome::Reserved { remaining: 9, .. }), "{first:?}");
    let counted = || async {
        let n: Option<i64> = sale.redis.get(&rules[0].current).await.unwrap();
        n
    };
    assert_eq!(counted().await, Some(1), "the first order is counted");
    // Sent again, alone and inside a batch: the first answer each time, counted nowhere.
    let again = sale.scripts.reserve(&sale.redis, &sale.bucket, &order("r1-resent", "s1")).await.unwrap();
    assert_eq!(again, ReserveOutcome::Retry { request_id: "r1".into() }, "the resend is QUEUED as r1");
    let batch = [order("r1-resent", "s1"), order("r1-replayed", "evil")];
    let batch = sale.scripts.reserve_batch(&sale.redis, &sale.bucket, &batch).await.unwrap();
    assert_eq!(batch[0], ReserveOutcome::Retry { request_id: "r1".into() }, "in a batch too: {batch:?}");
    assert_eq!(batch[1], ReserveOutcome::Replay, "another signature is a replay: {batch:?}");
    assert_eq!(counted().await, Some(1), "neither the resends nor the replay counted in the rule");
    // A new order of the same buyer is over the rule, and spends no nonce.
    let fresh =
        ReserveCall::new("r2", "ann", 1).with_limits(rules.clone()).with_nonce(sale.nonce("n3", "s3"));
    let over = sale.scripts.reserve(&sale.redis, &sale.bucket, &fresh).await.unwrap();
    assert!(matches!(over, ReserveOutcome::Limited { rule: 0, .. }), "{over:?}");
    let n3: Option<String> = sale.redis.get(sale.bucket.keys.nonce("jti", "n3")).await.unwrap();
    assert_eq!(n3, None, "an order over a rule spends no nonce");
    sale.clean().await;
}
