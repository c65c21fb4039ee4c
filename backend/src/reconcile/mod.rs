//! `order-writer reconcile <campaign> [--repair]`: the seed's equation (对账和补偿), every request id
//! that differs between Redis and PostgreSQL, and the safe repairs, each with an audit row.
//!
//! Kinds of difference and what `--repair` does (all idempotent):
//! - `RESERVED_WITHOUT_ORDER`: in the outbox for longer than T, no order, no refusal. Repair: a
//!   FAILED refusal (`RECONCILED_NO_ORDER`) is written under the campaign's row lock (so a late
//!   delivery of the record is refused, never ordered), then the stock is released in Redis.
//! - `REFUSED_NOT_RELEASED`: refused in PostgreSQL but still in the outbox. Repair: release.
//! - `ORDERED_NOT_ACKED`: an order exists but the outbox still holds it. Repair: ack.
//! - `DOUBLE_RELEASE`: Redis released a reservation whose order is live (PENDING/PAID). Repair:
//!   take the units out of the Redis sale again (`adopt.lua`).
//! - `ORDER_WITHOUT_RESERVATION`: a user's live orders exceed what Redis says the user holds
//!   (Redis lost the reservation, or an order was made outside the edge). Repair: adopt, as above.
//! - `CLOSED_NOT_RELEASED`: a closed order whose stock Redis has not taken back. Repair: release.
//!
//! What it cannot repair: a Redis stock that is short because of a lost reservation whose units are
//! already sold out (adopt takes at most what is left and says so); orders beyond PostgreSQL's
//! stock (impossible by the database guard; reported if seen); anything needing a human decision
//! (refunds of payments for closed orders). Reads are not one atomic snapshot of both stores:
//! under live traffic a difference can be transient; run it again (or after the sale) to confirm.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use fred::prelude::*;
use protocol::keys::CampaignKeys;
use protocol::record::Reservation;
use serde_json::json;
use sqlx::PgPool;

use crate::redis::RedisScripts;

/// A kind of difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Reserved in Redis for longer than T, no order and no refusal.
    ReservedWithoutOrder,
    /// Refused by PostgreSQL, still in the outbox.
    RefusedNotReleased,
    /// Ordered, still in the outbox.
    OrderedNotAcked,
    /// Released in Redis while its order is live.
    DoubleRelease,
    /// A live order Redis does not account for.
    OrderWithoutReservation,
    /// Closed order whose stock Redis has not taken back.
    ClosedNotReleased,
}

impl Kind {
    /// The label printed and written to the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ReservedWithoutOrder => "RESERVED_WITHOUT_ORDER",
            Kind::RefusedNotReleased => "REFUSED_NOT_RELEASED",
            Kind::OrderedNotAcked => "ORDERED_NOT_ACKED",
            Kind::DoubleRelease => "DOUBLE_RELEASE",
            Kind::OrderWithoutReservation => "ORDER_WITHOUT_RESERVATION",
            Kind::ClosedNotReleased => "CLOSED_NOT_RELEASED",
        }
    }
}

/// One request id that differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Kind.
    pub kind: Kind,
    /// Request id.
    pub request_id: String,
    /// User.
    pub user: String,
    /// Quantity.
    pub qty: i64,
}

/// The result of a reconciliation.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The equation and totals, printable.
    pub text: String,
    /// Whether Redis' own equation holds.
    pub redis_balanced: bool,
    /// Whether PostgreSQL's `sold` equals its live orders.
    pub pg_balanced: bool,
    /// Every difference found.
    pub differences: Vec<Difference>,
    /// Repairs applied (kind, request id, what was done).
    pub repaired: Vec<(Kind, String, String)>,
}

struct PgOrder {
    user: String,
    qty: i64,
    status: String,
    redis_released: bool,
}

