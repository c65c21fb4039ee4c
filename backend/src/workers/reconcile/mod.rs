//! `order-writer reconcile <campaign> [--repair]`: the seed's equation (对账和补偿), every request id
//! that differs between Redis and PostgreSQL, and the safe repairs, each with an audit row. The
//! decisions are pure functions in [`find`]; this module reads the stores and applies repairs.
//!
//! Kinds of difference and what `--repair` does (all idempotent):
//! - `RESERVED_WITHOUT_ORDER`: in the outbox for longer than T by Redis' clock, no order, no
//!   refusal. Repair only what is provably not in flight: the entry is first claimed in Redis (so
//!   neither the sweeper nor a gateway touches it), it must be older than
//!   [`guard::REPAIR_AGE_FACTOR`] × T, and the writer's committed offset must have reached the end
//!   of the user's partition; otherwise the claim is given back and the repair says why it skipped.
//!   Then a FAILED refusal (`RECONCILED_NO_ORDER`) is written under the campaign's row lock (a
//!   late delivery of the record is refused, never ordered), and the units are released.
//! - `REFUSED_NOT_RELEASED`: refused in PostgreSQL but still in the outbox. Repair: release.
//! - `ORDERED_NOT_ACKED`: an order exists but the outbox still holds it. Repair: ack.
//! - `DOUBLE_RELEASE`: Redis released a reservation whose order is live (PENDING/PAID). Repair:
//!   take the units out of the Redis sale again (`adopt.lua`, which also strikes the release from
//!   the `released` ledger, so closing the order later gives them back once).
//! - `ORDER_WITHOUT_RESERVATION`: a user's live orders exceed what Redis says the user holds
//!   (Redis lost the reservation, or an order was made outside the edge). Repair: adopt, as above.
//! - `CLOSED_NOT_RELEASED`: a closed order whose stock Redis has not taken back. Repair: release.
//! - `TRANSFER_IN_FLIGHT` (hot-stock buckets): units one bucket gave another more than T ago that
//!   the receiver never took. Repair: the take (`lua/transfer.lua`, idempotent by transfer id).
//!
//! With hot-stock buckets every bucket is read; Redis' equation is checked per bucket (share +
//! received − sent − held − set aside = stock, one line each, with its key tag and slot) and
//! summed; the equations across the stores use the sums. Every difference names its bucket (the
//! user's home bucket, where its repair acts; for a transfer, the receiving bucket). An adopt in a
//! home bucket short of the quantity first moves the shortage there from the other buckets.
//!
//! What it cannot repair: a Redis stock that is short because of a lost reservation whose units are
//! already sold out (adopt takes at most what is left and says so); orders beyond PostgreSQL's
//! stock (impossible by the database guard; reported if seen); anything needing a human decision
//! (refunds of payments for closed orders). Reads are not one atomic snapshot of both stores:
//! under live traffic a difference can be transient; run it again (or after the sale) to confirm.
//! So every repair re-checks its premise before it writes: a stale reservation under its claim
//! and the campaign's row lock; an adopt under the order's row lock (still live) and, for a
//! DOUBLE_RELEASE, in `adopt.lua` (still released); the other repairs are idempotent by request
//! id (release, ack, take) and their premises are final states (refused, closed, ordered).

pub mod difference;
pub mod find;
pub mod guard;
pub mod ledger;
mod read;

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use fred::prelude::*;
use protocol::keys::Bucket;
use rskafka::client::partition::OffsetAt;
use serde_json::json;
use sqlx::PgPool;

pub use self::find::{Difference, Kind};
use crate::redis::{AdoptOutcome, RedisScripts, RepairClaim};
use protocol::scripts::TakeOutcome;

pub use crate::kafka::Topic;

