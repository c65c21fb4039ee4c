//! What to do after a failed write: retry the same records, split a batch into one record per
//! transaction, dead-letter one record, or wait for the database. Pure; [`super::fallback`]
//! applies it.
//!
//! A record PostgreSQL keeps refusing (a constraint, a trigger, a value it cannot store) must not
//! block its partition forever; a PostgreSQL that cannot be reached must never cost a record.

use protocol::record::Reservation;

use super::{BatchOutcome, Rejected};

/// Reason code of a reservation dead-lettered because PostgreSQL refused it alone.
pub(super) const DEAD_LETTER: &str = "DEAD_LETTER";

/// The context of a failed BEGIN: the pool gave no usable connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct BeginFailed;

impl std::fmt::Display for BeginFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("begin")
    }
}

/// The error of a transaction the lease fence refused: the partition's lease is not (or no
/// longer) this writer's, under this epoch.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the partition's lease is no longer this writer's: refused by the fence, rolled back")]
pub struct Fenced;

/// Why a write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// The lease fence refused it: another writer owns the partition now.
    Fenced,
    /// PostgreSQL cannot be reached (connection refused or lost, pool timed out or closed, no
    /// BEGIN): the records have nothing to do with it.
    Unreachable,
    /// PostgreSQL answered and refused: maybe because of a record.
    Rejected,
}

/// SQLSTATEs that mean the connection, not the statement, failed: class 08 (connection
/// exception), the server shutting down or starting (57P01-57P03), too many connections, the
/// session ended for idling in a transaction (25P03: a leased partition's writer was paused).
fn unreachable_sqlstate(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300" | "25P03")
}

/// The pause before writing the same records again: none after the first lost connection (a
/// pooled connection that died, e.g. ended by PostgreSQL while its writer was paused, is
/// replaced by a fresh one at once, and a leased partition then meets its fence before anything
/// else), `pause` otherwise.
pub(super) fn pause(fault: Fault, unreachable: u32, pause: std::time::Duration) -> std::time::Duration {
    if fault == Fault::Unreachable && unreachable <= 1 {
        return std::time::Duration::ZERO;
    }
    pause
}

/// Classifies an error of [`super::write_batch`] (or of a dead letter's transaction).
pub(super) fn classify(e: &anyhow::Error) -> Fault {
    if e.downcast_ref::<Fenced>().is_some() {
        return Fault::Fenced;
    }
    if e.downcast_ref::<BeginFailed>().is_some() {
        return Fault::Unreachable;
    }
    for cause in e.chain() {
        if let Some(s) = cause.downcast_ref::<sqlx::Error>() {
            let unreachable = match s {
                sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::BeginFailed => true,
                sqlx::Error::Database(db) => db.code().is_some_and(|c| unreachable_sqlstate(&c)),
                _ => false,
            };
            return if unreachable { Fault::Unreachable } else { Fault::Rejected };
        }
    }
    Fault::Rejected
}

/// The next step after a failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Write the same records again (after a pause).
    Retry,
    /// Write the batch again one record per transaction.
    Split,
    /// Dead-letter the one record, alone, with the next offset.
    DeadLetter,
    /// PostgreSQL is away: write the same records again once it answers, never dead-letter.
    WaitForDatabase,
    /// The lease is lost: write nothing more, drop the partition (its new owner reads it from
    /// the stored offset).
    Drop,
}

/// Decides the next step. `rejected` counts the tries PostgreSQL refused so far, this one
/// included; `max` is `writer.batch_retries`; `records` is how many records the write held.
pub(super) fn next_step(fault: Fault, rejected: u32, max: u32, records: usize) -> Step {
    match fault {
        Fault::Fenced => Step::Drop,
        Fault::Unreachable => Step::WaitForDatabase,
        Fault::Rejected if rejected < max => Step::Retry,
        Fault::Rejected if records > 1 => Step::Split,
        Fault::Rejected => Step::DeadLetter,
    }
}