fn num(m: &HashMap<String, String>, k: &str) -> i64 {
    m.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Compares the stores for `campaign`; with `repair`, fixes what is safe.
pub async fn reconcile(
    pool: &PgPool,
    redis: &Client,
    scripts: &RedisScripts,
    campaign: &str,
    age: Duration,
    repair: bool,
) -> anyhow::Result<Report> {
    // PostgreSQL first, then Redis: a reservation made between the two reads shows in Redis with
    // its outbox entry (balanced), never as an order without a reservation.
    let camp: Option<(i64, i64)> = sqlx::query_as("SELECT total_stock, sold FROM campaigns WHERE id = $1")
        .bind(campaign)
        .fetch_optional(pool)
        .await?;
    let Some((total, sold)) = camp else { anyhow::bail!("campaign {campaign:?} is not in PostgreSQL") };
    let orders: HashMap<String, PgOrder> = sqlx::query_as::<_, (String, String, i64, String, bool)>(
        "SELECT request_id, user_id, qty, status, redis_released FROM orders WHERE campaign_id = $1",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(r, user, qty, status, redis_released)| (r, PgOrder { user, qty, status, redis_released }))
    .collect();
    let refused: HashMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT request_id, qty FROM reservation_results WHERE campaign_id = $1",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();

    let keys = CampaignKeys::new(campaign);
    let meta: HashMap<String, String> = redis.hgetall(&keys.meta).await?;
    let stock: Option<i64> = redis.get(&keys.stock).await?;
    let stats: HashMap<String, String> = redis.hgetall(&keys.stats).await?;
    let outbox: HashMap<String, String> = redis.hgetall(&keys.outbox).await?;
    let pending: Vec<(String, f64)> = redis.zrange(&keys.pending, 0, -1, None, false, None, true).await?;
    let released: HashMap<String, String> = redis.hgetall(&keys.released).await?;
    let bought: HashMap<String, String> = redis.hgetall(&keys.bought).await?;
    let adopted: HashSet<&str> = stats.keys().filter_map(|k| k.strip_prefix("adopted:")).collect();
    let pending_at: HashMap<&str, f64> = pending.iter().map(|(k, s)| (k.as_str(), *s)).collect();

    let live = |o: &PgOrder| o.status != "CLOSED";
    let ordered_qty: i64 = orders.values().map(|o| o.qty).sum();
    let closed_qty: i64 = orders.values().filter(|o| !live(o)).map(|o| o.qty).sum();
    let live_qty = ordered_qty - closed_qty;
    let initial = num(&meta, "total");
    let reserved_qty = num(&stats, "reserved_qty");
    let released_qty = num(&stats, "released_qty");
    let adopted_qty = num(&stats, "adopted_qty");
    let remaining = stock.unwrap_or(0);
    let expected = initial - reserved_qty + released_qty - adopted_qty;
    let mut outbox_open_qty = 0;
    let mut outbox_recs: BTreeMap<String, Reservation> = BTreeMap::new();
    for (id, rec) in &outbox {
        if let Ok(r) = Reservation::from_json(rec.as_bytes()) {
            if !orders.contains_key(id) && !refused.contains_key(id) {
                outbox_open_qty += r.qty;
            }
            outbox_recs.insert(id.clone(), r);
        }
    }

    let mut rep =
        Report { redis_balanced: expected == remaining, pg_balanced: sold == live_qty, ..Default::default() };
    let t = &mut rep.text;
    let _ = writeln!(t, "campaign {campaign}");
    let _ = writeln!(t, "  Redis: initial {initial} - reserved {reserved_qty} + released {released_qty} - re-taken by repair {adopted_qty} = {expected}; remaining stock {remaining} => {}", if expected == remaining { "holds" } else { "DIFFERS" });
    let _ = writeln!(t, "  PostgreSQL: total {total} - ordered {ordered_qty} + closed {closed_qty} = {} ; total - sold = {} => {}", total - live_qty, total - sold, if sold == live_qty { "holds" } else { "DIFFERS" });
    let held = reserved_qty - released_qty + adopted_qty;
    let accounted = live_qty + outbox_open_qty;
    let _ = writeln!(t, "  across: held in Redis (reserved - released + re-taken) {held} = live orders {live_qty} + queued without order {outbox_open_qty} => {}", if held == accounted { "holds" } else { "DIFFERS" });
    let _ = writeln!(
        t,
        "  counts: reserved {} acked {} released {} in outbox {} refused in PG {}",
        num(&stats, "reserved_count"),
        num(&stats, "acked_count"),
        num(&stats, "released_count"),
        outbox.len(),
        refused.len()
    );

    // Per request id.
    let cutoff = chrono::Utc::now().timestamp_millis() as f64 - age.as_millis() as f64;
    let mut diffs = Vec::new();
    for (id, r) in &outbox_recs {
        let d = |kind| Difference { kind, request_id: id.clone(), user: r.user.clone(), qty: r.qty };
        if orders.contains_key(id) {
            diffs.push(d(Kind::OrderedNotAcked));
        } else if refused.contains_key(id) {
            diffs.push(d(Kind::RefusedNotReleased));
        } else if pending_at.get(id.as_str()).is_none_or(|s| *s < cutoff) {
            diffs.push(d(Kind::ReservedWithoutOrder));
        }
    }
    let mut user_live: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    for (id, o) in &orders {
        let d = |kind| Difference { kind, request_id: id.clone(), user: o.user.clone(), qty: o.qty };
        if live(o) {
            if released.contains_key(id) && !adopted.contains(id.as_str()) {
                diffs.push(d(Kind::DoubleRelease));
            } else {
                user_live.entry(o.user.as_str()).or_default().push((id.as_str(), o.qty));
            }
        } else if !o.redis_released || !released.contains_key(id) {
            diffs.push(d(Kind::ClosedNotReleased));
        }
    }
    // A user's live orders (not flagged above) plus queued reservations must be what Redis says
    // the user holds.
    let mut queued_by_user: HashMap<&str, i64> = HashMap::new();
    for (id, r) in &outbox_recs {
        if !orders.contains_key(id) {
            *queued_by_user.entry(r.user.as_str()).or_default() += r.qty;
        }
    }
    for (user, mut list) in user_live {
        let holds: i64 = bought.get(user).and_then(|v| v.parse().ok()).unwrap_or(0);
        let expect: i64 =
            list.iter().map(|x| x.1).sum::<i64>() + queued_by_user.get(user).copied().unwrap_or(0);
        let mut deficit = expect - holds;
        list.sort();
        for (id, qty) in list {
            if deficit <= 0 {
                break;
            }
            if outbox.contains_key(id) {
                continue;
            }
            diffs.push(Difference {
                kind: Kind::OrderWithoutReservation,
                request_id: id.to_string(),
                user: user.to_string(),
                qty,
            });
            deficit -= qty;
        }
    }
    diffs.sort_by(|a, b| (a.kind, &a.request_id).cmp(&(b.kind, &b.request_id)));
    let _ = writeln!(t, "  differences: {}", diffs.len());
    for d in &diffs {
        let _ = writeln!(t, "    {} {} user={} qty={}", d.kind.as_str(), d.request_id, d.user, d.qty);
    }
    rep.differences = diffs;
    if repair {
        for d in rep.differences.clone() {
            match repair_one(pool, redis, scripts, campaign, &d).await {
                Ok(Some(what)) => {
                    let _ = writeln!(rep.text, "  repaired {} {}: {what}", d.kind.as_str(), d.request_id);
                    rep.repaired.push((d.kind, d.request_id.clone(), what));
                }
                Ok(None) => {
                    let _ = writeln!(
                        rep.text,
                        "  skipped {} {}: already consistent on re-check",
                        d.kind.as_str(),
                        d.request_id
                    );
                }
                Err(e) => {
                    let _ = writeln!(rep.text, "  NOT repaired {} {}: {e:#}", d.kind.as_str(), d.request_id);
                }
            }
        }
    }
    Ok(rep)
}

async fn audit(pool: &PgPool, campaign: &str, d: &Difference, what: &str) -> anyhow::Result<()> {
    sqlx::query("INSERT INTO audit_log (campaign_id, request_id, action, detail) VALUES ($1, $2, $3, $4)")
        .bind(campaign)
        .bind(&d.request_id)
        .bind(format!("REPAIR_{}", d.kind.as_str()))
        .bind(json!({"user": d.user, "qty": d.qty, "done": what}))
        .execute(pool)
        .await?;
    Ok(())
}

async fn repair_one(
    pool: &PgPool,
    redis: &Client,
    scripts: &RedisScripts,
    campaign: &str,
    d: &Difference,
) -> anyhow::Result<Option<String>> {
    let release = || async {
        scripts
            .shared
            .release(redis, campaign, &d.request_id, &d.user, d.qty)
            .await
            .map_err(anyhow::Error::from)
    };
    let what = match d.kind {
        Kind::ReservedWithoutOrder => {
            // Under the campaign row lock the writer holds while deciding, so the record can no
            // longer become an order once this commits.
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT 1 FROM campaigns WHERE id = $1 FOR UPDATE")
                .bind(campaign)
                .execute(&mut *tx)
                .await?;
            let has_order: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM orders WHERE request_id = $1)")
                    .bind(&d.request_id)
                    .fetch_one(&mut *tx)
                    .await?;
            if has_order {
                tx.rollback().await?;
                return Ok(None);
            }
            sqlx::query(
                "INSERT INTO reservation_results (request_id, campaign_id, user_id, qty, status, reason)
                 VALUES ($1, $2, $3, $4, 'FAILED', 'RECONCILED_NO_ORDER') ON CONFLICT DO NOTHING",
            )
            .bind(&d.request_id)
            .bind(campaign)
            .bind(&d.user)
            .bind(d.qty)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            format!("refused as RECONCILED_NO_ORDER, then {:?}", release().await?)
        }
        Kind::RefusedNotReleased => format!("{:?}", release().await?),
        Kind::ClosedNotReleased => {
            let r = release().await?;
            sqlx::query("UPDATE orders SET redis_released = TRUE WHERE request_id = $1")
                .bind(&d.request_id)
                .execute(pool)
                .await?;
            format!("{r:?}")
        }
        Kind::OrderedNotAcked => {
            format!("acked {}", scripts.ack(redis, campaign, std::slice::from_ref(&d.request_id)).await?)
        }
        Kind::DoubleRelease | Kind::OrderWithoutReservation => {
            match scripts.adopt(redis, campaign, &d.request_id, &d.user, d.qty).await? {
                Some(taken) if taken == d.qty => format!("re-took {taken} unit(s) from the Redis stock"),
                Some(taken) => format!("re-took only {taken} of {} unit(s): Redis stock was short (oversold at the edge; needs a human)", d.qty),
                None => return Ok(None),
            }
        }
    };
    audit(pool, campaign, d, &what).await?;
    Ok(Some(what))
}
