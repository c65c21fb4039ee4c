//! A sale followed to its orders, on the stack's Redis, Kafka and PostgreSQL with the real order
//! writer in this process: the gateway answers QUEUED alone, produces its records to Kafka in the
//! background, and when it cannot (Kafka down, the process killed) the order writer's sweeper
//! produces them from the outbox. Every QUEUED answer becomes an order, and nothing else does.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backend::campaign::publish::Published;
use backend::conf::Conf;
use backend::redis::RedisScripts;
use fred::prelude::*;
use protocol::keys::CampaignKeys;
use protocol::record::{partition_for, Reservation};
use protocol::signing::{Signer, RECORD_SIGNATURE_HEADER};
use rskafka::client::partition::OffsetAt;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::support::*;

pub(crate) const PARTITIONS: i32 = 4;

/// One sale's world: a fresh database (migrated), a topic of its own, a campaign of `stock`
/// (limit 1) published from its file, and the same file in the gateway's conf.
pub(crate) struct Sale {
    pub(crate) pg_url: String,
    pub(crate) pool: PgPool,
    /// The Redis of the sale (the stack's, or its Redis Cluster: `cluster.rs`).
    pub(crate) redis_url: String,
    pub(crate) redis: Client,
    kafka: Arc<rskafka::client::Client>,
    pub(crate) topic: String,
    pub(crate) campaign: String,
    pub(crate) dir: PathBuf,
    /// Its database, topic and campaign keys, deleted when it is dropped.
    _owned: (fixtures::cleanup::Database, fixtures::cleanup::Topic, fixtures::cleanup::Campaign),
}

impl Drop for Sale {
    fn drop(&mut self) {
        remove_unless_failed(&self.dir);
    }
}

