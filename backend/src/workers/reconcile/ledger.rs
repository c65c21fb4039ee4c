//! Redis' own equation, bucket by bucket, and the transfers between buckets (pure).
//!
//! Each bucket of a campaign with hot-stock buckets is a whole ledger: it was published with its
//! share of the stock (meta `total`), received and sent units in transfers (`received`, `sent`),
//! and holds units for its buyers (`bought`) and aside (stats `aside_qty`). So in each bucket:
//! share + Σ received − Σ sent − held − set aside = stock. A campaign without buckets has one,
//! with no transfers: the equation is the one it always had. Summed over the buckets, what was
//! sent and never received is in flight: in no stock.

use std::collections::HashMap;

use super::difference::{Difference, Kind};
use crate::campaign::buckets::Sent;

/// What Redis holds in one bucket.
#[derive(Debug, Clone, Default)]
pub struct BucketSnap {
    /// Its index.
    pub index: u32,
    /// Its keys' prefix with the hash tag (`sk:{<campaign>#<B>.<n>}`), to find it on a cluster.
    pub tag: String,
    /// Its hash slot.
    pub slot: u16,
    /// Its share of the stock as published (meta `total`).
    pub share: i64,
    /// Its remaining stock.
    pub stock: i64,
    /// Units its buyers hold (Σ `bought`).
    pub held: i64,
    /// Its stats counters.
    pub stats: HashMap<String, String>,
    /// Its `sent` ledger.
    pub sent: Vec<Sent>,
    /// Its `received` ledger: transfer id → units.
    pub received: HashMap<String, i64>,
}

impl BucketSnap {
    /// A stats counter (0 when absent).
    pub fn stat(&self, k: &str) -> i64 {
        self.stats.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
    }
}

/// One bucket's equation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketBalance {
    /// Its index.
    pub index: u32,
    /// Its key prefix.
    pub tag: String,
    /// Its hash slot.
    pub slot: u16,
    /// Its published share.
    pub share: i64,
    /// Units received in transfers.
    pub received: i64,
    /// Units sent in transfers.
    pub sent: i64,
    /// Units its buyers hold.
    pub held: i64,
    /// Units set aside (pause_replenish).
    pub aside: i64,
    /// Its stock.
    pub stock: i64,
}

impl BucketBalance {
    /// What the stock should be: share + received − sent − held − set aside.
    pub fn expected(&self) -> i64 {
        self.share + self.received - self.sent - self.held - self.aside
    }

    /// The equation holds.
    pub fn holds(&self) -> bool {
        self.expected() == self.stock
    }

    /// The printed line of this bucket.
    pub fn line(&self) -> String {
        format!(
            "bucket {} ({}, slot {}): share {} + received {} - sent {} - held {} - set aside {} = {}; stock {} => {}",
            self.index,
            self.tag,
            self.slot,
            self.share,
            self.received,
            self.sent,
            self.held,
            self.aside,
            self.expected(),
            self.stock,
            if self.holds() { "holds" } else { "DIFFERS" }
        )
    }
}

/// The equation of bucket `b`.
pub fn bucket_balance(b: &BucketSnap) -> BucketBalance {
    BucketBalance {
        index: b.index,
        tag: b.tag.clone(),
        slot: b.slot,
        share: b.share,
        received: b.received.values().sum(),
        sent: b.sent.iter().map(|s| s.qty).sum(),
        held: b.held,
        aside: b.stat("aside_qty"),
        stock: b.stock,
    }
}

/// Every transfer sent by a bucket more than `age_ms` ago (Redis' clock `now_ms`) that its
/// receiving bucket has not received: a [`Kind::TransferInFlight`] on the receiving bucket,
/// whose repair is the "take" there.
pub fn transfers_in_flight(buckets: &[BucketSnap], now_ms: i64, age_ms: i64) -> Vec<Difference> {
    let by_index: HashMap<u32, &BucketSnap> = buckets.iter().map(|b| (b.index, b)).collect();
    let mut out = Vec::new();
    for b in buckets {
        for s in &b.sent {
            let taken = by_index.get(&s.to).is_some_and(|to| to.received.contains_key(&s.id));
            if !taken && now_ms - s.at_ms > age_ms {
                out.push(Difference {
                    kind: Kind::TransferInFlight,
                    request_id: s.id.clone(),
                    user: String::new(),
                    qty: s.qty,
                    bucket: s.to,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::find::{balance, differences, Snapshot};
    use super::*;

    fn sent(id: &str, to: u32, qty: i64, at_ms: i64) -> Sent {
        Sent { id: id.into(), to, qty, at_ms }
    }

    /// 10 units over 2 buckets (5 + 5): bucket 0 gave 3 to bucket 1 (taken), and gave 1 more
    /// (`t2`) that bucket 1 never took; bucket 1's buyer holds 2.
    fn bucketed() -> Snapshot {
        let b0 = BucketSnap {
            index: 0,
            share: 5,
            stock: 1,
            sent: vec![sent("t1", 1, 3, 1_000), sent("t2", 1, 1, 2_000)],
            ..Default::default()
        };
        let b1 = BucketSnap {
            index: 1,
            share: 5,
            stock: 6,
            held: 2,
            received: [("t1".to_string(), 3)].into_iter().collect(),
            ..Default::default()
        };
        let mut s = Snapshot {
            total: 10,
            count: 2,
            buckets: vec![b0, b1],
            redis_now_ms: 100_000,
            ..Default::default()
        };
        s.bought.insert("u".into(), 2);
        s.outbox.insert(
            "q".into(),
            protocol::record::Reservation {
                request_id: "q".into(),
                campaign: "c".into(),
                user: "u".into(),
                sku: "s".into(),
                qty: 2,
                price_cents: 1,
                price_version: 1,
                stock_version: 1,
                reserved_at_ms: 99_000,
                client_ip: None,
                device: None,
                registered_at: None,
                buckets: 2,
            },
        );
        s
    }

    #[test]
    fn each_bucket_balances_with_its_transfers_and_the_sum_counts_what_is_in_flight() {
        let s = bucketed();
        let b = balance(&s);
        assert!(b.redis_holds() && b.across_holds(), "{b:?}");
        assert_eq!(b.buckets[0].expected(), 1);
        assert_eq!(b.buckets[1].expected(), 6);
        assert_eq!((b.in_flight, b.redis_expected, b.redis_stock), (1, 7, 7));
        assert!(b.buckets[0].line().contains("bucket 0") && b.buckets[0].line().ends_with("holds"));
    }

    #[test]
    fn a_transfer_never_taken_is_a_difference_on_its_receiver_once_old() {
        let s = bucketed();
        let d = differences(&s, 5_000);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].kind, d[0].request_id.as_str(), d[0].qty, d[0].bucket),
            (Kind::TransferInFlight, "t2", 1, 1)
        );
        assert!(differences(&s, 99_000).is_empty(), "younger than the age: left to its caller");
    }

    #[test]
    fn a_unit_missing_from_one_bucket_is_named_there() {
        let mut s = bucketed();
        s.buckets[1].stock -= 1;
        let b = balance(&s);
        assert!(!b.redis_holds());
        let off: Vec<u32> = b.buckets.iter().filter(|x| !x.holds()).map(|x| x.index).collect();
        assert_eq!(off, [1]);
    }
}
