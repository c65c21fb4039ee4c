//! The order events: every state change of an order (`order.created`, `order.paid`,
//! `order.closed`) produced to a Kafka topic of its own (`[events] topic`) for the shop's payment, marketing and
//! notification services (the seed: 下游支付、营销和通知通过独立事件异步处理).
//!
//! Statement-level triggers on `orders` write each change into the outbox table `order_events`
//! in the transaction of the change (`sql/0006_order_events.sql`): the writer's batch, the payment
//! callback and the close worker need no code of their own, and a change that rolls back leaves
//! no event. The relay here produces the outbox in id order and marks what the broker
//! acknowledged: **at least once** (a relay that dies between the produce and the mark produces
//! those events again; consumers drop duplicates by `idempotency_key`), **in order per order**
//! (key = order id, so one order's events share a partition, produced in id order). One relay
//! runs at a time across the writers of a database schema: it holds a PostgreSQL advisory lock on
//! its own connection, and another writer's relay takes over within [`TAKE_OVER`] of its death.
//!
//! The event (schema [`SCHEMA`], JSON): `schema`, `event_id` (the outbox id, rising), `type`,
//! `idempotency_key` (`<order_id>:<created|paid|closed>`: each happens once per order), `at`,
//! and the order as the change left it: `order_id`, `request_id`, `campaign_id`, `user_id`,
//! `sku`, `qty`, `amount_cents`, `status`, `reserved_at`, `created_at`, `pay_by`, `paid_at`,
//! `payment_ref`, `closed_at`. New fields may be added within version 1; a change of meaning is a
//! new version.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rskafka::client::partition::Compression;
use rskafka::client::Client;
use rskafka::record::Record;
use sqlx::{PgConnection, PgPool};
use tokio::sync::watch;

pub use crate::conf::{default_topic, EventsConf};
use crate::kafka;

/// The events' schema name and version, in every event.
pub const SCHEMA: &str = "seckill.order-event/1";

/// The Kafka header carrying the event's idempotency key (also in the JSON).
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// Most events in one pass of the relay.
pub const BATCH: i64 = 1000;

/// How long the relay rests when the outbox is empty.
pub const IDLE: Duration = Duration::from_millis(100);

/// How often a writer whose relay is not the running one tries to become it.
pub const TAKE_OVER: Duration = Duration::from_secs(1);

/// How long a produced event stays in the outbox (for inspection), then is deleted.
pub const KEEP: Duration = Duration::from_secs(24 * 3600);

/// Creates the events topic if it is missing, and checks its partition count (events are
/// hashed by order id over it).
pub async fn ensure_topic(
    client: &Client,
    conf: &EventsConf,
    kafka: &crate::conf::KafkaConf,
) -> anyhow::Result<()> {
    kafka::create_topic(client, &conf.topic, conf.partitions, kafka.replication_factor).await?;
    let found = protocol::kafka::topic_partitions(client, &conf.topic, kafka.produce_timeout)
        .await
        .map_err(|e| anyhow::anyhow!("reading the metadata of topic {}: {e}", conf.topic))?;
    protocol::kafka::partitions_match(&conf.topic, conf.partitions, found).map_err(anyhow::Error::msg)
}

/// The relay: the outbox of `pool`'s schema to `topic`.
#[derive(Clone)]
pub struct Relay {
    /// The writer's pool (the relay holds one of its connections while it runs).
    pub pool: PgPool,
    /// The Kafka client.
    pub kafka: Arc<Client>,
    /// Where the events go.
    pub conf: EventsConf,
    /// Deadline of one produce.
    pub produce_timeout: Duration,
}

/// One outbox row, ready to produce.
struct Pending {
    id: i64,
    order_id: i64,
    idempotency_key: String,
    json: String,
}

impl Relay {
    /// Produces the oldest unproduced events (at most `max`) on `conn` and marks those the
    /// broker acknowledged; returns how many were marked. A partition whose produce fails marks
    /// none of its events (they go again, in order, on the next pass) and is the error returned
    /// after the others are marked.
    pub async fn pass(&self, conn: &mut PgConnection, max: i64) -> anyhow::Result<usize> {
        let pending = read_pending(conn, max).await?;
        let mut by_partition: BTreeMap<i32, Vec<Pending>> = BTreeMap::new();
        for p in pending {
            let partition = kafka::partition_for(&p.order_id.to_string(), self.conf.partitions);
            by_partition.entry(partition).or_default().push(p);
        }
        let (mut done, mut failed) = (Vec::new(), None);
        for (partition, events) in by_partition {
            match self.produce(partition, &events).await {
                Ok(()) => done.extend(events.iter().map(|e| e.id)),
                Err(e) => failed = Some(e),
            }
        }
        sqlx::query("UPDATE order_events SET produced_at = now() WHERE id = ANY($1)")
            .bind(&done)
            .execute(&mut *conn)
            .await
            .context("marking events produced")?;
        match failed {
            Some(e) => Err(e.context(format!("{} events produced, the rest wait", done.len()))),
            None => Ok(done.len()),
        }
    }

