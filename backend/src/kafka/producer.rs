//! A small batching producer: one task per partition, fed by a channel.
//!
//! Concurrent sends for the same partition (the sweeper's pass, `order-writer produce`) are
//! grouped into one produce request while the previous one is in flight, so throughput is not one
//! broker round trip per reservation. One task per partition keeps a user's records in order
//! (key = user, partition = [`protocol::record::partition_for`]). Every record carries the
//! gateway key's signature of its value in the `seckill-signature` header, built by
//! [`SignedRecord`] as the gateway's own records are: the writer dead-letters anything else
//! (see [`crate::kafka::produce`] for the record format).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use protocol::record::SignedRecord;
use protocol::signing::Signer;
use rskafka::client::partition::{Compression, PartitionClient};
use rskafka::client::Client;
use rskafka::record::Record;
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::kafka;

struct Item {
    record: SignedRecord,
    done: oneshot::Sender<Result<i64, String>>,
}

/// Why a produce failed.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// The broker did not acknowledge within the deadline, or refused.
    #[error("kafka produce failed: {0}")]
    Kafka(String),
    /// The producer is shutting down.
    #[error("producer closed")]
    Closed,
}

/// Handle to the per-partition producer tasks. Cheap to clone.
#[derive(Clone)]
pub struct Producer {
    lanes: Arc<Vec<mpsc::Sender<Item>>>,
    partitions: i32,
    timeout: Duration,
    signer: Arc<Signer>,
}

/// A record handed to its partition's task, waiting for the broker's ack
/// ([`Producer::submit`]).
pub struct Pending {
    partition: i32,
    timeout: Duration,
    rx: oneshot::Receiver<Result<i64, String>>,
}

impl Pending {
    /// Waits for the broker's ack. Returns (partition, offset).
    pub async fn acked(self) -> Result<(i32, i64), ProduceError> {
        // The lane answers within its own deadline; this outer one only guards against a bug.
        match tokio::time::timeout(self.timeout * 2, self.rx).await {
            Ok(Ok(Ok(offset))) => Ok((self.partition, offset)),
            Ok(Ok(Err(e))) => Err(ProduceError::Kafka(e)),
            Ok(Err(_)) => Err(ProduceError::Closed),
            Err(_) => Err(ProduceError::Kafka("no ack within the deadline".into())),
        }
    }
}

impl Producer {
    /// Starts one task per partition of `topic`; every record is signed by `signer` (the
    /// gateway key). Partition clients connect lazily, so a broker that is down at start only
    /// fails the produces, not the process.
    pub fn start(
        client: Arc<Client>,
        topic: &str,
        partitions: i32,
        max_batch: usize,
        timeout: Duration,
        signer: Arc<Signer>,
    ) -> Self {
        let mut lanes = Vec::new();
        for p in 0..partitions {
            let (tx, rx) = mpsc::channel::<Item>(max_batch * 4);
            let lane = Lane {
                client: client.clone(),
                topic: topic.to_string(),
                partition: p,
                pc: Mutex::new(None),
                timeout,
            };
            tokio::spawn(lane.run(rx, max_batch));
            lanes.push(tx);
        }
        Self { lanes: Arc::new(lanes), partitions, timeout, signer }
    }

    /// Produces `value` keyed by `user`, signed, to the user's partition and waits for the
    /// broker's ack. Returns (partition, offset).
    pub async fn send(&self, user: &str, value: Vec<u8>) -> Result<(i32, i64), ProduceError> {
        self.submit(user, value).await?.acked().await
    }

    /// Hands `value` (keyed by `user`, signed) to the user's partition task and returns without
    /// waiting for the broker: records submitted one after the other are produced in that order.
    pub async fn submit(&self, user: &str, value: Vec<u8>) -> Result<Pending, ProduceError> {
        let record = SignedRecord::sign(&self.signer, user, value);
        let p = record.partition(self.partitions);
        let (done, rx) = oneshot::channel();
        let item = Item { record, done };
        let lane = &self.lanes[p as usize];
        tokio::time::timeout(self.timeout, lane.send(item))
            .await
            .map_err(|_| ProduceError::Kafka("producer queue full".into()))?
            .map_err(|_| ProduceError::Closed)?;
        Ok(Pending { partition: p, timeout: self.timeout, rx })
    }
}

struct Lane {
    client: Arc<Client>,
    topic: String,
    partition: i32,
    pc: Mutex<Option<Arc<PartitionClient>>>,
    timeout: Duration,
}

impl Lane {
    async fn run(self, mut rx: mpsc::Receiver<Item>, max_batch: usize) {
        let mut batch = Vec::with_capacity(max_batch);
        while rx.recv_many(&mut batch, max_batch).await > 0 {
            let items = std::mem::take(&mut batch);
            let now = chrono::Utc::now();
            let mut records = Vec::with_capacity(items.len());
            let mut waiters = Vec::with_capacity(items.len());
            for it in items {
                records.push(it.record.into_kafka(now));
                waiters.push(it.done);
            }
            match self.produce(records).await {
                Ok(offsets) => {
                    for (w, o) in waiters.into_iter().zip(offsets) {
                        let _ = w.send(Ok(o));
                    }
                }
                Err(e) => {
                    tracing::warn!(partition = self.partition, error = %format!("{e:#}"), "produce failed");
                    *self.pc.lock().await = None;
                    let msg = format!("{e:#}");
                    for w in waiters {
                        let _ = w.send(Err(msg.clone()));
                    }
                }
            }
        }
    }

    async fn produce(&self, records: Vec<Record>) -> anyhow::Result<Vec<i64>> {
        let pc = {
            let mut guard = self.pc.lock().await;
            match guard.as_ref() {
                Some(pc) => pc.clone(),
                None => {
                    let pc = Arc::new(
                        kafka::partition(&self.client, &self.topic, self.partition, self.timeout).await?,
                    );
                    *guard = Some(pc.clone());
                    pc
                }
            }
        };
        tokio::time::timeout(self.timeout, pc.produce(records, Compression::NoCompression))
            .await
            .map_err(|_| anyhow::anyhow!("no ack within {:?}", self.timeout))?
            .context("produce")
    }
}
