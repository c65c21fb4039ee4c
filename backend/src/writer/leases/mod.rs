//! Partitions by lease: writers started without a fixed plan share the topic's partitions
//! through PostgreSQL, with no coordinator.
//!
//! Each partition has a row in `partition_leases` (owner, epoch, expiry by PostgreSQL's clock)
//! and each writer a heartbeat in `writer_heartbeats`. Every `leases.renew_ms` a writer renews
//! its heartbeat and its leases, reads the live writers and aims at its fair share,
//! `partitions / writers` or one more (`decide`): it claims free or expired partitions (a new epoch
//! each), or releases its surplus when another writer joined (after the partition's writer
//! finished its batch in flight). A writer that dies stops renewing: its leases expire within
//! `leases.lease_ms` and the others take them over at their next round, so within
//! `lease_ms + renew_ms` (plus the new owner's start).
//!
//! Safety does not rest on timing: every batch of a leased partition checks, in its own
//! transaction, that the lease still names its writer and epoch and has not expired (the
//! fence, [`crate::writer::Fence`]). A writer that lost its lease while paused or cut off finds
//! out at its next commit, which is rolled back, and drops the partition.

mod decide;
mod store;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::conf::LeaseConf;
use crate::writer::{self, wait_or_shutdown, Fence, WriterCtx};

/// A partition this writer holds, and its writer task.
struct Held {
    epoch: i64,
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<bool>>,
}

/// One writer's leases.
struct Leases {
    ctx: WriterCtx,
    conf: LeaseConf,
    partitions: i32,
    owner: Arc<str>,
    rows_ready: bool,
    held: BTreeMap<i32, Held>,
}

/// A new writer id for `partition_leases.owner`: the process id (so an operator can tell who
/// holds what) and a unique part (a restarted process is another writer).
pub fn owner_id() -> String {
    format!("pid{}-{}", std::process::id(), uuid::Uuid::now_v7().simple())
}

/// Holds a fair share of the `partitions` of `ctx.topic` by lease, writing each held partition,
/// until `shutdown` turns true; then stops the writers (each commits its batch in flight),
/// releases the leases and removes the heartbeat, so that the others take over at once.
pub async fn run(
    ctx: WriterCtx,
    conf: LeaseConf,
    partitions: i32,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let owner: Arc<str> = owner_id().into();
    tracing::info!(%owner, lease_ms = conf.lease.as_millis() as u64, renew_ms = conf.renew.as_millis() as u64, "partitions by lease");
    let mut l = Leases { ctx, conf, partitions, owner, rows_ready: false, held: BTreeMap::new() };
    loop {
        if let Err(e) = l.round().await {
            tracing::warn!(error = %format!("{e:#}"), "lease round failed; retrying at the next");
        }
        if wait_or_shutdown(&mut shutdown, l.conf.renew).await {
            break;
        }
    }
    l.stop_all().await;
    Ok(())
}

impl Leases {
    /// One round: heartbeat, renewal, then claims or releases towards the fair share.
    async fn round(&mut self) -> anyhow::Result<()> {
        self.reap().await;
        let (pool, topic, owner) = (self.ctx.pool.clone(), self.ctx.topic.clone(), self.owner.clone());
        let (pool, topic, owner, lease) = (&pool, topic.as_str(), &*owner, self.conf.lease);
        if !self.rows_ready {
            store::ensure_rows(pool, topic, self.partitions).await?;
            self.rows_ready = true;
        }
        let writers = store::heartbeat(pool, topic, owner, lease).await?;
        let renewed = store::renew(pool, topic, owner, lease).await?;
        let held: Vec<(i32, i64)> = self.held.iter().map(|(p, h)| (*p, h.epoch)).collect();
        for p in decide::lost(&held, &renewed) {
            self.lose(p);
        }
        for (p, epoch) in renewed.iter().filter(|(p, _)| !self.held.contains_key(p)) {
            // Ours, but its writer ended (an error): free it for whoever can write it.
            store::release(pool, topic, owner, (*p, *epoch)).await?;
        }
        let rank = writers.iter().position(|w| w == owner);
        let share = decide::fair_share(self.partitions, writers.len(), rank);
        let now: Vec<i32> = self.held.keys().copied().collect();
        match decide::change(&now, share) {
            decide::Change::Claim(n) => self.claim(n).await?,
            decide::Change::Release(surplus) => {
                for p in surplus {
                    self.release(p).await?;
                }
            }
            decide::Change::Keep => {}
        }
        self.ctx.metrics.leases_held.set(self.held.len() as i64);
        Ok(())
    }

