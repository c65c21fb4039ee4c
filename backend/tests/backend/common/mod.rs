//! Test support: a fresh database, a unique topic and a unique published campaign per test, on
//! the real servers of the local stack, each deleted again when the test's [`Env`] is dropped.
#![allow(dead_code)]

pub mod bin;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backend::campaign::publish;
use backend::conf::Conf;
use backend::redis::RedisScripts;
use backend::writer::{run_partition, WriterCtx};
use backend::{db, kafka, redis};
use fixtures::{cleanup, stack};
use protocol::record::Reservation;
use protocol::scripts::{ReserveCall, ReserveOutcome};
use protocol::signing::{Signer, RECORD_SIGNATURE_HEADER};
use rskafka::client::partition::{Compression, OffsetAt};
use rskafka::record::Record;
use sqlx::PgPool;
use tokio::sync::watch;

/// Gateway key used by the tests.
pub const GATEWAY_KEY: &[u8] = b"test-gateway-key-0123456789";
/// Payment key used by the tests.
pub const PAYMENT_KEY: &[u8] = b"test-payment-key-0123456789";

/// One isolated environment.
pub struct Env {
    pub pg_url: String,
    pub pool: PgPool,
    pub redis: fred::prelude::Client,
    pub scripts: RedisScripts,
    pub kafka: Arc<rskafka::client::Client>,
    pub topic: String,
    pub partitions: i32,
    pub campaign: String,
    pub dir: PathBuf,
    /// The campaign's hot-stock bucket count (1: none).
    pub buckets: u32,
    /// What it made on the stack, deleted when it is dropped (the pool's connections are ended).
    pub owned: (cleanup::Database, cleanup::Topic, cleanup::Campaign),
}

/// A campaign file's text.
pub fn campaign_toml(id: &str, stock: i64, limit: i64, pay_window_secs: i64) -> String {
    format!(
        "id = \"{id}\"\nsku = \"SKU-{id}\"\nstock = {stock}\nper_user_limit = {limit}\nprice_cents = 1999\n\
         starts_at = 2020-01-01T00:00:00Z\nends_at = 2099-01-01T00:00:00Z\npay_window_secs = {pay_window_secs}\n"
    )
}

/// A campaign file's text with `buckets` hot-stock buckets.
pub fn campaign_toml_buckets(id: &str, stock: i64, limit: i64, buckets: u32) -> String {
    format!("{}buckets = {buckets}\n", campaign_toml(id, stock, limit, 900))
}

