//! The decisions of a reconciliation, as pure functions over a [`Snapshot`] of both stores: the
//! seed's equation in each store and across them, and every request id that differs. Redis' own
//! equation, per bucket, and the transfers between buckets are in [`super::ledger`].

use std::collections::{BTreeMap, HashMap, HashSet};

use protocol::keys::home_bucket;
use protocol::record::Reservation;

pub use super::difference::{Difference, Kind};
use super::ledger::{self, BucketBalance, BucketSnap};

/// An order as reconciliation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOrder {
    /// Buyer.
    pub user: String,
    /// Units.
    pub qty: i64,
    /// `PENDING_PAYMENT`, `PAID` or `CLOSED`.
    pub status: String,
    /// A closed order whose units Redis took back.
    pub redis_released: bool,
}

impl PgOrder {
    fn live(&self) -> bool {
        self.status != "CLOSED"
    }
}

/// What both stores hold for one campaign, read PostgreSQL first, then Redis.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// PostgreSQL: total stock.
    pub total: i64,
    /// PostgreSQL: units sold (live orders).
    pub sold: i64,
    /// PostgreSQL: orders by request id.
    pub orders: HashMap<String, PgOrder>,
    /// PostgreSQL: refused reservations (request id → qty).
    pub refused: HashMap<String, i64>,
    /// PostgreSQL: the campaign's bucket count (1: no buckets).
    pub count: u32,
    /// Redis: each bucket's meta, stock, counters and transfer ledgers, in bucket order.
    pub buckets: Vec<BucketSnap>,
    /// Redis, every bucket: outbox records by request id (unreadable ones are left out).
    pub outbox: BTreeMap<String, Reservation>,
    /// Redis, every bucket: request ids in the `released` ledgers.
    pub released: HashSet<String>,
    /// Redis, every bucket: units each user holds (a user holds in their home bucket only).
    pub bought: HashMap<String, i64>,
    /// Redis' clock when it was read (ms).
    pub redis_now_ms: i64,
}

impl Snapshot {
    /// A stats counter summed over the buckets.
    pub fn stat(&self, k: &str) -> i64 {
        self.buckets.iter().map(|b| b.stat(k)).sum()
    }

    /// `user`'s home bucket.
    fn home(&self, user: &str) -> u32 {
        home_bucket(user, self.count)
    }
}

/// The seed's equation (对账), in Redis, in PostgreSQL and across the two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    /// Redis, each bucket: share + received − sent − held − set aside = stock.
    pub buckets: Vec<BucketBalance>,
    /// Redis, summed: shares − in flight − held − set aside.
    pub redis_expected: i64,
    /// Redis, summed: the stock the buckets hold.
    pub redis_stock: i64,
    /// Redis: units given by a bucket and not (yet) taken by another.
    pub in_flight: i64,
    /// PostgreSQL: units of live orders.
    pub live_qty: i64,
    /// PostgreSQL: units of closed orders.
    pub closed_qty: i64,
    /// Units Redis holds for buyers: reserved − released + re-taken.
    pub held: i64,
    /// What those units should be: live orders + queued reservations without an order/refusal.
    pub accounted: i64,
    /// Queued reservations without an order or a refusal.
    pub queued_qty: i64,
}

impl Balance {
    /// Redis' own equation holds, in every bucket and summed.
    pub fn redis_holds(&self) -> bool {
        self.redis_expected == self.redis_stock && self.buckets.iter().all(BucketBalance::holds)
    }

    /// Across the stores: what Redis holds for buyers is what PostgreSQL and the queue account for.
    pub fn across_holds(&self) -> bool {
        self.held == self.accounted
    }
}

/// Computes the equations of `s`.
pub fn balance(s: &Snapshot) -> Balance {
    let live_qty: i64 = s.orders.values().filter(|o| o.live()).map(|o| o.qty).sum();
    let closed_qty: i64 = s.orders.values().filter(|o| !o.live()).map(|o| o.qty).sum();
    let queued_qty: i64 = s
        .outbox
        .iter()
        .filter(|(id, _)| !s.orders.contains_key(*id) && !s.refused.contains_key(*id))
        .map(|(_, r)| r.qty)
        .sum();
    // Units buyers hold in Redis: what was reserved, less what was released, plus what a repair
    // took again. A reservation writes no counter of its own (lua/reserve.lua).
    let held: i64 = s.bought.values().sum();
    let buckets: Vec<BucketBalance> = s.buckets.iter().map(ledger::bucket_balance).collect();
    let shares: i64 = buckets.iter().map(|b| b.share).sum();
    let in_flight: i64 = buckets.iter().map(|b| b.sent - b.received).sum();
    Balance {
        redis_expected: shares - in_flight - held - s.stat("aside_qty"),
        redis_stock: buckets.iter().map(|b| b.stock).sum(),
        in_flight,
        buckets,
        live_qty,
        closed_qty,
        held,
        accounted: live_qty + queued_qty,
        queued_qty,
    }
}