/// Everything a reconciliation reads and writes.
#[derive(Clone, Copy)]
pub struct Stores<'a> {
    /// PostgreSQL.
    pub pool: &'a PgPool,
    /// Redis.
    pub redis: &'a Client,
    /// The order writer's scripts.
    pub scripts: &'a RedisScripts,
    /// The reservations topic; without it no `RESERVED_WITHOUT_ORDER` is repaired.
    pub topic: Option<Topic<'a>>,
    /// The sweep age T.
    pub sweep_age: Duration,
    /// TEST-ONLY SEAM, `None` in production (one `Option` check per run): awaited between the
    /// PostgreSQL read and the Redis read of the snapshot, so that a test can run the closer (or
    /// any writer) exactly there and prove that every repair re-checks its premise.
    pub between_reads: Option<&'a BetweenReads<'a>>,
}

/// What [`Stores::between_reads`] runs (test-only seam).
pub type BetweenReads<'a> = dyn Fn() -> futures::future::BoxFuture<'a, ()> + Send + Sync + 'a;

/// The result of a reconciliation.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The equation and totals, printable.
    pub text: String,
    /// Whether Redis' own equation holds.
    pub redis_balanced: bool,
    /// Whether PostgreSQL's `sold` equals its live orders.
    pub pg_balanced: bool,
    /// Whether what Redis holds for buyers equals live orders plus queued reservations.
    pub across_balanced: bool,
    /// Every difference found.
    pub differences: Vec<Difference>,
    /// Repairs applied (kind, request id, what was done).
    pub repaired: Vec<(Kind, String, String)>,
    /// Repairs not applied now (kind, request id, why).
    pub skipped: Vec<(Kind, String, String)>,
}

/// Compares the stores for `campaign`; with `repair`, fixes what is safe.
/// `order-writer reconcile CAMPAIGN [--repair]`: prints the report. Without Kafka, stale
/// reservations are listed but not repaired (the report says so).
pub async fn run(conns: &crate::app::Connections<'_>, campaign: &str, repair: bool) -> anyhow::Result<()> {
    let cfg = conns.conf();
    let pool = conns.postgres(crate::app::COMMAND_POOL).await?;
    let redis = conns.redis().await?;
    let scripts = conns.scripts()?;
    let kafka = match conns.kafka().await {
        Ok(kc) => Some(kc),
        Err(e) => {
            eprintln!("order-writer: {e:#}: stale reservations will not be repaired");
            None
        }
    };
    let topic =
        kafka.as_ref().map(|kafka| Topic { kafka, name: &cfg.kafka.topic, partitions: cfg.kafka.partitions });
    let stores = Stores {
        pool: &pool,
        redis: &redis,
        scripts: &scripts,
        topic,
        sweep_age: cfg.sweep_age,
        between_reads: None,
    };
    let rep = reconcile(stores, campaign, repair).await.context("reconciliation")?;
    print!("{}", rep.text);
    Ok(())
}

pub async fn reconcile(st: Stores<'_>, campaign: &str, repair: bool) -> anyhow::Result<Report> {
    let s = read::snapshot(st.pool, st.redis, campaign, st.between_reads).await?;
    let b = find::balance(&s);
    let mut rep = Report {
        redis_balanced: b.redis_holds(),
        pg_balanced: s.sold == b.live_qty,
        across_balanced: b.across_holds(),
        ..Default::default()
    };
    write_balance(&mut rep, campaign, &s, &b);
    rep.differences = find::differences(&s, st.sweep_age.as_millis() as i64);
    let _ = writeln!(rep.text, "  differences: {}", rep.differences.len());
    for d in &rep.differences {
        let _ = writeln!(rep.text, "    {}", describe(d));
    }
    if repair {
        repair_all(st, campaign, s.count, &mut rep).await;
    }
    Ok(rep)
}