impl Env {
    /// Order `id`'s status and payment reference.
    pub async fn order_status(&self, id: i64) -> (String, Option<String>) {
        sqlx::query_as("SELECT status, payment_ref FROM orders WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// The order writer's HTTP surface (result query, payment callback) on this env, on a free
    /// loopback port, signed with [`PAYMENT_KEY`]; returns its base URL.
    pub async fn serve_http(&self) -> String {
        let state = backend::http::state::AppState {
            pool: self.pool.clone(),
            payment: Arc::new(Signer::new(PAYMENT_KEY)),
            payment_max_skew_secs: 300,
            results: backend::http::state::ResultStore {
                pool: self.pool.clone(),
                redis: self.redis.clone(),
                buckets: Default::default(),
            },
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = backend::http::router(state);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        base
    }

    /// Fresh database (migrated), unique topic (`partitions`), unique campaign published with
    /// `stock` units and a per-user limit.
    pub async fn new(stock: i64, limit: i64, partitions: i32) -> Env {
        Self::with_buckets(stock, limit, partitions, 1).await
    }

    /// As [`Env::new`], the campaign split over `buckets` hot-stock buckets.
    pub async fn with_buckets(stock: i64, limit: i64, partitions: i32, buckets: u32) -> Env {
        let database = cleanup::Database::create().await.expect("PostgreSQL of the stack");
        let pg_url = database.url.clone();
        let pool = db::connect(&pg_url, 20).await.unwrap();
        db::migrate(&pool, &stack::workspace_root().join("sql")).await.unwrap();
        let redis = redis::connect(&stack::redis_url()).await.expect("Redis of the stack");
        let scripts = RedisScripts::load(&stack::workspace_root().join("lua")).unwrap();
        let kc = Arc::new(
            kafka::client(&stack::kafka_connection(), Duration::from_secs(10))
                .await
                .expect("Kafka of the stack"),
        );
        let owned_topic = cleanup::Topic::create(&kc, "t-", partitions).await.unwrap();
        let topic = owned_topic.name.clone();
        let owned_campaign = cleanup::Campaign::new("c-");
        let campaign = owned_campaign.to_string();
        let dir = std::env::temp_dir().join(stack::unique("ow-test-"));
        std::fs::create_dir_all(dir.join("campaigns")).unwrap();
        std::fs::write(
            dir.join("campaigns").join(format!("{campaign}.toml")),
            campaign_toml_buckets(&campaign, stock, limit, buckets),
        )
        .unwrap();
        let owned = (database, owned_topic, owned_campaign);
        let env =
            Env { pg_url, pool, redis, scripts, kafka: kc, topic, partitions, campaign, dir, buckets, owned };
        let out =
            publish::publish(&env.pool, &env.redis, &env.scripts, &env.dir.join("campaigns"), &env.campaign)
                .await
                .unwrap();
        assert!(matches!(out, publish::Published::Ready { .. }), "{out:?}");
        env
    }

    /// A configuration pointing at this environment.
    pub fn conf(&self, listen: std::net::SocketAddr) -> Conf {
        fixtures::order_writer::conf(fixtures::order_writer::Place {
            listen,
            postgres_url: &self.pg_url,
            campaigns_dir: &self.dir.join("campaigns"),
            topic: &self.topic,
            partitions: self.partitions,
            gateway_key: GATEWAY_KEY,
            payment_key: PAYMENT_KEY,
        })
    }

    /// Reserves through the real reservation script; returns the record bytes.
    pub async fn reserve(&self, user: &str, qty: i64) -> Vec<u8> {
        let rid = uuid::Uuid::now_v7().to_string();
        match self
            .scripts
            .shared
            .reserve(&self.redis, &self.bucket(), &ReserveCall::new(&rid, user, qty))
            .await
            .unwrap()
        {
            ReserveOutcome::Reserved { record, .. } => record.into_bytes(),
            other => panic!("reserve for {user}: {other:?}"),
        }
    }

    /// What a reconciliation of this environment reads and writes, with sweep age `sweep_age`.
    pub fn stores(&self, sweep_age: Duration) -> backend::workers::reconcile::Stores<'_> {
        backend::workers::reconcile::Stores {
            pool: &self.pool,
            redis: &self.redis,
            scripts: &self.scripts,
            topic: Some(backend::workers::reconcile::Topic {
                kafka: &self.kafka,
                name: &self.topic,
                partitions: self.partitions,
            }),
            sweep_age,
            between_reads: None,
        }
    }

    /// Rewrites the outbox record of `request_id` as if it had been reserved `ago` earlier by
    /// Redis' clock.
    pub async fn age_reservation(&self, request_id: &str, ago: Duration) {
        use fred::prelude::*;
        let rec: String = self.redis.hget(&self.keys().outbox, request_id).await.unwrap();
        let mut r = Reservation::from_json(rec.as_bytes()).unwrap();
        r.reserved_at_ms -= ago.as_millis() as i64;
        let _: i64 = self
            .redis
            .hset(&self.keys().outbox, (request_id, serde_json::to_string(&r).unwrap()))
            .await
            .unwrap();
    }

    /// Produces values to a partition, each signed with [`GATEWAY_KEY`] as the gateway does.
    pub async fn produce(&self, partition: i32, values: Vec<Vec<u8>>) {
        self.produce_signed_by(partition, values, Some(&Signer::new(GATEWAY_KEY))).await;
    }

    /// Produces values to a partition without a signature header.
    pub async fn produce_unsigned(&self, partition: i32, values: Vec<Vec<u8>>) {
        self.produce_signed_by(partition, values, None).await;
    }

    /// Produces values to a partition, each with the signature header of `signer` (none
    /// without one).
    pub async fn produce_signed_by(&self, partition: i32, values: Vec<Vec<u8>>, signer: Option<&Signer>) {
        let raw = values
            .into_iter()
            .map(|v| {
                let sig = signer.map(|s| s.sign(&v).into_bytes());
                (v, sig)
            })
            .collect();
        self.produce_raw(partition, raw).await;
    }

    /// Produces (value, signature header) pairs to a partition as given, in one produce request.
    pub async fn produce_raw(&self, partition: i32, records: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        let pc =
            kafka::partition(&self.kafka, &self.topic, partition, Duration::from_secs(10)).await.unwrap();
        let records = records
            .into_iter()
            .map(|(v, sig)| Record {
                key: None,
                headers: sig.map(|s| [(RECORD_SIGNATURE_HEADER.to_string(), s)].into()).unwrap_or_default(),
                value: Some(v),
                timestamp: chrono::Utc::now(),
            })
            .collect();
        pc.produce(records, Compression::NoCompression).await.unwrap();
    }

    /// The dead letters of this environment's topic: (partition, offset, payload, error), in
    /// offset order.
    pub async fn dead_letters(&self) -> Vec<(i32, i64, Vec<u8>, String)> {
        sqlx::query_as(
            "SELECT partition, \"offset\", payload, error FROM dead_letters WHERE topic = $1 \
             ORDER BY partition, \"offset\"",
        )
        .bind(&self.topic)
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    /// Produces reservation records to their users' partitions, signed.
    pub async fn produce_records(&self, values: Vec<Vec<u8>>) {
        for v in values {
            let r = Reservation::from_json(&v).unwrap();
            self.produce(kafka::partition_for(&r.user, self.partitions), vec![v]).await;
        }
    }

    /// The end offset of every partition.
    pub async fn end_offsets(&self) -> Vec<i64> {
        let mut out = Vec::new();
        for p in 0..self.partitions {
            let pc = kafka::partition(&self.kafka, &self.topic, p, Duration::from_secs(10)).await.unwrap();
            out.push(pc.get_offset(OffsetAt::Latest).await.unwrap());
        }
        out
    }

    /// Runs the writers until every partition's committed offset reaches its current end.
    pub async fn drain(&self, batch: usize) {
        let ends = self.end_offsets().await;
        let (tx, _) = watch::channel(false);
        let ctx = WriterCtx {
            pool: self.pool.clone(),
            redis: self.redis.clone(),
            scripts: self.scripts.clone(),
            kafka: self.kafka.clone(),
            topic: self.topic.clone(),
            signer: Arc::new(Signer::new(GATEWAY_KEY)),
            cfg: fixtures::order_writer::writer_conf(batch),
            metrics: Arc::new(backend::admin::metrics::WriterMetrics::new()),
        };
        let tasks: Vec<_> = (0..self.partitions)
            .map(|p| tokio::spawn(run_partition(ctx.clone(), p, tx.subscribe())))
            .collect();
        self.wait_offsets(&ends).await;
        tx.send(true).unwrap();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    }

    /// Waits (bounded) until the committed offsets reach `ends`.
    pub async fn wait_offsets(&self, ends: &[i64]) {
        let limit = Instant::now() + Duration::from_secs(60);
        loop {
            let mut all = true;
            for (p, end) in ends.iter().enumerate() {
                let at = backend::writer::stored_offset(&self.pool, &self.topic, p as i32).await.unwrap();
                if at < *end {
                    all = false;
                }
            }
            if all {
                return;
            }
            assert!(Instant::now() < limit, "writers did not reach {ends:?} within 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A count from PostgreSQL.
    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql).bind(&self.campaign).fetch_one(&self.pool).await.unwrap()
    }

    /// A producer to this test's topic, signing with [`GATEWAY_KEY`] as the gateway does.
    pub fn producer(&self) -> backend::kafka::producer::Producer {
        backend::kafka::producer::Producer::start(
            self.kafka.clone(),
            &self.topic,
            self.partitions,
            100,
            Duration::from_secs(3),
            Arc::new(Signer::new(GATEWAY_KEY)),
        )
    }

    /// The campaign's only bucket (for campaigns without buckets).
    pub fn bucket(&self) -> protocol::keys::Bucket {
        protocol::keys::Bucket::single(&self.campaign)
    }

    /// `user`'s home bucket.
    pub fn home(&self, user: &str) -> protocol::keys::Bucket {
        protocol::keys::Bucket::of_user(&self.campaign, user, self.buckets)
    }

    /// Every bucket of the campaign.
    pub fn all_buckets(&self) -> Vec<protocol::keys::Bucket> {
        protocol::keys::Bucket::all(&self.campaign, self.buckets)
    }

    /// Reserves in `user`'s home bucket (as the gateway does); returns the record bytes.
    pub async fn reserve_home(&self, user: &str, qty: i64) -> Vec<u8> {
        let rid = uuid::Uuid::now_v7().to_string();
        match self
            .scripts
            .shared
            .reserve(&self.redis, &self.home(user), &ReserveCall::new(&rid, user, qty))
            .await
            .unwrap()
        {
            ReserveOutcome::Reserved { record, .. } => record.into_bytes(),
            other => panic!("reserve for {user} in its home bucket: {other:?}"),
        }
    }

    /// Each bucket's stock, in bucket order.
    pub async fn bucket_stocks(&self) -> Vec<i64> {
        use fred::prelude::*;
        let mut out = Vec::new();
        for b in self.all_buckets() {
            let v: Option<i64> = self.redis.get(&b.keys.stock).await.unwrap();
            out.push(v.unwrap_or(0));
        }
        out
    }

    pub fn keys(&self) -> protocol::keys::CampaignKeys {
        protocol::keys::CampaignKeys::new(&self.campaign)
    }

    /// Remaining Redis stock.
    pub async fn redis_stock(&self) -> i64 {
        use fred::prelude::*;
        let v: Option<i64> = self.redis.get(&self.keys().stock).await.unwrap();
        v.unwrap_or(0)
    }

    /// A Redis stats counter.
    pub async fn stat(&self, field: &str) -> i64 {
        use fred::prelude::*;
        let v: Option<i64> = self.redis.hget(&self.keys().stats, field).await.unwrap();
        v.unwrap_or(0)
    }

    /// Number of outbox entries.
    pub async fn outbox_len(&self) -> i64 {
        use fred::prelude::*;
        self.redis.hlen(&self.keys().outbox).await.unwrap()
    }
}

/// Subscribes to the replenish channel; `heard` waits (bounded) for a message naming `campaign`.
/// A subscriber client that resubscribes after a reconnect (a loaded machine can time one out).
pub struct Replenish {
    messages: tokio::sync::broadcast::Receiver<fred::types::Message>,
    _client: fred::clients::SubscriberClient,
    _resubscribe: tokio::task::JoinHandle<()>,
}

impl Replenish {
    /// Subscribed when it returns.
    pub async fn listen() -> Replenish {
        use fred::prelude::*;
        let config = Config::from_url(&fixtures::stack::redis_url()).unwrap();
        // Every test of the binary publishes on the same channel (a closer pass sends one message
        // per release): fred's default of 32 buffered messages let a burst of other campaigns'
        // messages push this campaign's out (`Lagged`), and the test waited in vain.
        let client = Builder::from_config(config)
            .with_performance_config(|p| p.broadcast_channel_capacity = 1 << 16)
            .set_policy(ReconnectPolicy::new_constant(0, 100))
            .build_subscriber_client()
            .unwrap();
        let messages = client.message_rx();
        client.init().await.unwrap();
        let resubscribe = client.manage_subscriptions();
        client.subscribe(protocol::keys::REPLENISH_CHANNEL).await.unwrap();
        Replenish { messages, _client: client, _resubscribe: resubscribe }
    }

    /// Whether a message for `campaign` arrives within `within` (other campaigns' are skipped).
    pub async fn heard(&mut self, campaign: &str, within: Duration) -> bool {
        tokio::time::timeout(within, async {
            loop {
                match self.messages.recv().await {
                    Ok(m) if m.value.as_string().as_deref() == Some(campaign) => return,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(e) => panic!("replenish subscription: {e}"),
                }
            }
        })
        .await
        .is_ok()
    }
}
