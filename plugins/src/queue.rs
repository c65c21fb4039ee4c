//! The reservation queue: a reserved record goes from the request path to Kafka in the
//! background, and the answer never waits for it.
//!
//! [`ReservationQueue::enqueue`] is the one call of the hot path: it hands the record (as
//! `reserve.lua` returned it, with the gateway's signature) to the lane of its user's partition
//! without blocking (`try_send`). Each lane is one task that produces its records in batches
//! through rskafka's own batching (`BatchProducer` over a record-count aggregator): a batch closes
//! at `batch_max` records or after `linger`, whichever comes first. One lane per partition keeps
//! one user's records in order.
//!
//! The outbox entry that `reserve.lua` wrote in Redis is the promise made to the buyer; this queue
//! is only the fast way to Kafka. When the queue is full, when Kafka is slow or down, or when a
//! record waited too long to be produced within the gateway's hold ([`produce_budget`]), the
//! record is dropped from memory (counted, logged once per [`LOG_INTERVAL`]) and the order
//! writer's sweeper produces it from the outbox later. A broker that cannot be reached at start or
//! goes away mid-sale is logged by address and reconnected to on its own, with a backoff.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::timing::GATEWAY_HOLD_MAX;
use tokio::runtime::Handle;
use tokio::sync::mpsc::{self, error::TrySendError};

mod lane;

/// At most one log line per this interval for each kind of trouble (queue full, Kafka down).
pub const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Where and how the gateway produces reserved records (the `[kafka]` table of its conf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConf {
    /// Brokers, TLS and SASL (the `[kafka]` table's connection, checked).
    pub connection: protocol::kafka::KafkaConnection,
    /// The reservations topic.
    pub topic: String,
    /// Partition count of the topic (the order writer's): users are hashed over it.
    pub partitions: i32,
    /// Most records in one produce request.
    pub batch_max: usize,
    /// How long the first record of a batch waits for others.
    pub linger: Duration,
    /// Deadline of one produce (retries included) and of a connection attempt.
    pub produce_timeout: Duration,
    /// Most records waiting in memory, all lanes together.
    pub capacity: usize,
}

/// One record on its way to Kafka.
#[derive(Debug)]
struct Item {
    /// The record as `reserve.lua` returned it, keyed by its user, with its signature.
    record: protocol::record::SignedRecord,
    /// When it was enqueued, right after the reservation.
    at: Instant,
}

/// Counters of the queue since start.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Records the broker acknowledged.
    pub produced: AtomicU64,
    /// Records dropped because their lane was full (the sweeper produces them).
    pub dropped_full: AtomicU64,
    /// Records dropped because Kafka was down, slow or refused (the sweeper produces them).
    pub dropped_kafka: AtomicU64,
    /// Produce requests (batches) sent to the brokers.
    pub batches: AtomicU64,
}

/// Handle to the lanes; cheap to clone, shared by every request.
#[derive(Debug, Clone)]
pub struct ReservationQueue {
    lanes: Arc<[mpsc::Sender<Item>]>,
    partitions: i32,
    stats: Arc<QueueStats>,
    full_log: Arc<Throttle>,
}

impl ReservationQueue {
    /// Starts one lane per partition on `runtime`. Returns at once: the lanes connect in the
    /// background (a broker that cannot be reached is logged with its address, and retried).
    pub fn start(conf: QueueConf, runtime: &Handle) -> Self {
        let partitions = conf.partitions.max(1);
        let per_lane = conf.capacity.div_ceil(partitions as usize).max(1);
        let stats = Arc::new(QueueStats::default());
        let shared = lane::Shared::new(conf, Arc::clone(&stats));
        let lanes: Vec<_> = (0..partitions)
            .map(|p| {
                let (tx, rx) = mpsc::channel(per_lane);
                runtime.spawn(lane::run(Arc::clone(&shared), p, rx));
                tx
            })
            .collect();
        Self { lanes: lanes.into(), partitions, stats, full_log: Arc::new(Throttle::default()) }
    }

    /// Hands a reserved record to its user's lane without waiting. `false` when it was dropped
    /// from memory (lane full or stopped): the outbox still holds it, the sweeper produces it.
    pub fn enqueue(&self, user: &str, record: String, signature: String) -> bool {
        let record =
            protocol::record::SignedRecord { user: user.to_string(), value: record.into_bytes(), signature };
        let p = record.partition(self.partitions) as usize;
        let item = Item { record, at: Instant::now() };
        match self.lanes[p].try_send(item) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Closed(_)) => {
                let total = self.stats.dropped_full.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(since) = self.full_log.tick(now_ms()) {
                    tracing::warn!(
                        partition = p,
                        dropped_since_last_log = since + 1,
                        dropped_total = total,
                        "reservation queue full: records left in the outbox for the sweeper"
                    );
                }
                false
            }
        }
    }

    /// The counters.
    pub fn stats(&self) -> &QueueStats {
        &self.stats
    }

    /// Records waiting in the lanes now, all partitions (read by a metrics scrape; not free:
    /// one look at each lane).
    pub fn depth(&self) -> usize {
        self.lanes.iter().map(|l| l.max_capacity() - l.capacity()).sum()
    }

    /// Most records the lanes hold together.
    pub fn capacity(&self) -> usize {
        self.lanes.iter().map(|l| l.max_capacity()).sum()
    }
}