/// The report's balance of `campaign`: its buckets (when several), then Redis, the shares,
/// PostgreSQL, across the two and the counts, each line saying whether it holds.
fn write_balance(rep: &mut Report, campaign: &str, s: &find::Snapshot, b: &find::Balance) {
    let word = |ok: bool| if ok { "holds" } else { "DIFFERS" };
    let stat = |k: &str| s.stat(k);
    let t = &mut rep.text;
    let _ = writeln!(t, "campaign {campaign}");
    if s.count > 1 {
        for bb in &b.buckets {
            let _ = writeln!(t, "  {}", bb.line());
        }
    }
    let shares: i64 = b.buckets.iter().map(|x| x.share).sum();
    let in_flight = if s.count > 1 { format!(" - in flight {}", b.in_flight) } else { String::new() };
    let _ = writeln!(
        t,
        "  Redis: initial {shares}{in_flight} - held by buyers {} - set aside {} = {}; remaining stock {} => {}",
        b.held,
        stat("aside_qty"),
        b.redis_expected,
        b.redis_stock,
        word(rep.redis_balanced)
    );
    if s.count > 1 {
        let _ = writeln!(
            t,
            "  buckets: {}; shares sum to {shares} (PostgreSQL total {}) => {}",
            s.count,
            s.total,
            word(shares == s.total)
        );
    }
    let _ = writeln!(
        t,
        "  PostgreSQL: total {} - live orders {} (closed {}) = {}; total - sold = {} => {}",
        s.total,
        b.live_qty,
        b.closed_qty,
        s.total - b.live_qty,
        s.total - s.sold,
        word(rep.pg_balanced)
    );
    let _ = writeln!(
        t,
        "  across: held by buyers in Redis {} = live orders {} + queued without order {} => {}",
        b.held,
        b.live_qty,
        b.queued_qty,
        word(rep.across_balanced)
    );
    let _ = writeln!(
        t,
        "  counts: reserved {} (held + released - re-taken) acked {} released {} ({} units) re-taken {} in outbox {} refused in PG {}",
        b.held + stat("released_qty") - stat("adopted_qty"),
        stat("acked_count"),
        stat("released_count"),
        stat("released_qty"),
        stat("adopted_qty"),
        s.outbox.len(),
        s.refused.len()
    );
}

/// Repairs each of the report's differences (of a campaign of `buckets` buckets), one by one,
/// each repaired, skipped or not repaired said in the report.
async fn repair_all(st: Stores<'_>, campaign: &str, buckets: u32, rep: &mut Report) {
    for d in rep.differences.clone() {
        let line = match repair_one(st, campaign, buckets, &d).await {
            Ok(Repair::Done(what)) => {
                rep.repaired.push((d.kind, d.request_id.clone(), what.clone()));
                format!("repaired {} {}: {what}", d.kind.as_str(), d.request_id)
            }
            Ok(Repair::Skipped(why)) => {
                rep.skipped.push((d.kind, d.request_id.clone(), why.clone()));
                format!("skipped {} {}: {why}", d.kind.as_str(), d.request_id)
            }
            Err(e) => {
                rep.skipped.push((d.kind, d.request_id.clone(), format!("{e:#}")));
                format!("NOT repaired {} {}: {e:#}", d.kind.as_str(), d.request_id)
            }
        };
        let _ = writeln!(rep.text, "  {line}");
    }
}

/// A difference, printed: kind, id, bucket, user, quantity.
pub fn describe(d: &Difference) -> String {
    match d.kind {
        Kind::TransferInFlight => {
            format!(
                "{} {} bucket={} qty={} (given, never taken)",
                d.kind.as_str(),
                d.request_id,
                d.bucket,
                d.qty
            )
        }
        _ => {
            format!("{} {} bucket={} user={} qty={}", d.kind.as_str(), d.request_id, d.bucket, d.user, d.qty)
        }
    }
}

/// What one repair did.
enum Repair {
    Done(String),
    Skipped(String),
}

async fn audit(pool: &PgPool, campaign: &str, d: &Difference, what: &str) -> anyhow::Result<()> {
    sqlx::query("INSERT INTO audit_log (campaign_id, request_id, action, detail) VALUES ($1, $2, $3, $4)")
        .bind(campaign)
        .bind(&d.request_id)
        .bind(format!("REPAIR_{}", d.kind.as_str()))
        .bind(json!({"user": d.user, "qty": d.qty, "bucket": d.bucket, "done": what}))
        .execute(pool)
        .await?;
    Ok(())
}

