//! Writing one chunk of a partition until it is committed, whatever PostgreSQL says: the policy
//! of [`super::retry`] applied. A batch PostgreSQL refuses `writer.batch_retries` times is
//! written again one record per transaction; a record refused that often alone is dead-lettered
//! alone, with the next offset, and the partition moves on. While PostgreSQL cannot be reached
//! the same records are tried again until they commit or shutdown is asked.

use std::time::Duration;

use tokio::sync::watch;

use super::retry::{self, Fault, Step};
use super::{batch, wait_or_shutdown, write_batch, BatchOutcome, Incoming, WriterCtx};

/// Pause between two tries of the same records.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// How the tries of some records ended.
enum Tries {
    /// Committed.
    Written(BatchOutcome),
    /// Refused too often: split the batch, or dead-letter the one record (with the last error).
    GaveUp(Step, String),
    /// Shutdown was asked before a commit.
    Stopped,
}

/// Writes `chunk` (offset order) until every record is committed or dead-lettered. Returns what
/// Redis must be told of everything committed, and true when shutdown stopped it first (the
/// records not committed then are read again at the next start).
pub(super) async fn write_chunk(
    ctx: &WriterCtx,
    partition: i32,
    chunk: &[Incoming],
    shutdown: &mut watch::Receiver<bool>,
) -> (BatchOutcome, bool) {
    let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else {
        return (BatchOutcome::default(), false);
    };
    match tries(ctx, partition, chunk, shutdown).await {
        Tries::Written(o) => return (o, false),
        Tries::Stopped => return (BatchOutcome::default(), true),
        Tries::GaveUp(Step::Split, error) => tracing::warn!(
            partition,
            first = first.offset,
            last = last.offset,
            tries = ctx.cfg.batch_retries,
            error,
            "batch refused every try; writing it one record per transaction"
        ),
        Tries::GaveUp(_, error) => {
            return match dead_letter(ctx, partition, first, &error, shutdown).await {
                Some(o) => (o, false),
                None => (BatchOutcome::default(), true),
            }
        }
    }
    let mut out = BatchOutcome::default();
    for rec in chunk {
        let written = match tries(ctx, partition, std::slice::from_ref(rec), shutdown).await {
            Tries::Written(o) => o,
            Tries::Stopped => return (out, true),
            Tries::GaveUp(_, error) => match dead_letter(ctx, partition, rec, &error, shutdown).await {
                Some(o) => o,
                None => return (out, true),
            },
        };
        out.absorb(written);
    }
    (out, false)
}

/// Writes `records` in one transaction, again and again as [`retry::next_step`] says.
async fn tries(
    ctx: &WriterCtx,
    partition: i32,
    records: &[Incoming],
    shutdown: &mut watch::Receiver<bool>,
) -> Tries {
    let offset = records.first().map(|r| r.offset);
    let mut rejected = 0;
    loop {
        let started = std::time::Instant::now();
        let e = match write_batch(&ctx.pool, &ctx.topic, partition, records, &ctx.signer).await {
            Ok(o) => {
                ctx.metrics.transaction.observe(started.elapsed().as_secs_f64());
                return Tries::Written(o);
            }
            Err(e) => e,
        };
        ctx.metrics.transaction_failures.inc();
        let fault = retry::classify(&e);
        if fault == Fault::Rejected {
            rejected += 1;
        }
        let error = format!("{e:#}");
        match retry::next_step(fault, rejected, ctx.cfg.batch_retries, records.len()) {
            step @ (Step::Split | Step::DeadLetter) => return Tries::GaveUp(step, error),
            Step::Retry => {
                tracing::warn!(
                    partition,
                    offset,
                    n = records.len(),
                    rejected,
                    error,
                    "batch failed; retrying"
                )
            }
            Step::WaitForDatabase => tracing::warn!(
                partition,
                offset,
                n = records.len(),
                error,
                "PostgreSQL unreachable; retrying until it answers"
            ),
        }
        if wait_or_shutdown(shutdown, RETRY_PAUSE).await {
            return Tries::Stopped;
        }
    }
}

/// Dead-letters `rec` alone with the next offset, retrying that transaction until it commits;
/// `None` when shutdown was asked first.
async fn dead_letter(
    ctx: &WriterCtx,
    partition: i32,
    rec: &Incoming,
    error: &str,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<BatchOutcome> {
    loop {
        match batch::write_dead_letter(&ctx.pool, &ctx.topic, partition, rec, error, &ctx.signer).await {
            Ok(o) => {
                tracing::error!(
                    partition,
                    offset = rec.offset,
                    error,
                    "record refused by PostgreSQL; dead-lettered"
                );
                return Some(o);
            }
            Err(e) => tracing::warn!(
                partition,
                offset = rec.offset,
                error = %format!("{e:#}"),
                "dead letter not written; retrying"
            ),
        }
        if wait_or_shutdown(shutdown, RETRY_PAUSE).await {
            return None;
        }
    }
}
