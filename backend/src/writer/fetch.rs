//! The read-ahead: a task that fetches a partition's records while the writer writes the
//! previous ones.

use std::time::Duration;

use protocol::signing::RECORD_SIGNATURE_HEADER;
use tokio::sync::watch;

use super::{wait_or_shutdown, Incoming};
use crate::admin::metrics::PartitionMetrics;
use crate::conf::WriterConf;

/// Reads a partition ahead of the writer, from `offset` on, into `tx`.
pub(super) async fn fetch_ahead(
    pc: rskafka::client::partition::PartitionClient,
    cfg: WriterConf,
    partition: i32,
    mut offset: i64,
    tx: tokio::sync::mpsc::Sender<Vec<Incoming>>,
    metrics: PartitionMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let deadline = Duration::from_secs(5);
    // Short waits while records flow; after an empty fetch, the idle wait, so a quiet partition
    // is not polled tens of times a second (each poll costs the broker a storage query).
    let mut wait = cfg.max_wait;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let t0 = std::time::Instant::now();
        let fetch = pc.fetch_records(offset, 1..cfg.fetch_max_bytes, wait.as_i32());
        let fetched = tokio::select! {
            r = tokio::time::timeout(deadline, fetch) => r,
            _ = shutdown.changed() => return,
        };
        let (records, high) = match fetched {
            Ok(Ok(fetched)) => fetched,
            Ok(Err(e)) => {
                offset = after_failure(&pc, partition, offset, e).await;
                if wait_or_shutdown(&mut shutdown, Duration::from_millis(500)).await {
                    return;
                }
                continue;
            }
            Err(_) => continue,
        };
        let incoming = incoming(records, offset);
        metrics.fetched(incoming.len(), high);
        tracing::debug!(
            partition,
            offset,
            n = incoming.len(),
            ms = t0.elapsed().as_millis() as u64,
            "fetched"
        );
        let Some(last) = incoming.last() else {
            wait = cfg.idle_wait;
            continue;
        };
        wait = cfg.max_wait;
        offset = last.offset + 1;
        if tx.send(incoming).await.is_err() {
            return;
        }
    }
}

/// Logs a failed fetch at `offset`; when retention removed what was not read yet, the offset to
/// go on from is the earliest kept (said too), else `offset`.
async fn after_failure(
    pc: &rskafka::client::partition::PartitionClient,
    partition: i32,
    offset: i64,
    e: rskafka::client::error::Error,
) -> i64 {
    tracing::warn!(partition, offset, error = %e, "fetch failed");
    if let rskafka::client::error::Error::ServerError {
        protocol_error: rskafka::client::error::ProtocolError::OffsetOutOfRange,
        ..
    } = e
    {
        // Retention removed what we had not read: continue at the earliest kept.
        if let Ok(earliest) = pc.get_offset(rskafka::client::partition::OffsetAt::Earliest).await {
            tracing::error!(
                partition,
                offset,
                earliest,
                "records lost to retention before they were written"
            );
            return offset.max(earliest);
        }
    }
    offset
}

/// The fetched records from `offset` on (a fetch may start before it), with their signatures.
fn incoming(records: Vec<rskafka::record::RecordAndOffset>, offset: i64) -> Vec<Incoming> {
    records
        .into_iter()
        .filter(|r| r.offset >= offset)
        .map(|mut r| Incoming {
            offset: r.offset,
            signature: r.record.headers.remove(RECORD_SIGNATURE_HEADER),
            value: r.record.value,
        })
        .collect()
}