/// Every request id (or transfer id) that differs, sorted by kind then id. An outbox entry
/// counts as [`Kind::ReservedWithoutOrder`], and a transfer as [`Kind::TransferInFlight`], once
/// older than `age_ms` by Redis' clock.
pub fn differences(s: &Snapshot, age_ms: i64) -> Vec<Difference> {
    let mut diffs = ledger::transfers_in_flight(&s.buckets, s.redis_now_ms, age_ms);
    outbox_differences(s, age_ms, &mut diffs);
    let user_live = order_differences(s, &mut diffs);
    holding_differences(s, user_live, &mut diffs);
    diffs.sort_by(|a, b| (a.kind, &a.request_id).cmp(&(b.kind, &b.request_id)));
    diffs
}

/// The outbox entries that differ: ordered or refused in PostgreSQL but not acked or released,
/// or older than `age_ms` without either.
fn outbox_differences(s: &Snapshot, age_ms: i64, diffs: &mut Vec<Difference>) {
    for (id, r) in &s.outbox {
        let d = |kind| Difference {
            kind,
            request_id: id.clone(),
            user: r.user.clone(),
            qty: r.qty,
            bucket: s.home(&r.user),
        };
        if s.orders.contains_key(id) {
            diffs.push(d(Kind::OrderedNotAcked));
        } else if s.refused.contains_key(id) {
            diffs.push(d(Kind::RefusedNotReleased));
        } else if s.redis_now_ms - r.reserved_at_ms > age_ms {
            diffs.push(d(Kind::ReservedWithoutOrder));
        }
    }
}

/// The orders that differ: a live one released, a closed one not released. Returns the other
/// live orders by user (their id and quantity), for [`holding_differences`].
fn order_differences<'a>(
    s: &'a Snapshot,
    diffs: &mut Vec<Difference>,
) -> BTreeMap<&'a str, Vec<(&'a str, i64)>> {
    let mut user_live: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    for (id, o) in &s.orders {
        let d = |kind| Difference {
            kind,
            request_id: id.clone(),
            user: o.user.clone(),
            qty: o.qty,
            bucket: s.home(&o.user),
        };
        if o.live() {
            if s.released.contains(id) {
                diffs.push(d(Kind::DoubleRelease));
            } else {
                user_live.entry(o.user.as_str()).or_default().push((id.as_str(), o.qty));
            }
        } else if !o.redis_released || !s.released.contains(id) {
            diffs.push(d(Kind::ClosedNotReleased));
        }
    }
    user_live
}

