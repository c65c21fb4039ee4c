//! One lane per partition: records from the queue to Kafka through rskafka's `BatchProducer`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use rskafka::client::partition::UnknownTopicHandling;
use rskafka::client::producer::aggregator::{self, Aggregator, StatusDeaggregator, TryPush};
use rskafka::client::producer::{BatchProducer, BatchProducerBuilder};
use rskafka::client::Client;
use rskafka::record::Record;
use rskafka::BackoffConfig;
use tokio::sync::{mpsc, Mutex};

use super::{now_ms, produce_budget, Item, QueueConf, QueueStats, Throttle};

/// Bytes of records in one batch at most, whatever `batch_max` says (a broker's default
/// message limit is 1 MiB).
const MAX_BATCH_BYTES: usize = 512 * 1024;
/// How long a lane's first connection may take, at start, before any record waits on it: a
/// TLS handshake and a SCRAM exchange per connection can outlast the produce timeout, and
/// records that arrive meanwhile wait in the lane (within the gateway's hold).
const FIRST_CONNECT: Duration = Duration::from_secs(5);
/// First and longest wait before connecting again after a failure.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What the lanes share: the conf, one Kafka client, the counters, the "Kafka down" log.
#[derive(Debug)]
pub(super) struct Shared {
    conf: QueueConf,
    client: Mutex<ClientState>,
    stats: Arc<QueueStats>,
    down_log: Throttle,
}

/// The process's one Kafka client, or when the lanes may try to build it again.
#[derive(Debug)]
struct ClientState {
    client: Option<Arc<Client>>,
    retry_at: Instant,
    backoff: Duration,
    last_error: String,
}

impl Shared {
    pub(super) fn new(conf: QueueConf, stats: Arc<QueueStats>) -> Arc<Self> {
        let state = ClientState {
            client: None,
            retry_at: Instant::now(),
            backoff: BACKOFF_MIN,
            last_error: String::new(),
        };
        Arc::new(Self { conf, client: Mutex::new(state), stats, down_log: Throttle::default() })
    }

    /// The process's Kafka client, built on first use (bounded by `deadline`). While the
    /// brokers cannot be reached, one attempt per backoff for all lanes together.
    async fn client(&self, deadline: Duration) -> Result<Arc<Client>, String> {
        let mut state = self.client.lock().await;
        if let Some(c) = state.client.as_ref() {
            return Ok(Arc::clone(c));
        }
        if Instant::now() < state.retry_at {
            return Err(state.last_error.clone());
        }
        let backoff = BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            base: 2.0,
            // Refused or failed attempts are retried only this long; a slow handshake that makes
            // progress has the whole `deadline`.
            deadline: Some(self.conf.produce_timeout),
        };
        let build = self.conf.connection.builder().backoff_config(backoff).build();
        let result = match tokio::time::timeout(deadline, build).await {
            Ok(Ok(c)) => Ok(Arc::new(c)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {deadline:?}")),
        };
        match result {
            Ok(client) => {
                state.client = Some(Arc::clone(&client));
                state.backoff = BACKOFF_MIN;
                Ok(client)
            }
            Err(e) => {
                state.retry_at = Instant::now() + state.backoff;
                state.backoff = (state.backoff * 2).min(BACKOFF_MAX);
                state.last_error = e.clone();
                Err(e)
            }
        }
    }

    /// A batch producer for `partition`, connected within `deadline`.
    async fn producer(
        &self,
        partition: i32,
        deadline: Duration,
    ) -> Result<Arc<BatchProducer<Batch>>, String> {
        let client = self.client(deadline).await?;
        let topic = &self.conf.topic;
        let pc = client.partition_client(topic.as_str(), partition, UnknownTopicHandling::Error);
        let pc = match tokio::time::timeout(deadline, pc).await {
            Ok(Ok(pc)) => pc,
            Ok(Err(e)) => return Err(format!("partition {topic}/{partition}: {e}")),
            Err(_) => return Err(format!("partition {topic}/{partition}: no leader in time")),
        };
        let producer = BatchProducerBuilder::new(Arc::new(pc))
            .with_linger(self.conf.linger)
            .build(Batch::new(self.conf.batch_max, Arc::clone(&self.stats)));
        Ok(Arc::new(producer))
    }

    /// Counts a record dropped for Kafka's sake and logs, once per interval, why.
    fn dropped(&self, partition: i32, why: &str) {
        let total = self.stats.dropped_kafka.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(held) = self.down_log.tick(now_ms()) {
            tracing::warn!(
                brokers = ?self.conf.connection.brokers(), topic = %self.conf.topic, partition, error = why,
                dropped_since_last_log = held + 1, dropped_total = total,
                "kafka not reachable: records left in the outbox for the sweeper; reconnecting"
            );
        }
    }
}