    /// Forgets the partitions whose writer ended by itself (the fence refused it, or an error).
    async fn reap(&mut self) {
        let ended: Vec<i32> =
            self.held.iter().filter(|(_, h)| h.task.is_finished()).map(|(p, _)| *p).collect();
        for p in ended {
            let Some(h) = self.held.remove(&p) else { continue };
            match h.task.await {
                Ok(Ok(true)) => self.ctx.metrics.leases_lost.inc(),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::error!(partition = p, error = %format!("{e:#}"), "writer ended with an error")
                }
                Err(e) => tracing::error!(partition = p, error = %e, "writer task failed"),
            }
        }
    }

    /// Claims up to `n` partitions and starts their writers.
    async fn claim(&mut self, n: usize) -> anyhow::Result<()> {
        let claimed = store::claim(&self.ctx.pool, &self.ctx.topic, &self.owner, n, self.conf.lease).await?;
        for c in claimed {
            match &c.from {
                Some(from) if **from != *self.owner => {
                    self.ctx.metrics.lease_takeovers.inc();
                    tracing::info!(partition = c.partition, epoch = c.epoch, from = %from, "partition taken over (its lease had expired)");
                }
                _ => tracing::info!(partition = c.partition, epoch = c.epoch, "partition claimed"),
            }
            self.start(c.partition, c.epoch);
        }
        Ok(())
    }

    /// Starts the writer of `partition` under `epoch`.
    fn start(&mut self, partition: i32, epoch: i64) {
        let (stop, rx) = watch::channel(false);
        let fence = Fence { owner: self.owner.clone(), epoch, idle: self.conf.renew };
        let task = tokio::spawn(writer::run_partition_under(self.ctx.clone(), partition, Some(fence), rx));
        self.held.insert(partition, Held { epoch, stop, task });
    }

    /// A lease found expired or taken: its writer is told to stop (a batch it commits meanwhile
    /// is refused by the fence).
    fn lose(&mut self, partition: i32) {
        if let Some(h) = self.held.remove(&partition) {
            let _ = h.stop.send(true);
            self.ctx.metrics.leases_lost.inc();
            tracing::warn!(partition, epoch = h.epoch, "lease lost (expired or taken): partition dropped");
        }
    }

    /// Releases `partition` after its writer finished the batch in flight.
    async fn release(&mut self, partition: i32) -> anyhow::Result<()> {
        let Some(h) = self.held.remove(&partition) else { return Ok(()) };
        stop_writer(partition, h.stop, h.task, self.conf.lease).await;
        store::release(&self.ctx.pool, &self.ctx.topic, &self.owner, (partition, h.epoch)).await?;
        tracing::info!(partition, "partition released (above the fair share)");
        Ok(())
    }

    /// At shutdown: every writer stopped, every lease released, the heartbeat removed.
    async fn stop_all(&mut self) {
        for (p, h) in std::mem::take(&mut self.held) {
            stop_writer(p, h.stop, h.task, self.conf.lease).await;
            if let Err(e) = store::release(&self.ctx.pool, &self.ctx.topic, &self.owner, (p, h.epoch)).await {
                tracing::warn!(partition = p, error = %format!("{e:#}"), "lease not released; it expires by itself");
            }
        }
        self.ctx.metrics.leases_held.set(0);
        if let Err(e) = store::forget(&self.ctx.pool, &self.ctx.topic, &self.owner).await {
            tracing::warn!(error = %format!("{e:#}"), "heartbeat not removed; it expires by itself");
        }
    }
}

/// Tells a partition's writer to stop and waits (at most `bound`) for it to finish its batch in
/// flight; past that it is aborted (what it has not committed is read again by the next owner,
/// and the fence refuses it once the lease is released).
async fn stop_writer(
    partition: i32,
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<bool>>,
    bound: Duration,
) {
    let _ = stop.send(true);
    let abort = task.abort_handle();
    match tokio::time::timeout(bound, task).await {
        Ok(Ok(Err(e))) => tracing::error!(partition, error = %format!("{e:#}"), "writer ended with an error"),
        Ok(_) => {}
        Err(_) => {
            tracing::warn!(partition, "writer did not stop within a lease; aborted");
            abort.abort();
        }
    }
}