/// Committed and end offsets of the user's partition: `(partition, committed, end)`, or `None`
/// when the topic cannot be read.
async fn partition_progress(st: Stores<'_>, user: &str) -> Option<(i32, i64, i64)> {
    let topic = st.topic?;
    let p = crate::kafka::partition_for(user, topic.partitions);
    let pc = crate::kafka::partition(topic.kafka, topic.name, p, Duration::from_secs(5)).await.ok()?;
    let end = pc.get_offset(OffsetAt::Latest).await.ok()?;
    let committed = crate::writer::stored_offset(st.pool, topic.name, p).await.ok()?;
    Some((p, committed, end))
}

/// `RESERVED_WITHOUT_ORDER`: claim, prove it is not in flight, refuse under the row lock, release.
async fn repair_stale(st: Stores<'_>, home: &Bucket, d: &Difference) -> anyhow::Result<Repair> {
    let campaign = home.campaign.as_str();
    let (reserved_at_ms, now_ms) = match st.scripts.claim_for_repair(st.redis, home, &d.request_id).await? {
        RepairClaim::Gone => {
            return Ok(Repair::Skipped("no longer in the outbox (acked or released)".into()))
        }
        RepairClaim::Claimed { reserved_at_ms, now_ms } => (reserved_at_ms, now_ms),
    };
    let progress = partition_progress(st, &d.user).await;
    let age_ms = st.sweep_age.as_millis() as i64;
    if let Some(why) = guard::repair_blocker(reserved_at_ms, now_ms, age_ms, progress) {
        st.scripts.unclaim_repair(st.redis, home, &d.request_id).await?;
        return Ok(Repair::Skipped(why));
    }
    // Under the campaign row lock the writer takes before committing, so the record can no longer
    // become an order once this commits.
    let mut tx = st.pool.begin().await?;
    sqlx::query("SELECT 1 FROM campaigns WHERE id = $1 FOR UPDATE").bind(campaign).execute(&mut *tx).await?;
    let has_order: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM orders WHERE request_id = $1)")
        .bind(&d.request_id)
        .fetch_one(&mut *tx)
        .await?;
    if has_order {
        tx.rollback().await?;
        st.scripts.unclaim_repair(st.redis, home, &d.request_id).await?;
        return Ok(Repair::Skipped("its order was written meanwhile".into()));
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
    let released = st.scripts.shared.release(st.redis, home, &d.request_id, &d.user, d.qty).await?;
    Ok(Repair::Done(format!("refused as RECONCILED_NO_ORDER, then {released:?}")))
}

/// Before an adopt in `home` (one of `count` buckets): when the home bucket holds less than the
/// order's quantity (stock and set aside), moves the shortage to it from the other buckets, as
/// the gateway would for a buyer, so the adopt re-takes the whole quantity while the sale has
/// it anywhere. Transfer ids `repair-<request id>-<k>`: a repair run again moves nothing twice.
async fn fill_home(st: Stores<'_>, home: &Bucket, count: u32, d: &Difference) -> anyhow::Result<()> {
    if count <= 1 {
        return Ok(());
    }
    let stock: Option<i64> = st.redis.get(&home.keys.stock).await?;
    let aside: Option<i64> = st.redis.hget(&home.keys.stats, "aside_qty").await?;
    let mut short = d.qty - stock.unwrap_or(0) - aside.unwrap_or(0);
    for k in 1..count {
        if short <= 0 {
            break;
        }
        let donor = Bucket::nth(&home.campaign, home.index + k, count);
        let id = format!("repair-{}-{k}", d.request_id);
        short -= st.scripts.shared.transfer(st.redis, &donor, home, &id, short, false).await?;
    }
    Ok(())
}

