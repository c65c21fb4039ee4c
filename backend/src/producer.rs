//! A small batching producer: one task per partition, fed by a channel.
//!
//! Concurrent intake requests for the same partition are grouped into one produce request while
//! the previous one is in flight, so throughput is not one broker round trip per reservation.
//! One task per partition keeps a user's records in order (key = user, partition = hash(user)).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rskafka::client::partition::{Compression, PartitionClient};
use rskafka::client::Client;
use rskafka::record::Record;
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::kafka;

struct Item {
    key: Vec<u8>,
    value: Vec<u8>,
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
}

impl Producer {
    /// Starts one task per partition of `topic`. Partition clients connect lazily, so a broker
    /// that is down at start only fails the produces (503), not the process.
    pub fn start(
        client: Arc<Client>,
        topic: &str,
        partitions: i32,
        max_batch: usize,
        timeout: Duration,
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
        Self { lanes: Arc::new(lanes), partitions, timeout }
    }

    /// Produces `value` keyed by `user` to the user's partition and waits for the broker's ack.
    /// Returns (partition, offset).
    pub async fn send(&self, user: &str, value: Vec<u8>) -> Result<(i32, i64), ProduceError> {
        let p = kafka::partition_for(user, self.partitions);
        let (done, rx) = oneshot::channel();
        let item = Item { key: user.as_bytes().to_vec(), value, done };
        let lane = &self.lanes[p as usize];
        tokio::time::timeout(self.timeout, lane.send(item))
            .await
            .map_err(|_| ProduceError::Kafka("producer queue full".into()))?
            .map_err(|_| ProduceError::Closed)?;
        // The lane answers within its own deadline; this outer one only guards against a bug.
        match tokio::time::timeout(self.timeout * 2, rx).await {
            Ok(Ok(Ok(offset))) => Ok((p, offset)),
            Ok(Ok(Err(e))) => Err(ProduceError::Kafka(e)),
            Ok(Err(_)) => Err(ProduceError::Closed),
            Err(_) => Err(ProduceError::Kafka("no ack within the deadline".into())),
        }
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
                records.push(Record {
                    key: Some(it.key),
                    value: Some(it.value),
                    headers: BTreeMap::new(),
                    timestamp: now,
                });
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
