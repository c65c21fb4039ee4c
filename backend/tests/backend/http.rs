//! The HTTP surface against the real stack: the result query through its states (QUEUED from
//! Redis alone, on the result query's own connections), no reservation intake; and the sweeper,
//! whose signed records the writer orders.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use backend::http::router;
use backend::http::state::{AppState, ResultStore};
use common::{Env, PAYMENT_KEY};
use fixtures::stack;
use protocol::signing::Signer;
use serde_json::Value;

/// The result query's own connections to `env`'s database and Redis, as `serve` makes them.
async fn result_store(env: &Env) -> ResultStore {
    ResultStore {
        pool: backend::db::connect(&env.pg_url, 2).await.unwrap(),
        redis: backend::redis::connect(&stack::redis_url()).await.unwrap(),
        buckets: Default::default(),
    }
}

async fn start(env: &Env) -> String {
    start_with(env, result_store(env).await).await
}

async fn start_with(env: &Env, results: ResultStore) -> String {
    let state = AppState {
        pool: env.pool.clone(),
        payment: Arc::new(Signer::new(PAYMENT_KEY)),
        payment_max_skew_secs: 300,
        results,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(state)).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_result_query_follows_a_reservation_from_queued_to_its_outcome() {
    let env = Env::new(10, 1, 2).await;
    let base = start(&env).await;
    let record = env.reserve("dave", 1).await;

    // The health check the gateway's load balancer polls answers 200.
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    // Reservations do not come in over HTTP any more: the gateway produces them to Kafka.
    let resp = reqwest::Client::new().post(format!("{base}/internal/reservations")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);

    let rid = protocol::record::Reservation::from_json(&record).unwrap().request_id;
    // Before it is produced: queued (it is in the outbox), with a Retry-After hint.
    let url = format!("{base}/seckill/{}/result/{rid}", env.campaign);
    let resp = reqwest::get(&url).await.unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    assert_eq!(resp.headers()["retry-after"], "1");
    let b: Value = resp.json().await.unwrap();
    assert_eq!((b["code"].as_str(), b["request_id"].as_str()), (Some("QUEUED"), Some(rid.as_str())), "{b}");

    // The signed record on the topic: the writer makes the order, and the result says so.
    env.produce_records(vec![record]).await;
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
    let out = env.scripts.shared.undo(&env.redis, &env.bucket(), &gone_id, None).await.unwrap();
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
    let base = start_with(&env, ResultStore { pool, redis, buckets: Default::default() }).await;

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
async fn the_sweeper_produces_outbox_entries_older_than_t() {
    let env = Env::new(10, 1, 2).await;
    // Signed with the gateway key, as the writers of `drain` expect.
    let producer = env.producer();
    for i in 0..3 {
        env.reserve(&format!("s{i}"), 1).await;
    }
    // Nothing is old enough yet.
    let n = backend::workers::sweeper::sweep_once(
        &env.pool,
        &env.redis,
        &env.scripts,
        &producer,
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    assert_eq!(n, 0);
    let n =
        backend::workers::sweeper::sweep_once(&env.pool, &env.redis, &env.scripts, &producer, Duration::ZERO)
            .await
            .unwrap();
    assert_eq!(n, 3);
    env.drain(10).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 3);
    assert_eq!(env.outbox_len().await, 0);
    let n =
        backend::workers::sweeper::sweep_once(&env.pool, &env.redis, &env.scripts, &producer, Duration::ZERO)
            .await
            .unwrap();
    assert_eq!(n, 0, "acked entries are not swept again");
}
