//! Payment and timeout close racing on the same orders: exactly one wins on each.

mod common;

use std::sync::Arc;
use std::time::Duration;

use backend::closer;
use backend::http::router;
use backend::state::AppState;
use backend::producer::Producer;
use common::{Env, GATEWAY_KEY, PAYMENT_KEY};
use fred::prelude::*;
use protocol::signing::Signer;
use serde_json::Value;

async fn pay(base: &str, order: i64, payment_ref: &str, key: &[u8]) -> (u16, Value) {
    let body = serde_json::to_vec(&serde_json::json!({ "payment_ref": payment_ref })).unwrap();
    let sig = Signer::new(key).sign(&body);
    let resp = reqwest::Client::new()
        .post(format!("{base}/orders/{order}/pay"))
        .header(backend::payment::PAYMENT_SIGNATURE_HEADER, sig)
        .body(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_pay_close_races_end_exactly_once_each() {
    const N: i64 = 200;
    let env = Env::new(N, 1, 2).await;
    let mut recs = Vec::new();
    for i in 0..N {
        recs.push(env.reserve(&format!("p{i}"), 1).await);
    }
    env.produce_records(recs).await;
    env.drain(100).await;
    assert_eq!(env.redis_stock().await, 0);
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE campaign_id = $1")
        .bind(&env.campaign)
        .execute(&env.pool)
        .await
        .unwrap();
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders WHERE campaign_id = $1 ORDER BY id")
        .bind(&env.campaign)
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert_eq!(ids.len() as i64, N);

    let state = AppState {
        pool: env.pool.clone(),
        redis: env.redis.clone(),
        producer: Producer::start(env.kafka.clone(), &env.topic, env.partitions, 10, Duration::from_secs(2)),
        gateway: Arc::new(Signer::new(GATEWAY_KEY)),
        payment: Arc::new(Signer::new(PAYMENT_KEY)),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(state)).await.unwrap() });

    // A forged callback is refused before anything else.
    let (s, b) = pay(&base, ids[0], "forged", b"not-the-payment-key-0123").await;
    assert_eq!((s, b["code"].as_str()), (401, Some("BAD_SIGNATURE")));

    // 200 payments and 4 close workers (small batches) at once.
    let pays = futures::future::join_all(ids.iter().map(|&id| {
        let base = base.clone();
        tokio::spawn(async move { (id, pay(&base, id, &format!("ref-{id}"), PAYMENT_KEY).await) })
    }));
    let closers = futures::future::join_all((0..4).map(|_| {
        let pool = env.pool.clone();
        tokio::spawn(async move {
            let mut closed = 0;
            for _ in 0..1000 {
                match closer::close_due(&pool, 5).await.unwrap() {
                    0 => break,
                    n => closed += n,
                }
            }
            closed
        })
    }));
    let (pays, closers) = tokio::join!(pays, closers);
    let closed_by_workers: usize = closers.into_iter().map(|c| c.unwrap()).sum();
    let mut paid_answers = 0;
    let mut closed_answers = 0;
    for p in pays {
        let (_, (status, body)) = p.unwrap();
        match (status, body["code"].as_str()) {
            (200, Some("PAID")) => paid_answers += 1,
            (409, Some("CLOSED")) => closed_answers += 1,
            other => panic!("unexpected payment answer {other:?} {body}"),
        }
    }
    // Redis gets the closed orders' stock back.
    while closer::release_closed(&env.pool, &env.redis, &env.scripts, 50).await.unwrap() > 0 {}

    let paid = env.count("SELECT count(*) FROM orders WHERE campaign_id = $1 AND status = 'PAID'").await;
    let closed = env.count("SELECT count(*) FROM orders WHERE campaign_id = $1 AND status = 'CLOSED'").await;
    assert_eq!(paid + closed, N, "every order ends PAID or CLOSED");
    assert_eq!(paid, paid_answers);
    assert_eq!(closed, closed_answers);
    assert_eq!(closed as usize, closed_by_workers);
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1 AND status = 'PAID' AND closed_at IS NOT NULL").await, 0);
    assert_eq!(
        env.count("SELECT count(*) FROM stock_ledger WHERE campaign_id = $1 AND reason = 'CLOSE'").await,
        closed
    );
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, paid);
    assert_eq!(env.stat("released_count").await, closed, "released exactly for the CLOSED");
    assert_eq!(env.redis_stock().await, closed);
    assert_eq!(
        env.count(
            "SELECT count(*) FROM orders WHERE campaign_id = $1 AND status = 'CLOSED' AND NOT redis_released"
        )
        .await,
        0
    );

    // Idempotent callbacks: same ref on a paid order → same 200; any pay of a closed order → 409.
    let paid_id: Option<i64> =
        sqlx::query_scalar("SELECT id FROM orders WHERE campaign_id = $1 AND status = 'PAID' LIMIT 1")
            .bind(&env.campaign)
            .fetch_optional(&env.pool)
            .await
            .unwrap();
    if let Some(id) = paid_id {
        let (s, b) = pay(&base, id, &format!("ref-{id}"), PAYMENT_KEY).await;
        assert_eq!((s, b["code"].as_str()), (200, Some("PAID")));
        let (s, _) = pay(&base, id, "another-ref", PAYMENT_KEY).await;
        assert_eq!(s, 409);
    }
    let closed_id: Option<i64> =
        sqlx::query_scalar("SELECT id FROM orders WHERE campaign_id = $1 AND status = 'CLOSED' LIMIT 1")
            .bind(&env.campaign)
            .fetch_optional(&env.pool)
            .await
            .unwrap();
    if let Some(id) = closed_id {
        let (s, b) = pay(&base, id, "late", PAYMENT_KEY).await;
        assert_eq!((s, b["code"].as_str()), (409, Some("CLOSED")));
    }
    // Running the release again changes nothing.
    assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 50).await.unwrap(), 0);
    assert_eq!(env.stat("released_count").await, closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_whose_redis_release_failed_is_released_later() {
    let env = Env::new(3, 1, 1).await;
    let r = env.reserve("late-payer", 1).await;
    env.produce(0, vec![r]).await;
    env.drain(10).await;
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second'").execute(&env.pool).await.unwrap();
    assert_eq!(closer::close_due(&env.pool, 10).await.unwrap(), 1);
    // As if Redis had been down right after the commit: the order waits, flagged.
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE campaign_id = $1 AND NOT redis_released").await,
        1
    );
    assert_eq!(env.redis_stock().await, 2);
    // The gateways hear that stock came back.
    let sub = backend::redis::connect(&e2e::stack::redis_url()).await.unwrap();
    let mut messages = sub.message_rx();
    sub.subscribe(protocol::keys::REPLENISH_CHANNEL).await.unwrap();
    assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(), 1);
    assert_eq!(env.redis_stock().await, 3);
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let m = messages.recv().await.unwrap();
            if m.value.as_string().as_deref() == Some(env.campaign.as_str()) {
                return;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "no replenish message for {}", env.campaign);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 0);
}
