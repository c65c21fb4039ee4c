//! The HTTP surface against the real stack: intake signature and body checks, the result query
//! through its states (QUEUED from Redis alone, on the result query's own connections).

mod common;

use std::sync::Arc;
use std::time::Duration;

use backend::http::router;
use backend::producer::Producer;
use backend::state::{AppState, ResultStore};
use common::{Env, GATEWAY_KEY, PAYMENT_KEY};
use e2e::stack;
use protocol::signing::{Signer, RESERVATION_HEADER, SIGNATURE_HEADER};
use serde_json::Value;

/// The result query's own connections to `env`'s database and Redis, as `serve` makes them.
async fn result_store(env: &Env) -> ResultStore {
    ResultStore {
        pool: backend::db::connect(&env.pg_url, 2).await.unwrap(),
        redis: backend::redis::connect(&stack::redis_url()).await.unwrap(),
    }
}

async fn start(env: &Env, topic: &str) -> String {
    start_with(env, topic, result_store(env).await).await
}

async fn start_with(env: &Env, topic: &str, results: ResultStore) -> String {
    let producer = Producer::start(env.kafka.clone(), topic, env.partitions, 100, Duration::from_secs(2));
    let state = AppState {
        pool: env.pool.clone(),
        producer,
        gateway: Arc::new(Signer::new(GATEWAY_KEY)),
        payment: Arc::new(Signer::new(PAYMENT_KEY)),
        payment_max_skew_secs: 300,
        results,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(state)).await.unwrap() });
    format!("http://{addr}")
}