/// What Redis is told about a record dead-lettered alone: nothing for an undecodable one; an
/// ack if its order exists after all (an earlier delivery made it); otherwise a release (its
/// stock goes back, the result query answers that it was released without an order), so the
/// sweeper does not produce it again and again.
pub(super) fn dead_letter_outcome(record: Option<Reservation>, has_order: bool) -> BatchOutcome {
    let mut out = BatchOutcome { dead: 1, ..Default::default() };
    match record {
        None => {}
        Some(r) if has_order => out.add_ordered(&r),
        Some(r) => out.refused.push(Rejected { record: r, status: "FAILED", reason: DEAD_LETTER.into() }),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_batch_is_retried_then_split() {
        assert_eq!(next_step(Fault::Rejected, 1, 3, 20), Step::Retry);
        assert_eq!(next_step(Fault::Rejected, 2, 3, 20), Step::Retry);
        assert_eq!(next_step(Fault::Rejected, 3, 3, 20), Step::Split);
        assert_eq!(next_step(Fault::Rejected, 1, 1, 2), Step::Split);
    }

    #[test]
    fn a_rejected_single_record_is_retried_then_dead_lettered() {
        assert_eq!(next_step(Fault::Rejected, 2, 3, 1), Step::Retry);
        assert_eq!(next_step(Fault::Rejected, 3, 3, 1), Step::DeadLetter);
        assert_eq!(next_step(Fault::Rejected, 1, 1, 1), Step::DeadLetter);
    }

    #[test]
    fn an_unreachable_database_never_splits_nor_dead_letters() {
        for (rejected, records) in [(0, 20), (3, 20), (100, 20), (0, 1), (3, 1), (100, 1)] {
            assert_eq!(next_step(Fault::Unreachable, rejected, 3, records), Step::WaitForDatabase);
        }
    }

    #[test]
    fn connection_failures_are_unreachable_and_statement_failures_rejected() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let unreachable = [
            anyhow::Error::from(sqlx::Error::Io(io)),
            anyhow::Error::from(sqlx::Error::PoolTimedOut).context("inserting orders"),
            anyhow::Error::from(sqlx::Error::PoolClosed),
            anyhow::Error::from(sqlx::Error::Protocol("eof".into())).context(BeginFailed),
        ];
        for e in &unreachable {
            assert_eq!(classify(e), Fault::Unreachable, "{e:#}");
        }
        assert_eq!(format!("{:#}", unreachable[3]), "begin: encountered unexpected or invalid data: eof");
        let rejected = [
            anyhow::Error::from(sqlx::Error::RowNotFound).context("locking campaigns"),
            anyhow::Error::from(sqlx::Error::Protocol("bad".into())),
            anyhow::anyhow!("2 of 5 orders conflicted; retrying the batch"),
        ];
        for e in &rejected {
            assert_eq!(classify(e), Fault::Rejected, "{e:#}");
        }
    }

    #[test]
    fn only_the_first_lost_connection_is_retried_at_once() {
        let p = std::time::Duration::from_millis(500);
        assert_eq!(pause(Fault::Unreachable, 1, p), std::time::Duration::ZERO);
        assert_eq!(pause(Fault::Unreachable, 2, p), p);
        assert_eq!(pause(Fault::Rejected, 1, p), p);
    }

    #[test]
    fn a_fenced_write_drops_the_partition_whatever_came_before() {
        let e = anyhow::Error::from(Fenced).context("commit");
        assert_eq!(classify(&e), Fault::Fenced);
        for (rejected, records) in [(0, 20), (3, 20), (0, 1), (100, 1)] {
            assert_eq!(next_step(Fault::Fenced, rejected, 3, records), Step::Drop);
        }
    }

    #[test]
    fn sqlstates_of_a_lost_connection_are_unreachable() {
        for code in ["08006", "08001", "57P01", "57P03", "53300", "25P03"] {
            assert!(unreachable_sqlstate(code), "{code}");
        }
        for code in ["P0001", "23505", "23514", "40001", "42501"] {
            assert!(!unreachable_sqlstate(code), "{code}");
        }
    }

    fn res(id: &str) -> Reservation {
        Reservation {
            request_id: id.into(),
            campaign: "c".into(),
            user: "u".into(),
            sku: "s".into(),
            qty: 2,
            price_cents: 1,
            price_version: 1,
            stock_version: 1,
            reserved_at_ms: 1,
            client_ip: None,
            device: None,
            registered_at: None,
            buckets: 1,
        }
    }

    #[test]
    fn a_dead_lettered_reservation_is_released_unless_its_order_exists() {
        let released = dead_letter_outcome(Some(res("r")), false);
        assert_eq!(released.dead, 1);
        assert!(released.ordered.is_empty());
        let f = &released.refused[0];
        assert_eq!((f.record.request_id.as_str(), f.status, f.reason.as_str()), ("r", "FAILED", DEAD_LETTER));
        let acked = dead_letter_outcome(Some(res("r")), true);
        let home = super::super::HomeBucket { campaign: "c".into(), index: 0, count: 1 };
        assert_eq!(acked.ordered[&home], ["r"]);
        assert!(acked.refused.is_empty());
        let nothing = dead_letter_outcome(None, false);
        assert_eq!((nothing.dead, nothing.ordered.len(), nothing.refused.len()), (1, 0, 0));
    }
}