/// The order writer running in this process, stopped when dropped.
pub(crate) struct Writer {
    shutdown: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Writer {
    pub(crate) async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl Sale {
    pub(crate) async fn new(stock: i64) -> Sale {
        Sale::on(&fixtures::stack::redis_url(), stock).await
    }

    /// The same on the Redis at `redis_url`.
    pub(crate) async fn on(redis_url: &str, stock: i64) -> Sale {
        let root = fixtures::stack::workspace_root();
        let database = fixtures::cleanup::Database::create().await.expect("PostgreSQL of the stack");
        let pg_url = database.url.clone();
        let pool = backend::db::connect(&pg_url, 4).await.unwrap();
        backend::db::migrate(&pool, &root.join("sql")).await.unwrap();
        let redis = client(redis_url).await.expect("Redis of the stack");
        let kafka = Arc::new(
            backend::kafka::client(&fixtures::stack::kafka_connection(), Duration::from_secs(10))
                .await
                .expect("Kafka of the stack"),
        );
        let owned_topic = fixtures::cleanup::Topic::create(&kafka, "gw-t-", PARTITIONS).await.unwrap();
        let topic = owned_topic.name.clone();
        let owned_campaign = fixtures::cleanup::Campaign::on("gw", redis_url);
        let campaign = owned_campaign.to_string();
        let dir = std::env::temp_dir().join(fixtures::stack::unique("gw-sale-"));
        std::fs::create_dir_all(dir.join("campaigns")).unwrap();
        let text = campaign_toml(&campaign, "[limits]\nmax_inflight = 5000")
            .replace("stock = 100", &format!("stock = {stock}"));
        std::fs::write(dir.join("campaigns").join(format!("{campaign}.toml")), text).unwrap();
        let scripts = RedisScripts::load(&root.join("lua")).unwrap();
        let out =
            backend::campaign::publish::publish(&pool, &redis, &scripts, &dir.join("campaigns"), &campaign)
                .await
                .unwrap();
        assert!(matches!(out, Published::Ready { .. }), "{out:?}");
        let _owned = (database, owned_topic, owned_campaign);
        Sale { pg_url, pool, redis_url: redis_url.into(), redis, kafka, topic, campaign, dir, _owned }
    }

    /// A gateway conf selling this campaign, producing to this topic at `brokers`.
    pub(crate) fn gateway_conf(&self, brokers: &str, kafka_extra: &str) -> GatewayConf {
        let text =
            std::fs::read_to_string(self.dir.join("campaigns").join(format!("{}.toml", self.campaign)));
        let mut conf = GatewayConf::new(&self.redis_url, "127.0.0.1:1", &self.campaign, "");
        conf.campaigns = vec![(self.campaign.clone(), text.unwrap())];
        // The longest reservation bound the conf allows: three bursts of 2,000 and an order writer
        // share two cores with Redis, and a slow answer would be undone (SERVICE_DEGRADED).
        conf.redis_timeout_ms = 1000;
        conf.kafka_brokers = vec![brokers.into()];
        conf.kafka_extra = format!("topic = \"{}\"\npartitions = {PARTITIONS}\n{kafka_extra}", self.topic);
        conf
    }

    /// Starts the order writer on this sale (the stack's broker) with `sweep_age`.
    async fn start_writer(&self, sweep_age: Duration) -> Writer {
        self.start_writer_with(sweep_age, None).await
    }

    /// The same, with its admin listener on `admin` when given.
    pub(crate) async fn start_writer_with(&self, sweep_age: Duration, admin: Option<u16>) -> Writer {
        self.start_writer_at(sweep_age, admin, free_port()).await
    }

    /// The same, answering result queries on `port` (a gateway's `[order_writer]` upstream).
    pub(crate) async fn start_writer_at(&self, sweep_age: Duration, admin: Option<u16>, port: u16) -> Writer {
        self.start_writer_as(sweep_age, admin, port, |c| c).await
    }

    /// The same, its conf changed by `change` last.
    pub(crate) async fn start_writer_as(
        &self,
        sweep_age: Duration,
        admin: Option<u16>,
        port: u16,
        change: impl FnOnce(Conf) -> Conf,
    ) -> Writer {
        let base = fixtures::order_writer::conf(fixtures::order_writer::Place {
            listen: format!("127.0.0.1:{port}").parse().unwrap(),
            postgres_url: &self.pg_url,
            campaigns_dir: &self.dir.join("campaigns"),
            topic: &self.topic,
            partitions: PARTITIONS,
            gateway_key: KEY.as_bytes(),
            payment_key: b"test-payment-key-0123456789",
        });
        let admin_listen = admin.map(|port| format!("127.0.0.1:{port}").parse().unwrap());
        let cfg = Conf {
            redis_url: self.redis_url.clone(),
            sweep_age,
            close_interval: Duration::from_secs(60),
            admin_listen,
            ..base
        };
        let cfg = change(cfg);
        let (shutdown, _) = watch::channel(false);
        let task = tokio::spawn(backend::serve::serve(cfg, shutdown.clone(), false));
        Writer { shutdown, task: Some(task) }
    }

    /// The request ids of this campaign's orders.
    pub(crate) async fn orders(&self) -> HashSet<String> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT request_id FROM orders WHERE campaign_id = $1")
            .bind(&self.campaign)
            .fetch_all(&self.pool)
            .await
            .unwrap();
        ids.into_iter().collect()
    }

    /// Waits (at most 90 s) until the orders are exactly `expected`; returns what they are.
    pub(crate) async fn wait_orders(&self, expected: &HashSet<String>) -> HashSet<String> {
        let start = Instant::now();
        loop {
            let orders = self.orders().await;
            if &orders == expected || start.elapsed() > Duration::from_secs(90) {
                return orders;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every record in the topic, read until the end offsets are `count` in all (at most 30 s).
    async fn records_in_topic(&self, count: usize) -> Vec<(i32, rskafka::record::Record)> {
        let start = Instant::now();
        loop {
            let mut total = 0;
            for p in 0..PARTITIONS {
                let pc = self.partition(p).await;
                total += pc.get_offset(OffsetAt::Latest).await.unwrap() as usize;
            }
            if total >= count || start.elapsed() > Duration::from_secs(30) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut out = Vec::new();
        for p in 0..PARTITIONS {
            let pc = self.partition(p).await;
            let end = pc.get_offset(OffsetAt::Latest).await.unwrap();
            let mut at = 0;
            for _ in 0..1000 {
                if at >= end {
                    break;
                }
                let (records, _) = pc.fetch_records(at, 1..1_000_000, 100).await.unwrap();
                for r in records {
                    at = r.offset + 1;
                    out.push((p, r.record));
                }
            }
        }
        out
    }

    async fn partition(&self, p: i32) -> rskafka::client::partition::PartitionClient {
        backend::kafka::partition(&self.kafka, &self.topic, p, Duration::from_secs(10)).await.unwrap()
    }

    /// The outbox's request ids.
    pub(crate) async fn outbox(&self) -> HashSet<String> {
        let ids: Vec<String> = self.redis.hkeys(CampaignKeys::new(&self.campaign).outbox).await.unwrap();
        ids.into_iter().collect()
    }
}

/// 2,000 order requests from 500 users at once; returns the request ids answered QUEUED, after
/// checking that every other answer is SOLD_OUT or LIMIT_REACHED and no user got two. Under the
/// load of a shared machine an order may also be answered SERVICE_DEGRADED (its answer did
/// not come within the conf's 1 s: undone, nothing reserved) or TRY_LATER (past the bucket's
/// adaptive limit, unsent): both reserve nothing, which the callers' checks of the stock, the
/// outbox and the topic prove.
async fn burst(gw: &Gateway, campaign: &str) -> HashSet<String> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(2000).build().unwrap();
    let requests = (0..2000).map(|i| {
        let (http, gw) = (&http, gw);
        async move {
            let user = format!("user-{}", i % 500);
            let (status, body) = order(http, gw, campaign, &user).await;
            (user, status, body)
        }
    });
    let mut queued = Vec::new();
    for (user, status, body) in futures::future::join_all(requests).await {
        match body["code"].as_str() {
            Some("QUEUED") => {
                assert_eq!(status, 202);
                let id = body["request_id"].as_str().unwrap().to_string();
                assert_eq!(body["poll_url"], format!("/seckill/{campaign}/result/{id}"));
                queued.push((user, id));
            }
            Some("SOLD_OUT") => assert_eq!(status, 410),
            Some("LIMIT_REACHED") => assert_eq!(status, 409),
            Some("SERVICE_DEGRADED") => assert_eq!(status, 503),
            Some("TRY_LATER") => assert_eq!(status, 429),
            other => panic!("unexpected answer {status} {other:?}: {body}"),
        }
    }
    let users: HashSet<_> = queued.iter().map(|(u, _)| u.clone()).collect();
    assert_eq!(users.len(), queued.len(), "no user bought twice");
    queued.into_iter().map(|(_, id)| id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateway_answers_queued_alone_and_produces_every_record_signed() {
    let sale = Sale::new(100).await;
    let gw = Gateway::start(&sale.gateway_conf(&fixtures::stack::kafka_broker(), "")).await;
    let queued = burst(&gw, &sale.campaign).await;
    assert_eq!(queued.len(), 100, "exactly the stock is sold");
    let stock: i64 = sale.redis.get(CampaignKeys::new(&sale.campaign).stock).await.unwrap();
    assert_eq!(stock, 0);
    assert_eq!(sale.outbox().await, queued, "the outbox holds exactly the 100 (no order writer yet)");

    // The gateway produced each record itself: key = user, on the user's partition, the value as
    // the script wrote it, signed with the gateway's key.
    let signer = Signer::new(KEY.as_bytes());
    let records = sale.records_in_topic(100).await;
    let mut produced = HashSet::new();
    for (p, record) in &records {
        let value = record.value.as_deref().unwrap();
        let r = Reservation::from_json(value).unwrap();
        assert_eq!(record.key.as_deref(), Some(r.user.as_bytes()));
        assert_eq!(*p, partition_for(&r.user, PARTITIONS), "{r:?}");
        let sig = std::str::from_utf8(&record.headers[RECORD_SIGNATURE_HEADER]).unwrap();
        signer.verify(value, sig).expect("the gateway's signature verifies");
        produced.insert(r.request_id);
    }
    assert_eq!(produced, queued, "the topic holds exactly the 100");

    // The order writer, started only now and with a sweep age past the test, writes them all.
    let writer = sale.start_writer(Duration::from_secs(600)).await;
    assert_eq!(sale.wait_orders(&queued).await, queued, "exactly the QUEUED requests are orders");
    writer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweeper_waits_for_a_writer_behind_its_topic_instead_of_producing_copies() {
    let sale = Sale::new(100).await;
    let gw = Gateway::start(&sale.gateway_conf(&fixtures::stack::kafka_broker(), "")).await;
    let queued = burst(&gw, &sale.campaign).await;
    assert_eq!(sale.records_in_topic(100).await.len(), 100, "the gateway produced every record");
    // Every outbox entry is now older than a 1 s sweep age, and every one is a record waiting in
    // Kafka: a sweeper that did not wait for the writer would produce them all again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let writer = sale.start_writer(Duration::from_secs(1)).await;
    assert_eq!(sale.wait_orders(&queued).await, queued);
    tokio::time::sleep(Duration::from_secs(1)).await; // five more sweep intervals
    writer.stop().await;
    let topic = sale.records_in_topic(0).await;
    assert_eq!(topic.len(), 100, "the sweeper produced no copy of a record waiting in the topic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_down_during_the_sale_still_sells_exactly_the_stock_and_the_sweeper_brings_it() {
    let sale = Sale::new(100).await;
    let closed = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start(&sale.gateway_conf(&closed, "")).await;
    let queued = burst(&gw, &sale.campaign).await;
    assert_eq!(queued.len(), 100, "exactly the stock is sold with Kafka down");
    assert_eq!(sale.outbox().await, queued);
    let logged = eventually(Duration::from_secs(5), || async {
        gw.log().lines().any(|l| l.contains("kafka not reachable") && l.contains(&closed))
    })
    .await;
    assert!(logged, "the unreachable broker is named in the log:\n{}", gw.log());
    assert!(sale.records_in_topic(0).await.is_empty(), "nothing reached the topic");

    let writer = sale.start_writer(Duration::from_secs(1)).await;
    assert_eq!(sale.wait_orders(&queued).await, queued, "the sweeper brought every QUEUED request");
    writer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_before_its_queue_is_flushed_loses_no_queued_answer() {
    let sale = Sale::new(100).await;
    let mut gw =
        Gateway::start(&sale.gateway_conf(&fixtures::stack::kafka_broker(), "linger_ms = 500")).await;
    let queued = burst(&gw, &sale.campaign).await;
    gw.kill();
    assert_eq!(queued.len(), 100);

    let writer = sale.start_writer(Duration::from_secs(1)).await;
    assert_eq!(sale.wait_orders(&queued).await, queued, "every QUEUED answer became an order");
    writer.stop().await;
}

/// A loopback TCP relay to `target` on `port`, opened only when called: a broker address that
/// cannot be reached until the test says so.
fn open_relay(port: u16, target: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else { return };
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_unreachable_at_start_is_reached_on_its_own_once_it_is_up() {
    let sale = Sale::new(100).await;
    let port = free_port();
    let gw = Gateway::start(&sale.gateway_conf(&format!("127.0.0.1:{port}"), "")).await;
    let http = reqwest::Client::new();
    let (status, body) = order(&http, &gw, &sale.campaign, "early-user").await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "sells with no broker: {body}");
    let early = body["request_id"].as_str().unwrap().to_string();
    let logged = eventually(Duration::from_secs(5), || async {
        gw.log().lines().any(|l| l.contains("kafka not reachable") && l.contains(&port.to_string()))
    })
    .await;
    assert!(logged, "the unreachable broker is named in the log:\n{}", gw.log());

    // The broker comes up at that address; no restart of the gateway. Orders go on, one a
    // second, until the gateway's own lanes have produced one of them (bounded: 30 orders).
    let relay = open_relay(port, fixtures::stack::kafka_broker());
    let mut later = HashSet::new();
    let mut in_topic = HashSet::new();
    for i in 0..30 {
        let (status, body) = order(&http, &gw, &sale.campaign, &format!("later-user-{i}")).await;
        assert_eq!(status, 202, "{body}");
        later.insert(body["request_id"].as_str().unwrap().to_string());
        tokio::time::sleep(Duration::from_secs(1)).await;
        in_topic = sale
            .records_in_topic(0)
            .await
            .into_iter()
            .map(|(_, r)| Reservation::from_json(&r.value.unwrap()).unwrap().request_id)
            .collect();
        if !in_topic.is_empty() {
            break;
        }
    }
    relay.abort();
    assert!(!in_topic.is_empty(), "the gateway reconnected and produced on its own:\n{}", gw.log());
    assert!(in_topic.is_subset(&later), "only orders after the broker came up were produced");
    assert!(!in_topic.contains(&early), "the early record was left to the sweeper");
    assert!(sale.outbox().await.contains(&early), "and it is still in the outbox");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_another_partition_count_stops_the_gateway_at_start() {
    let sale = Sale::new(10).await;
    let mut conf = sale.gateway_conf(&fixtures::stack::kafka_broker(), "");
    conf.kafka_extra = format!("topic = \"{}\"\npartitions = {}\n", sale.topic, PARTITIONS * 2);
    let dir = temp_dir("gw-parts-");
    let file = write_conf(&dir, &conf, free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
        .arg("--conf")
        .arg(&file)
        .arg("--lua-dir")
        .arg(protocol::scripts::default_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = eventually(Duration::from_secs(20), || {
        let done = child.try_wait().unwrap().is_some();
        async move { done }
    })
    .await;
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(exited && !out.status.success(), "the gateway must not start: {err}");
    let want = format!("has {PARTITIONS} partitions but kafka.partitions = {}", PARTITIONS * 2);
    assert!(err.contains(&want) && err.contains("server.toml"), "{err}");
    remove_unless_failed(&dir);
}

/// The stack's SASL_SSL listener (its own CA, SCRAM-SHA-512, the password by `file:`), as a
/// company's Kafka would be reached.
fn sasl_ssl_kafka_extra(sale: &Sale) -> String {
    let var = |n: &str| std::env::var(n).unwrap_or_else(|_| panic!("{n}: source .stack/env"));
    format!(
        "topic = \"{}\"\npartitions = {PARTITIONS}\n\n[kafka.tls]\nca_file = \"{}\"\n\n[kafka.sasl]\n\
         mechanism = \"SCRAM-SHA-512\"\nusername = \"{}\"\npassword = \"file:{}\"\n",
        sale.topic,
        var("SECKILL_KAFKA_CA_FILE"),
        var("SECKILL_KAFKA_SASL_USER"),
        var("SECKILL_KAFKA_SASL_PASSWORD_FILE"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateway_produces_through_sasl_over_tls() {
    let sale = Sale::new(100).await;
    let mut conf =
        sale.gateway_conf(&std::env::var("SECKILL_KAFKA_TLS_BROKER").expect("source .stack/env"), "");
    // The longest produce bound the conf allows: a SCRAM handshake over TLS on a loaded machine
    // took longer than the default second, and a produce past its bound is left to the sweeper
    // (none runs here), which is not what this test is about.
    conf.kafka_extra = format!(
        "produce_timeout_ms = {}\n{}",
        protocol::timing::PRODUCE_TIMEOUT_MAX_MS,
        sasl_ssl_kafka_extra(&sale)
    );
    let gw = Gateway::start(&conf).await;
    let queued = burst(&gw, &sale.campaign).await;
    assert_eq!(queued.len(), 100);
    let produced: HashSet<String> = sale
        .records_in_topic(100)
        .await
        .iter()
        .map(|(_, r)| Reservation::from_json(r.value.as_deref().unwrap()).unwrap().request_id)
        .collect();
    // No order writer runs here (no sweeper): every record in the topic is the gateway's own.
    // (A produce acked later than produce_timeout_ms on a loaded machine is logged "kafka not
    // reachable" yet lands; the topic, not the log, is the proof.)
    assert_eq!(produced, queued, "the gateway's own lanes produced all 100 over SASL_SSL");
}
