//! Writing one chunk of a partition until it is committed, whatever PostgreSQL says: the policy
//! of [`super::retry`] applied. A batch PostgreSQL refuses `writer.batch_retries` times is
//! written again one record per transaction; a record refused that often alone is dead-lettered
//! alone, with the next offset, and the partition moves on. While PostgreSQL cannot be reached
//! the same records are tried again until they commit or shutdown is asked. A write the lease
//! fence refuses ends it all: the partition is someone else's now.

use std::time::Duration;

use tokio::sync::watch;

use super::retry::{self, Fault, Step};
use super::{batch, wait_or_shutdown, write_batch_fenced, BatchOutcome, Fence, Incoming, WriterCtx};

/// Pause between two tries of the same records.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// How the tries of some records ended.
enum Tries {
    /// Committed.
    Written(BatchOutcome),
    /// Refused too often: split the batch, or dead-letter the one record (with the last error).
    GaveUp(Step, String),
    /// Shutdown was asked before a commit, or the fence refused it.
    Halted(Halt),
}

/// Why a chunk's writing stopped before every record was committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Halt {
    /// Shutdown (or the release of the partition's lease) was asked: the records not committed
    /// are read again by whoever writes the partition next.
    Stopped,
    /// The lease fence refused a transaction: this writer no longer owns the partition.
    Fenced,
}

/// The partition and the lease (if any) a chunk is written under.
#[derive(Clone, Copy)]
pub(super) struct Under<'a> {
    pub partition: i32,
    pub fence: Option<&'a Fence>,
}

/// Writes `chunk` (offset order) until every record is committed or dead-lettered. Returns what
/// Redis must be told of everything committed, and why it stopped first if it did (the records
/// not committed then are read again at the next start).
pub(super) async fn write_chunk(
    ctx: &WriterCtx,
    under: Under<'_>,
    chunk: &[Incoming],
    shutdown: &mut watch::Receiver<bool>,
) -> (BatchOutcome, Option<Halt>) {
    let partition = under.partition;
    let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else {
        return (BatchOutcome::default(), None);
    };
    match tries(ctx, under, chunk, shutdown).await {
        Tries::Written(o) => return (o, None),
        Tries::Halted(h) => return (BatchOutcome::default(), Some(h)),
        Tries::GaveUp(Step::Split, error) => tracing::warn!(
            partition,
            first = first.offset,
            last = last.offset,
            tries = ctx.cfg.batch_retries,
            error,
            "batch refused every try; writing it one record per transaction"
        ),
        Tries::GaveUp(_, error) => {
            return match dead_letter(ctx, under, first, &error, shutdown).await {
                Ok(o) => (o, None),
                Err(h) => (BatchOutcome::default(), Some(h)),
            }
        }
    }
    let mut out = BatchOutcome::default();
    for rec in chunk {
        let written = match tries(ctx, under, std::slice::from_ref(rec), shutdown).await {
            Tries::Written(o) => o,
            Tries::Halted(h) => return (out, Some(h)),
            Tries::GaveUp(_, error) => match dead_letter(ctx, under, rec, &error, shutdown).await {
                Ok(o) => o,
                Err(h) => return (out, Some(h)),
            },
        };
        out.absorb(written);
    }
    (out, None)
}

/// Writes `records` in one transaction, again and again as [`retry::next_step`] says.
async fn tries(
    ctx: &WriterCtx,
    under: Under<'_>,
    records: &[Incoming],
    shutdown: &mut watch::Receiver<bool>,
) -> Tries {
    let Under { partition, fence } = under;
    let offset = records.first().map(|r| r.offset);
    let (mut rejected, mut unreachable) = (0, 0);
    loop {
        let started = std::time::Instant::now();
        let e = match write_batch_fenced(&ctx.pool, &ctx.topic, partition, records, &ctx.signer, fence).await
        {
            Ok(o) => {
                ctx.metrics.transaction.observe(started.elapsed().as_secs_f64());
                return Tries::Written(o);
            }
            Err(e) => e,
        };
        ctx.metrics.transaction_failures.inc();
        let fault = retry::classify(&e);
        match fault {
            Fault::Rejected => rejected += 1,
            Fault::Unreachable => unreachable += 1,
            Fault::Fenced => {}
        }
        let error = format!("{e:#}");
        match retry::next_step(fault, rejected, ctx.cfg.batch_retries, records.len()) {
            step @ (Step::Split | Step::DeadLetter) => return Tries::GaveUp(step, error),
            Step::Drop => return Tries::Halted(Halt::Fenced),
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
        if wait_or_shutdown(shutdown, retry::pause(fault, unreachable, RETRY_PAUSE)).await {
            return Tries::Halted(Halt::Stopped);
        }
    }
}

/// Dead-letters `rec` alone with the next offset, retrying that transaction until it commits;
/// why not when shutdown was asked or the fence refused it first.
async fn dead_letter(
    ctx: &WriterCtx,
    under: Under<'_>,
    rec: &Incoming,
    error: &str,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<BatchOutcome, Halt> {
    let Under { partition, fence } = under;
    loop {
        let place = (ctx.topic.as_str(), partition, fence);
        match batch::write_dead_letter(&ctx.pool, place, rec, error, &ctx.signer).await {
            Ok(o) => {
                tracing::error!(
                    partition,
                    offset = rec.offset,
                    error,
                    "record refused by PostgreSQL; dead-lettered"
                );
                return Ok(o);
            }
            Err(e) if retry::classify(&e) == Fault::Fenced => return Err(Halt::Fenced),
            Err(e) => tracing::warn!(
                partition,
                offset = rec.offset,
                error = %format!("{e:#}"),
                "dead letter not written; retrying"
            ),
        }
        if wait_or_shutdown(shutdown, RETRY_PAUSE).await {
            return Err(Halt::Stopped);
        }
    }
}
