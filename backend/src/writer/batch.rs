//! One batch, one transaction: read the facts ([`super::store`]), decide
//! ([`super::decide::decide`]), write the orders, ledger rows, refusals, dead letters and the
//! next offset, and last the conditional stock update.

use anyhow::Context;
use protocol::signing::Signer;
use sqlx::{PgConnection, PgPool};

use super::decide::{self, DeadLetter, Facts};
use super::{retry, store, BatchOutcome, Fence, Incoming, Rejected};
use protocol::record::Reservation;

/// A late-locked batch met a change made since it read: the conditional stock update refused it
/// (another partition's batch sold the same units first), or a reservation it ordered was
/// refused meanwhile (a reconciliation repair, which locks the campaign row). The batch is
/// rolled back and written again with the rows locked first.
#[derive(Debug, thiserror::Error)]
#[error("late-locked batch conflicted ({0}); rolled back")]
struct LateConflict(&'static str);

/// How a batch treats the campaign rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// Read the rows without a lock, decide, write, and take the lock only for the final
    /// conditional update just before commit: partitions of one campaign overlap their work.
    Late,
    /// Lock the rows (in id order) before deciding: the guard cannot refuse, and what users hold
    /// is read under the lock. Used when a late batch was refused, i.e. when the campaign is
    /// close to selling out.
    First,
}

/// Writes one batch of a partition in ONE transaction and returns what Redis must be told.
/// `records` must be in offset order; the stored next offset becomes `last offset + 1`. A record
/// whose signature is not `signer`'s (the gateway key's) is dead-lettered, like one that cannot
/// be decoded.
///
/// The batch is first written with the campaign rows locked late (see `Locking`); if the
/// conditional stock update refuses it, it is rolled back and written again with the rows locked
/// first. Either way the stock guard runs in the same transaction as the orders.
pub async fn write_batch(
    pool: &PgPool,
    topic: &str,
    partition: i32,
    records: &[Incoming],
    signer: &Signer,
) -> anyhow::Result<BatchOutcome> {
    write_batch_fenced(pool, topic, partition, records, signer, None).await
}

/// [`write_batch`] under a lease: with `fence`, the transaction commits only if the partition's
/// lease still names `fence`'s owner and epoch and has not expired (checked last, in the same
/// transaction as the orders and the offset); otherwise it is rolled back with
/// [`retry::Fenced`].
pub async fn write_batch_fenced(
    pool: &PgPool,
    topic: &str,
    partition: i32,
    records: &[Incoming],
    signer: &Signer,
    fence: Option<&Fence>,
) -> anyhow::Result<BatchOutcome> {
    // 1. Verify and decode; a record that is not signed or cannot be decoded is kept as a dead
    // letter, never retried.
    let decoded = decide::decode_batch(records, signer);
    let place = Place { pool, topic, partition, fence };
    match write_batch_with(&place, records, &decoded, Locking::Late).await {
        Err(e) if e.downcast_ref::<LateConflict>().is_some() => {
            tracing::debug!(topic, partition, error = %e, "locking first");
            write_batch_with(&place, records, &decoded, Locking::First).await
        }
        other => other,
    }
}

/// Where a batch is written: the database, the partition, and its lease if it has one.
struct Place<'a> {
    pool: &'a PgPool,
    topic: &'a str,
    partition: i32,
    fence: Option<&'a Fence>,
}

/// Begins a batch's transaction; under a lease, its idle time is bounded ([`store::bound_idle`]).
async fn begin<'a>(
    pool: &PgPool,
    fence: Option<&Fence>,
) -> anyhow::Result<sqlx::Transaction<'a, sqlx::Postgres>> {
    let mut tx = pool.begin().await.context(retry::BeginFailed)?;
    if let Some(f) = fence {
        store::bound_idle(&mut tx, f).await?;
    }
    Ok(tx)
}

/// Checks the fence (when leased) and commits.
async fn commit(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    topic: &str,
    partition: i32,
    fence: Option<&Fence>,
) -> anyhow::Result<()> {
    if let Some(f) = fence {
        store::check_fence(&mut tx, topic, partition, f).await?;
    }
    tx.commit().await.context("commit")?;
    Ok(())
}