async fn post(base: &str, headers: &[(&str, String)]) -> (u16, Value) {
    let mut req = reqwest::Client::new().post(format!("{base}/internal/reservations"));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn intake_refuses_unsigned_forged_and_bad_records_and_queues_good_ones() {
    let env = Env::new(10, 1, 2).await;
    let base = start(&env, &env.topic).await;
    let record = env.reserve("dave", 1).await;
    let good = Signer::new(GATEWAY_KEY);
    let forged = Signer::new(b"some-other-key-0123456789");

    // The health check the gateway's load balancer polls answers 200.
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status().as_u16(), 200);

    let (s, b) = post(&base, &[]).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{b}");
    let (r, sig) = forged.seal(&record);
    let (s, b) = post(&base, &[(RESERVATION_HEADER, r), (SIGNATURE_HEADER, sig)]).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{b}");
    let (r, sig) = good.seal(b"{\"not\": \"a record\"}");
    let (s, b) = post(&base, &[(RESERVATION_HEADER, r), (SIGNATURE_HEADER, sig)]).await;
    assert_eq!((s, b["code"].as_str()), (400, Some("BAD_REQUEST")), "{b}");
    let (r, sig) = good.seal(b"not json at all");
    let (s, _) = post(&base, &[(RESERVATION_HEADER, r), (SIGNATURE_HEADER, sig)]).await;
    assert_eq!(s, 400);

    let rid = protocol::record::Reservation::from_json(&record).unwrap().request_id;
    // Before the intake: queued (it is in the outbox), with a Retry-After hint.
    let url = format!("{base}/seckill/{}/result/{rid}", env.campaign);
    let resp = reqwest::get(&url).await.unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    assert_eq!(resp.headers()["retry-after"], "1");
    let (r, sig) = good.seal(&record);
    let (s, b) = post(&base, &[(RESERVATION_HEADER, r), (SIGNATURE_HEADER, sig)]).await;
    assert_eq!((s, b["code"].as_str()), (202, Some("QUEUED")), "{b}");
    assert_eq!(b["request_id"], rid.as_str());
    assert_eq!(b["poll_url"], format!("/seckill/{}/result/{rid}", env.campaign));

    // The record went to Kafka: the writer makes the order, and the result says so.
    env.drain(10).await;
    let b: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    assert_eq!(b["code"], "SUCCESS", "{b}");
    assert_eq!(b["amount_cents"], 1999);
    assert!(b["order_id"].as_i64().unwrap() > 0);
    assert!(b["pay_by"].as_str().unwrap().contains('T'));

    let resp = reqwest::get(format!("{base}/seckill/{}/result/nope", env.campaign)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);

    // A refused reservation reads SOLD_OUT.
    sqlx::query("UPDATE campaigns SET total_stock = 1 WHERE id = $1")
        .bind(&env.campaign)
        .execute(&env.pool)
        .await
        .unwrap();
    let late = env.reserve("erin", 1).await;
    let late_id = protocol::record::Reservation::from_json(&late).unwrap().request_id;
    env.produce_records(vec![late]).await;
    env.drain(10).await;
    let b: Value = reqwest::get(format!("{base}/seckill/{}/result/{late_id}", env.campaign))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b["code"], "SOLD_OUT", "{b}");
    assert!(b["reason"].as_str().is_some_and(|r| !r.is_empty()), "{b}");

    // A reservation released without an order reads FAILED, reason RELEASED.
    let gone = env.reserve("gina", 1).await;
    let gone_id = protocol::record::Reservation::from_json(&gone).unwrap().request_id;
    let out = env.scripts.shared.undo(&env.redis, &env.campaign, &gone_id).await.unwrap();
    assert!(matches!(out, protocol::scripts::ReleaseOutcome::Released { .. }), "{out:?}");
    let resp = reqwest::get(format!("{base}/seckill/{}/result/{gone_id}", env.campaign)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let b: Value = resp.json().await.unwrap();
    assert_eq!((b["code"].as_str(), b["reason"].as_str()), (Some("FAILED"), Some("RELEASED")), "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_result_is_answered_from_redis_without_postgresql() {
    let env = Env::new(10, 1, 1).await;
    // The result query's pool is closed: any answer that needs PostgreSQL fails.
    let pool = backend::db::connect(&env.pg_url, 1).await.unwrap();
    pool.close().await;
    let redis = backend::redis::connect(&stack::redis_url()).await.unwrap();
    let base = start_with(&env, &env.topic, ResultStore { pool, redis }).await;

    let rid = protocol::record::Reservation::from_json(&env.reserve("hana", 1).await).unwrap().request_id;
    let resp = reqwest::get(format!("{base}/seckill/{}/result/{rid}", env.campaign)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    assert_eq!(resp.headers()["retry-after"], "1");
    let b: Value = resp.json().await.unwrap();
    assert_eq!((b["code"].as_str(), b["request_id"].as_str()), (Some("QUEUED"), Some(rid.as_str())), "{b}");

    // Not in the outbox: PostgreSQL is needed, and its pool is closed → 503, not a wrong answer.
    let resp = reqwest::get(format!("{base}/seckill/{}/result/unknown-id", env.campaign)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    let b: Value = resp.json().await.unwrap();
    assert_eq!(b["code"], "SERVICE_DEGRADED", "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn intake_answers_503_when_kafka_refuses_and_the_record_stays_in_the_outbox() {
    let env = Env::new(10, 1, 1).await;
    // A topic that does not exist: every produce fails, as with a broker that is down.
    let base = start(&env, "no-such-topic-for-this-test").await;
    let record = env.reserve("frank", 1).await;
    let (r, sig) = Signer::new(GATEWAY_KEY).seal(&record);
    let (s, b) = post(&base, &[(RESERVATION_HEADER, r), (SIGNATURE_HEADER, sig)]).await;
    assert_eq!((s, b["code"].as_str()), (503, Some("SERVICE_DEGRADED")), "{b}");
    assert_eq!(env.outbox_len().await, 1, "the reservation is kept for the sweeper");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweeper_produces_outbox_entries_older_than_t() {
    let env = Env::new(10, 1, 2).await;
    let producer =
        Producer::start(env.kafka.clone(), &env.topic, env.partitions, 100, Duration::from_secs(3));
    for i in 0..3 {
        env.reserve(&format!("s{i}"), 1).await;
    }
    // Nothing is old enough yet.
    let n = backend::sweeper::sweep_once(
        &env.pool,
        &env.redis,
        &env.scripts,
        &producer,
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    assert_eq!(n, 0);
    let n = backend::sweeper::sweep_once(&env.pool, &env.redis, &env.scripts, &producer, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(n, 3);
    env.drain(10).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 3);
    assert_eq!(env.outbox_len().await, 0);
    let n = backend::sweeper::sweep_once(&env.pool, &env.redis, &env.scripts, &producer, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(n, 0, "acked entries are not swept again");
}