/// One record's produce and its outcome.
type Produce = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// The lane of `partition`: until every sender is gone.
///
/// The lane's producer, once built, is kept for the life of the process: rskafka's partition
/// client reconnects to the broker on its own, and dropping a `BatchProducer` would abort its
/// batches still being flushed, losing every record in them from the gateway's side (they stay
/// in the outbox, but each one lost here is a record the sweeper has to produce again). A
/// record whose ack does not come within its budget is only *counted* as left to the sweeper:
/// its batch goes on in the background.
pub(super) async fn run(shared: Arc<Shared>, partition: i32, mut rx: mpsc::Receiver<Item>) {
    let mut conn = Connection::default();
    conn.connect(&shared, partition, FIRST_CONNECT.max(shared.conf.produce_timeout)).await;
    let limit = shared.conf.batch_max * 4;
    let mut inflight: FuturesUnordered<Produce> = FuturesUnordered::new();
    loop {
        tokio::select! {
            Some(result) = inflight.next(), if !inflight.is_empty() => match result {
                Ok(()) => {
                    shared.stats.produced.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => shared.dropped(partition, &e),
            },
            item = rx.recv(), if inflight.len() < limit => {
                let Some(item) = item else { break };
                if conn.producer.is_none() && Instant::now() >= conn.retry_at {
                    conn.connect(&shared, partition, shared.conf.produce_timeout).await;
                }
                let conf = &shared.conf;
                let budget = produce_budget(item.at.elapsed(), conf.linger, conf.produce_timeout);
                match (&conn.producer, budget) {
                    (Some(p), Some(budget)) => {
                        let p = Arc::clone(p);
                        inflight.push(Box::pin(async move {
                            let record = item.record.into_kafka(chrono::Utc::now());
                            match tokio::time::timeout(budget, p.produce(record)).await {
                                Ok(Ok(_offset)) => Ok(()),
                                Ok(Err(e)) => Err(e.to_string()),
                                Err(_) => Err(format!("no ack within {budget:?}")),
                            }
                        }));
                    }
                    (Some(_), None) => shared.dropped(partition, "waited past the gateway's hold"),
                    (None, _) => shared.dropped(partition, conn.last_error.as_str()),
                }
            }
        }
    }
    while let Some(result) = inflight.next().await {
        if result.is_ok() {
            shared.stats.produced.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A lane's producer (built once, then kept), and when to try building it again until then.
struct Connection {
    producer: Option<Arc<BatchProducer<Batch>>>,
    retry_at: Instant,
    backoff: Duration,
    last_error: String,
}

impl Default for Connection {
    fn default() -> Self {
        Self {
            producer: None,
            retry_at: Instant::now(),
            backoff: BACKOFF_MIN,
            last_error: "not connected yet".into(),
        }
    }
}

impl Connection {
    async fn connect(&mut self, shared: &Shared, partition: i32, deadline: Duration) {
        match shared.producer(partition, deadline).await {
            Ok(p) => {
                if self.backoff > BACKOFF_MIN {
                    tracing::info!(brokers = ?shared.conf.connection.brokers(), partition, "kafka reachable");
                }
                self.producer = Some(p);
                self.backoff = BACKOFF_MIN;
            }
            Err(e) => {
                if shared.down_log.tick(now_ms()).is_some() {
                    tracing::warn!(
                        brokers = ?shared.conf.connection.brokers(), topic = %shared.conf.topic, partition, error = %e,
                        "kafka not reachable: the sale goes on, records wait in the outbox; retrying"
                    );
                }
                self.last_error = e;
                self.retry_at = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// rskafka's `RecordAggregator` closes a batch by bytes only; this one closes it at `max`
/// records (or [`MAX_BATCH_BYTES`]), gives each record its offset back, and counts the batches
/// it hands to the producer ([`QueueStats::batches`]).
#[derive(Debug)]
pub(super) struct Batch {
    max: usize,
    bytes: usize,
    records: Vec<Record>,
    stats: Arc<QueueStats>,
}

impl Batch {
    fn new(max: usize, stats: Arc<QueueStats>) -> Self {
        Self { max: max.max(1), bytes: 0, records: Vec::new(), stats }
    }
}

impl Aggregator for Batch {
    type Input = Record;
    type Tag = usize;
    type StatusDeaggregator = Offsets;

    fn try_push(&mut self, record: Record) -> Result<TryPush<Record, usize>, aggregator::Error> {
        let size = record.approximate_size();
        let full_bytes = !self.records.is_empty() && self.bytes + size > MAX_BATCH_BYTES;
        if self.records.len() >= self.max || full_bytes {
            return Ok(TryPush::NoCapacity(record));
        }
        self.bytes += size;
        self.records.push(record);
        Ok(TryPush::Aggregated(self.records.len() - 1))
    }

    fn flush(&mut self) -> Result<(Vec<Record>, Offsets), aggregator::Error> {
        self.bytes = 0;
        if !self.records.is_empty() {
            self.stats.batches.fetch_add(1, Ordering::Relaxed);
        }
        Ok((std::mem::take(&mut self.records), Offsets))
    }
}

/// The offset of each record of a flushed [`Batch`].
#[derive(Debug)]
pub(super) struct Offsets;

impl StatusDeaggregator for Offsets {
    type Status = i64;
    type Tag = usize;

    fn deaggregate(&self, offsets: &[i64], tag: usize) -> Result<i64, aggregator::Error> {
        offsets.get(tag).copied().ok_or_else(|| format!("no offset for record {tag}").into())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn rec(n: usize) -> Record {
        Record { key: None, value: Some(vec![0; n]), headers: BTreeMap::new(), timestamp: chrono::Utc::now() }
    }

    #[test]
    fn a_batch_closes_at_max_records_or_bytes() {
        let stats = Arc::new(QueueStats::default());
        let mut b = Batch::new(2, Arc::clone(&stats));
        assert!(matches!(b.try_push(rec(10)).unwrap(), TryPush::Aggregated(0)));
        assert!(matches!(b.try_push(rec(10)).unwrap(), TryPush::Aggregated(1)));
        assert!(matches!(b.try_push(rec(10)).unwrap(), TryPush::NoCapacity(_)));
        let (records, offsets) = b.flush().unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(stats.batches.load(Ordering::Relaxed), 1, "one batch counted");
        assert_eq!(offsets.deaggregate(&[40, 41], 1).unwrap(), 41);
        assert!(
            matches!(b.try_push(rec(MAX_BATCH_BYTES)).unwrap(), TryPush::Aggregated(0)),
            "one big record"
        );
        assert!(matches!(b.try_push(rec(10)).unwrap(), TryPush::NoCapacity(_)), "past the byte cap");
    }
}