async fn write_batch_with(
    place: &Place<'_>,
    records: &[Incoming],
    decoded: &decide::Decoded,
    locking: Locking,
) -> anyhow::Result<BatchOutcome> {
    let Place { pool, topic, partition, fence } = *place;
    let Some(last) = records.last() else { return Ok(BatchOutcome::default()) };
    let next_offset = last.offset + 1;
    let valid = &decoded.valid;

    let mut tx = begin(pool, fence).await?;
    let mut out = BatchOutcome { dead: decoded.dead.len(), ..Default::default() };
    let facts = read_facts(&mut tx, valid, locking).await?;

    // 4. Decide each new reservation, in offset order, against the stock read in step 2.
    let decision = decide::decide(valid, &facts);
    for r in &decision.ordered_before {
        out.add_ordered(r);
    }
    out.refused.extend(decision.refused_before.iter().cloned());
    insert_orders(&mut tx, &decision.accepted, &facts, &mut out).await?;

    // 7. Refusals, so the result query can answer and a redelivery is refused the same way.
    store::insert_rejected(&mut tx, &decision.refused_now).await?;
    out.refused.extend(decision.refused_now.iter().cloned());

    insert_dead_letters(&mut tx, (topic, partition), &decoded.dead, &mut out).await?;

    // 9. The next offset, in the same transaction.
    store::store_offset(&mut tx, topic, partition, next_offset).await?;

    take_stock(&mut tx, &decision, &facts, locking).await?;
    // 11. Under a lease, the fence, then the commit.
    commit(tx, topic, partition, fence).await?;
    Ok(out)
}

/// What a batch is decided against (its steps 2 and 3): the campaigns touched, read (with
/// `Locking::First`, locked in id order, so writers of other partitions never deadlock); what
/// earlier deliveries already decided, and who already holds their one order.
async fn read_facts(
    conn: &mut PgConnection,
    valid: &[Reservation],
    locking: Locking,
) -> anyhow::Result<Facts> {
    let campaign_ids = decide::campaign_ids(valid);
    let campaigns = store::read_campaigns(conn, &campaign_ids, locking == Locking::First).await?;
    let ids: Vec<String> = valid.iter().map(|r| r.request_id.clone()).collect();
    let already_ordered = store::already_ordered(conn, &ids).await?;
    let already_refused = store::already_refused(conn, &ids).await?;
    let candidates = decide::holder_candidates(valid, &campaigns, &already_ordered);
    let holders = store::holders(conn, &candidates).await?;
    let held = store::held(conn, &decide::held_candidates(valid, &campaigns, &already_ordered)).await?;
    Ok(Facts { campaigns, already_ordered, already_refused, holders, held })
}

/// A batch's steps 5 and 6: the `accepted` orders, in one statement, and one ledger row per
/// order, added to `out`.
async fn insert_orders(
    conn: &mut PgConnection,
    accepted: &[Reservation],
    facts: &Facts,
    out: &mut BatchOutcome,
) -> anyhow::Result<()> {
    if accepted.is_empty() {
        return Ok(());
    }
    let a = store::OrderArrays::new(accepted, &facts.campaigns);
    let inserted = store::insert_orders(conn, &a).await?;
    if inserted.len() != accepted.len() {
        // A concurrent writer inserted one of these between our checks and the insert (two
        // instances given the same partition). Roll back; the retry sees its rows.
        anyhow::bail!(
            "{} of {} orders conflicted; retrying the batch",
            accepted.len() - inserted.len(),
            accepted.len()
        );
    }
    out.inserted = inserted.len();
    store::insert_ledger(conn, &a).await?;
    for r in accepted {
        out.add_ordered(r);
    }
    Ok(())
}