/// `DOUBLE_RELEASE` and `ORDER_WITHOUT_RESERVATION`: re-takes the order's units in Redis, after
/// re-checking the premise, since the snapshot is not atomic (the closer may have closed and
/// released the order between the two reads). The order's row is locked (`FOR UPDATE`, which
/// the closer's and the payment's updates wait for) and must still be live, and stays locked
/// until `adopt.lua` has run; a DOUBLE_RELEASE's release must still be in Redis' ledger
/// (checked in the script). A close after the commit finds the release struck from the ledger
/// and gives the units back once.
async fn adopt(st: Stores<'_>, home: &Bucket, count: u32, d: &Difference) -> anyhow::Result<Repair> {
    let mut tx = st.pool.begin().await?;
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM orders WHERE request_id = $1 FOR UPDATE")
            .bind(&d.request_id)
            .fetch_optional(&mut *tx)
            .await?;
    match status.as_deref() {
        Some("PENDING_PAYMENT" | "PAID") => {}
        other => {
            tx.rollback().await?;
            let now = other.unwrap_or("gone");
            return Ok(Repair::Skipped(format!("the order is no longer live on re-check ({now})")));
        }
    }
    fill_home(st, home, count, d).await?;
    let only_if_released = d.kind == Kind::DoubleRelease;
    let out = st.scripts.adopt(st.redis, home, &d.request_id, &d.user, d.qty, only_if_released).await?;
    tx.commit().await?;
    Ok(match out {
        AdoptOutcome::Taken(taken) if taken == d.qty => {
            Repair::Done(format!("re-took {taken} unit(s) from the Redis sale"))
        }
        AdoptOutcome::Taken(taken) => Repair::Done(format!(
            "re-took only {taken} of {} unit(s): Redis stock was short (oversold at the edge; needs a human)",
            d.qty
        )),
        AdoptOutcome::Before => Repair::Skipped("already consistent on re-check (adopted before)".into()),
        AdoptOutcome::NotReleased => {
            Repair::Skipped("already consistent on re-check (no longer released in Redis)".into())
        }
    })
}

/// Repairs `d` in its bucket (`count` buckets).
async fn repair_one(st: Stores<'_>, campaign: &str, count: u32, d: &Difference) -> anyhow::Result<Repair> {
    let home = Bucket::nth(campaign, d.bucket, count);
    let release = || async {
        st.scripts
            .shared
            .release(st.redis, &home, &d.request_id, &d.user, d.qty)
            .await
            .map_err(anyhow::Error::from)
    };
    let what = match d.kind {
        Kind::TransferInFlight => {
            match st.scripts.shared.take(st.redis, &home, &d.request_id, d.qty).await? {
                TakeOutcome::Added { remaining } => {
                    format!("took {} unit(s) into bucket {} (stock {remaining})", d.qty, d.bucket)
                }
                TakeOutcome::AddedBefore => return Ok(Repair::Skipped("taken meanwhile".into())),
            }
        }
        Kind::ReservedWithoutOrder => match repair_stale(st, &home, d).await? {
            Repair::Done(what) => what,
            skipped => return Ok(skipped),
        },
        Kind::RefusedNotReleased => format!("{:?}", release().await?),
        Kind::ClosedNotReleased => {
            let r = release().await?;
            sqlx::query("UPDATE orders SET redis_released = TRUE WHERE request_id = $1")
                .bind(&d.request_id)
                .execute(st.pool)
                .await?;
            format!("{r:?}")
        }
        Kind::OrderedNotAcked => {
            format!("acked {}", st.scripts.ack(st.redis, &home, std::slice::from_ref(&d.request_id)).await?)
        }
        Kind::DoubleRelease | Kind::OrderWithoutReservation => match adopt(st, &home, count, d).await? {
            Repair::Done(what) => what,
            skipped => return Ok(skipped),
        },
    };
    audit(st.pool, campaign, d, &what).await?;
    Ok(Repair::Done(what))
}