    async fn produce(&self, partition: i32, events: &[Pending]) -> anyhow::Result<()> {
        let topic = &self.conf.topic;
        let pc = kafka::partition(&self.kafka, topic, partition, self.produce_timeout).await?;
        let records = events.iter().map(record).collect();
        tokio::time::timeout(self.produce_timeout, pc.produce(records, Compression::NoCompression))
            .await
            .map_err(|_| {
                anyhow::anyhow!("{topic}/{partition}: no acknowledgement within {:?}", self.produce_timeout)
            })?
            .with_context(|| format!("producing events to {topic}/{partition}"))?;
        Ok(())
    }
}

fn record(e: &Pending) -> Record {
    Record {
        key: Some(e.order_id.to_string().into_bytes()),
        value: Some(e.json.clone().into_bytes()),
        headers: BTreeMap::from([(IDEMPOTENCY_HEADER.to_string(), e.idempotency_key.clone().into_bytes())]),
        timestamp: chrono::Utc::now(),
    }
}

/// The oldest unproduced events, each event's JSON built from its row and its order's. The
/// fields a change sets are never changed again, so the order "as the change left it" is its
/// row now with the later changes' fields left out: a `created` event says PENDING_PAYMENT and
/// no payment or close, a `paid` one no close.
async fn read_pending(conn: &mut PgConnection, max: i64) -> anyhow::Result<Vec<Pending>> {
    let rows: Vec<(i64, i64, String, String)> = sqlx::query_as(
        "SELECT e.id, e.order_id, e.order_id || ':' || e.kind, jsonb_build_object(
                  'schema', $1::text, 'event_id', e.id, 'type', 'order.' || e.kind,
                  'idempotency_key', e.order_id || ':' || e.kind, 'at', e.at,
                  'order_id', o.id, 'request_id', o.request_id, 'campaign_id', o.campaign_id,
                  'user_id', o.user_id, 'sku', o.sku, 'qty', o.qty, 'amount_cents', o.amount_cents,
                  'status', CASE e.kind WHEN 'created' THEN 'PENDING_PAYMENT' ELSE upper(e.kind) END,
                  'reserved_at', o.reserved_at, 'created_at', o.created_at, 'pay_by', o.pay_by,
                  'paid_at', CASE WHEN e.kind = 'paid' THEN o.paid_at END,
                  'payment_ref', CASE WHEN e.kind = 'paid' THEN o.payment_ref END,
                  'closed_at', CASE WHEN e.kind = 'closed' THEN o.closed_at END)::text
           FROM order_events e JOIN orders o ON o.id = e.order_id
          WHERE e.produced_at IS NULL ORDER BY e.id LIMIT $2",
    )
    .bind(SCHEMA)
    .bind(max)
    .fetch_all(&mut *conn)
    .await
    .context("reading the outbox of order events")?;
    Ok(rows
        .into_iter()
        .map(|(id, order_id, idempotency_key, json)| Pending { id, order_id, idempotency_key, json })
        .collect())
}

/// Takes the relay's advisory lock (one per schema) on `conn` if no one holds it.
async fn try_lead(conn: &mut PgConnection) -> anyhow::Result<bool> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext(current_schema() || '/order-events'))")
        .fetch_one(&mut *conn)
        .await
        .context("taking the order events relay's lock")
}

/// Deletes events produced more than [`KEEP`] ago, a bounded number at a time.
async fn forget_old(conn: &mut PgConnection) -> anyhow::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM order_events WHERE id IN (SELECT id FROM order_events \
         WHERE produced_at < now() - make_interval(secs => $1) ORDER BY id LIMIT 10000)",
    )
    .bind(KEEP.as_secs_f64())
    .execute(&mut *conn)
    .await
    .context("deleting old produced events")?;
    Ok(done.rows_affected())
}

/// Runs the relay until `shutdown`: becomes the one relay of the schema (or waits to), then
/// produces the outbox as it fills. Errors (PostgreSQL or Kafka away) are logged and retried;
/// nothing is lost, events only wait.
pub async fn run(relay: Relay, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = IDLE;
    while !*shutdown.borrow() {
        let rest = match lead(&relay, &mut shutdown).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "order events relay: retrying");
                backoff = (backoff * 2).min(Duration::from_secs(5));
                backoff
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(rest) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// One leadership: waits for the lock, then relays until shutdown (`Ok`) or an error.
async fn lead(relay: &Relay, shutdown: &mut watch::Receiver<bool>) -> anyhow::Result<()> {
    // A connection of its own, closed (the lock with it) when this leadership ends: back in the
    // pool, it would keep the lock from every other connection.
    let mut conn = relay.pool.acquire().await.context("a connection for the events relay")?.detach();
    while !try_lead(&mut conn).await? {
        tokio::select! {
            _ = tokio::time::sleep(TAKE_OVER) => {}
            _ = shutdown.changed() => return Ok(()),
        }
    }
    tracing::info!(topic = relay.conf.topic, "order events relay: running");
    let mut last_forget = tokio::time::Instant::now();
    while !*shutdown.borrow() {
        let n = relay.pass(&mut conn, BATCH).await?;
        if last_forget.elapsed() > Duration::from_secs(60) {
            forget_old(&mut conn).await?;
            last_forget = tokio::time::Instant::now();
        }
        if n < BATCH as usize {
            tokio::select! {
                _ = tokio::time::sleep(IDLE) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
    Ok(())
}