/// A batch's step 8: the `dead` letters, with their place. A signed one that names its
/// reservation is refused UNDECODABLE and released (acked if an earlier copy became an order),
/// so that the outbox's copy is not produced again forever; added to `out`.
async fn insert_dead_letters(
    conn: &mut PgConnection,
    (topic, partition): (&str, i32),
    dead: &[DeadLetter],
    out: &mut BatchOutcome,
) -> anyhow::Result<()> {
    store::insert_dead_letters(conn, topic, partition, dead).await?;
    let undecodable: Vec<&Reservation> = dead.iter().filter_map(|d| d.release.as_ref()).collect();
    if !undecodable.is_empty() {
        let ids: Vec<String> = undecodable.iter().map(|r| r.request_id.clone()).collect();
        let ordered = store::already_ordered(conn, &ids).await?;
        let (before, refused): (Vec<&Reservation>, Vec<&Reservation>) =
            undecodable.into_iter().partition(|r| ordered.contains(&r.request_id));
        for r in before {
            out.add_ordered(r);
        }
        let refused: Vec<Rejected> = refused
            .into_iter()
            .map(|r| Rejected { record: r.clone(), status: "FAILED", reason: decide::UNDECODABLE.into() })
            .collect();
        store::insert_rejected(conn, &refused).await?;
        out.refused.extend(refused);
    }
    for d in dead {
        tracing::warn!(topic, partition, offset = d.offset, error = %d.error, "dead letter");
    }
    Ok(())
}

/// A batch's step 10, the last guard, last: the conditional stock update. Under `Locking::Late`
/// the campaign rows are locked here (in id order), so they are held only from here to the
/// commit, and a refusal, or a reservation refused meanwhile, rolls the whole batch back (see
/// `write_batch`). Under `Locking::First` it cannot refuse.
async fn take_stock(
    conn: &mut PgConnection,
    decision: &decide::Decision,
    facts: &Facts,
    locking: Locking,
) -> anyhow::Result<()> {
    let per = decision.units_per_campaign();
    if per.is_empty() {
        return Ok(());
    }
    let (pc, pn): (Vec<String>, Vec<i64>) = per.into_iter().unzip();
    if locking == Locking::Late {
        store::lock_campaigns_late(conn, &pc).await?;
        // Under the lock, this statement sees every refusal committed before it: one for a
        // reservation this batch ordered means a repair decided it first.
        let accepted_ids: Vec<&str> = decision.accepted.iter().map(|r| r.request_id.as_str()).collect();
        if store::count_refused(conn, &accepted_ids).await? > 0 {
            return Err(LateConflict("a reservation was refused meanwhile").into());
        }
        // And every order committed before it: a user past a limit above 1 means another
        // batch (another instance given the partition) ordered for them since we read.
        let pairs = decide::accepted_pairs(decision, &facts.campaigns);
        if decide::over_limit(&store::held(conn, &pairs).await?, &facts.campaigns) {
            return Err(LateConflict("a user's limit was taken meanwhile").into());
        }
    }
    let updated = store::take_stock(conn, &pc, &pn).await?;
    if updated != pc.len() as u64 {
        if locking == Locking::First {
            anyhow::bail!("stock guard refused a locked batch (sold + n > total_stock); rolled back");
        }
        return Err(LateConflict("the stock guard refused it").into());
    }
    Ok(())
}

/// Dead-letters one record PostgreSQL refused, alone in its own transaction with the next
/// offset (`offset + 1`), and returns what Redis must be told (see
/// [`retry::dead_letter_outcome`]).
pub(super) async fn write_dead_letter(
    pool: &PgPool,
    (topic, partition, fence): (&str, i32, Option<&Fence>),
    rec: &Incoming,
    error: &str,
    signer: &Signer,
) -> anyhow::Result<BatchOutcome> {
    // An unsigned or forged record never reaches PostgreSQL (it is a dead letter of the batch);
    // checked again so that only a signed record can release units.
    let record = decide::decode(rec.value.as_deref(), rec.signature.as_deref(), signer).ok();
    let mut tx = begin(pool, fence).await?;
    let has_order = match &record {
        Some(r) => !store::already_ordered(&mut tx, std::slice::from_ref(&r.request_id)).await?.is_empty(),
        None => false,
    };
    let dead = DeadLetter {
        offset: rec.offset,
        payload: rec.value.clone().unwrap_or_default(),
        error: format!("refused by PostgreSQL: {error}"),
        release: None,
    };
    let outcome = retry::dead_letter_outcome(record, has_order);
    store::insert_dead_letters(&mut tx, topic, partition, std::slice::from_ref(&dead)).await?;
    // The refusal is recorded with the dead letter, so a later copy of the record (the sweeper
    // may have produced one) is refused the same way instead of becoming an order after Redis
    // released its units.
    store::insert_rejected(&mut tx, &outcome.refused).await?;
    store::store_offset(&mut tx, topic, partition, rec.offset + 1).await?;
    commit(tx, topic, partition, fence).await?;
    Ok(outcome)
}