/// A user's live orders (not flagged before) plus queued reservations must be what Redis says
/// the user holds; the deficit is named by the orders without an outbox entry.
fn holding_differences(
    s: &Snapshot,
    user_live: BTreeMap<&str, Vec<(&str, i64)>>,
    diffs: &mut Vec<Difference>,
) {
    let mut queued_by_user: HashMap<&str, i64> = HashMap::new();
    for (id, r) in &s.outbox {
        if !s.orders.contains_key(id) {
            *queued_by_user.entry(r.user.as_str()).or_default() += r.qty;
        }
    }
    for (user, mut list) in user_live {
        let holds = s.bought.get(user).copied().unwrap_or(0);
        let expect: i64 =
            list.iter().map(|x| x.1).sum::<i64>() + queued_by_user.get(user).copied().unwrap_or(0);
        let mut deficit = expect - holds;
        list.sort();
        for (id, qty) in list {
            if deficit <= 0 {
                break;
            }
            if s.outbox.contains_key(id) {
                continue;
            }
            diffs.push(Difference {
                kind: Kind::OrderWithoutReservation,
                request_id: id.to_string(),
                user: user.to_string(),
                qty,
                bucket: s.home(user),
            });
            deficit -= qty;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, user: &str, at: i64) -> Reservation {
        Reservation {
            request_id: id.into(),
            campaign: "c".into(),
            user: user.into(),
            sku: "s".into(),
            qty: 1,
            price_cents: 100,
            price_version: 1,
            stock_version: 1,
            reserved_at_ms: at,
            client_ip: None,
            device: None,
            registered_at: None,
            buckets: 1,
        }
    }

    fn order(user: &str, status: &str, redis_released: bool) -> PgOrder {
        PgOrder { user: user.into(), qty: 1, status: status.into(), redis_released }
    }

    fn stats(pairs: &[(&str, i64)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// 10 units: a1 ordered and acked, q1 queued, r1 refused and released.
    fn clean() -> Snapshot {
        let bucket = BucketSnap {
            tag: "sk:{c}".into(),
            share: 10,
            stock: 8,
            held: 2,
            stats: stats(&[("released_qty", 1)]),
            ..Default::default()
        };
        let mut s = Snapshot {
            total: 10,
            sold: 1,
            count: 1,
            buckets: vec![bucket],
            redis_now_ms: 100_000,
            ..Default::default()
        };
        s.orders.insert("a1".into(), order("ua", "PENDING_PAYMENT", false));
        s.outbox.insert("q1".into(), rec("q1", "uq", 99_000));
        s.refused.insert("r1".into(), 1);
        s.released.insert("r1".into());
        s.bought = [("ua".to_string(), 1), ("uq".to_string(), 1)].into_iter().collect();
        s
    }

    #[test]
    fn a_clean_sale_balances_everywhere_and_differs_nowhere() {
        let s = clean();
        let b = balance(&s);
        assert!(b.redis_holds() && b.across_holds(), "{b:?}");
        assert_eq!((b.live_qty, b.queued_qty, b.held), (1, 1, 2));
        assert!(differences(&s, 5_000).is_empty());
    }

    #[test]
    fn each_equation_fails_when_its_store_is_off() {
        let mut s = clean();
        s.buckets[0].stock = 9; // one unit appeared in Redis from nowhere
        let b = balance(&s);
        assert!(!b.redis_holds() && b.across_holds());
        let mut s = clean();
        s.bought.insert("uz".into(), 1); // a buyer holds a unit the stock never gave
        let b = balance(&s);
        assert!(!b.redis_holds() && !b.across_holds());
        let mut s = clean();
        s.orders.insert("x1".into(), order("ux", "PAID", false)); // an order Redis never held
        let b = balance(&s);
        assert!(b.redis_holds() && !b.across_holds());
    }

    #[test]
    fn units_set_aside_and_re_taken_are_in_the_equation() {
        let mut s = clean();
        // a closed order released aside (pause_replenish): stock unchanged, aside 1.
        s.orders.insert("c1".into(), order("uc", "CLOSED", true));
        s.released.insert("c1".into());
        s.buckets[0].stats = stats(&[("released_qty", 2), ("aside_qty", 1)]);
        s.buckets[0].stock = 7;
        assert!(balance(&s).redis_holds());
        assert!(differences(&s, 5_000).is_empty());
    }

    #[test]
    fn every_kind_is_found() {
        let mut s = clean();
        s.outbox.insert("old".into(), rec("old", "uo", 1_000)); // stale: 99 s old by Redis' clock
        s.outbox.insert("a1".into(), rec("a1", "ua", 99_000)); // ordered, not acked
        s.outbox.insert("r1".into(), rec("r1", "ur", 99_000)); // refused, not released
        s.orders.insert("d1".into(), order("ud", "PENDING_PAYMENT", false));
        s.released.insert("d1".into()); // live order released
        s.orders.insert("c1".into(), order("uc", "CLOSED", false)); // closed, Redis not told
        s.orders.insert("g1".into(), order("ug", "PAID", false)); // no reservation in Redis
        let kinds: Vec<(Kind, String)> =
            differences(&s, 5_000).into_iter().map(|d| (d.kind, d.request_id)).collect();
        assert_eq!(
            kinds,
            vec![
                (Kind::ReservedWithoutOrder, "old".into()),
                (Kind::RefusedNotReleased, "r1".into()),
                (Kind::OrderedNotAcked, "a1".into()),
                (Kind::DoubleRelease, "d1".into()),
                (Kind::OrderWithoutReservation, "g1".into()),
                (Kind::ClosedNotReleased, "c1".into()),
            ]
        );
        // A young queued reservation is not a difference yet.
        assert!(!kinds.iter().any(|(_, id)| id == "q1"));
    }
}