/// What the gateway learns of its topic at start, before it serves.
#[derive(Debug, PartialEq, Eq)]
pub enum TopicAtStart {
    /// The topic has the conf's partition count.
    Matches,
    /// The brokers could not be asked, or the topic does not exist yet (the order writer makes
    /// it): the gateway starts anyway, its lanes retry, and the outbox keeps every reservation.
    Unknown(String),
}

/// Checks the conf's topic against the brokers, bounded by the produce timeout. `Err` when the
/// topic exists with another partition count than `kafka.partitions`: users would be hashed over
/// the wrong partitions, so the gateway must not start.
pub async fn check_topic(conf: &QueueConf) -> Result<TopicAtStart, String> {
    let backoff = rskafka::BackoffConfig {
        init_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        base: 2.0,
        deadline: Some(conf.produce_timeout),
    };
    let build = conf.connection.builder().backoff_config(backoff).build();
    let client = match tokio::time::timeout(conf.produce_timeout, build).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Ok(TopicAtStart::Unknown(e.to_string())),
        Err(_) => return Ok(TopicAtStart::Unknown(format!("no answer within {:?}", conf.produce_timeout))),
    };
    match protocol::kafka::topic_partitions(&client, &conf.topic, conf.produce_timeout).await {
        Err(e) => Ok(TopicAtStart::Unknown(e)),
        Ok(None) => Ok(TopicAtStart::Unknown(format!("topic {} does not exist yet", conf.topic))),
        Ok(found) => protocol::kafka::partitions_match(&conf.topic, conf.partitions, found)
            .map(|()| TopicAtStart::Matches),
    }
}

/// How long a record enqueued `age` ago may still take to be produced by the gateway, or `None`
/// when it is too late: the gateway produces a record only within [`GATEWAY_HOLD_MAX`] of its
/// reservation (the timing rule with the sweeper, `protocol::timing`), and a record needs at
/// least the linger before its batch is sent.
pub fn produce_budget(age: Duration, linger: Duration, produce_timeout: Duration) -> Option<Duration> {
    let left = GATEWAY_HOLD_MAX.checked_sub(age)?;
    (left > linger).then(|| left.min(linger + produce_timeout))
}

/// Lets one log line through per [`LOG_INTERVAL`]; counts the ones it held back.
#[derive(Debug)]
pub struct Throttle {
    last_ms: AtomicI64,
    held: AtomicU64,
}

impl Default for Throttle {
    fn default() -> Self {
        Self { last_ms: AtomicI64::new(i64::MIN), held: AtomicU64::new(0) }
    }
}

impl Throttle {
    /// At `now_ms`: `Some(held back since the last line)` when a line may be logged now.
    pub fn tick(&self, now_ms: i64) -> Option<u64> {
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == i64::MIN || now_ms.saturating_sub(last) >= LOG_INTERVAL.as_millis() as i64;
        if due && self.last_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn now_ms() -> i64 {
    crate::checks::sold_out::now_ms() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_fresh_record_gets_linger_plus_timeout_and_a_late_one_is_left_to_the_sweeper() {
        assert_eq!(produce_budget(MS(0), MS(5), MS(1000)), Some(MS(1005)));
        assert_eq!(produce_budget(MS(2500), MS(5), MS(1000)), Some(MS(500)), "within the hold");
        assert_eq!(produce_budget(MS(2995), MS(5), MS(1000)), None, "no time left for the linger");
        assert_eq!(produce_budget(MS(4000), MS(5), MS(1000)), None);
        assert_eq!(produce_budget(MS(0), MS(500), MS(2500)), Some(GATEWAY_HOLD_MAX));
    }

    #[test]
    fn the_throttle_lets_one_line_per_interval_and_counts_the_rest() {
        let t = Throttle::default();
        assert_eq!(t.tick(1_000), Some(0));
        assert_eq!(t.tick(1_001), None);
        assert_eq!(t.tick(2_000), None);
        let next = 1_000 + LOG_INTERVAL.as_millis() as i64;
        assert_eq!(t.tick(next), Some(2), "two held back");
        assert_eq!(t.tick(next + 1), None);
    }

    #[tokio::test]
    async fn a_full_lane_drops_from_memory_and_counts_it() {
        // Nothing listens on port 1: the lanes never produce, so the one-record lane fills.
        let conf = QueueConf {
            connection: protocol::kafka::KafkaConnection::plaintext(vec!["127.0.0.1:1".into()]),
            topic: "t".into(),
            partitions: 1,
            batch_max: 10,
            linger: MS(5),
            produce_timeout: MS(100),
            capacity: 1,
        };
        let q = ReservationQueue::start(conf, &Handle::current());
        let sent = (0..50).filter(|_| q.enqueue("u", "{}".into(), "00".into())).count();
        assert!(sent < 50, "a one-record queue cannot take 50 at once");
        assert_eq!(q.stats().dropped_full.load(Ordering::Relaxed), 50 - sent as u64);
        assert_eq!((q.capacity(), q.depth()), (1, sent), "what was taken waits in the lane");
    }
}
