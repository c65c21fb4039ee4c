//! The payment callback against the real stack: its signature binds the order, the time and the
//! body; a payment reference pays one order only; payment and timeout close racing on the same
//! orders end exactly once each.

use crate::common;

use std::time::Duration;

use backend::workers::closer;
use common::{Env, PAYMENT_KEY};
use protocol::signing::{Signer, PAYMENT_SIGNATURE_HEADER, PAYMENT_TIMESTAMP_HEADER};
use serde_json::Value;

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn body_of(payment_ref: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "payment_ref": payment_ref })).unwrap()
}

/// Posts `body` to order `order`'s callback with the given header values, as sent.
async fn send(
    base: &str,
    order: i64,
    body: Vec<u8>,
    timestamp: Option<i64>,
    sig: Option<String>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new().post(format!("{base}/orders/{order}/pay")).body(body);
    if let Some(ts) = timestamp {
        req = req.header(PAYMENT_TIMESTAMP_HEADER, ts.to_string());
    }
    if let Some(sig) = sig {
        req = req.header(PAYMENT_SIGNATURE_HEADER, sig);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// A callback signed with `key` at `timestamp` for order `order`.
async fn pay_at(base: &str, order: i64, payment_ref: &str, key: &[u8], timestamp: i64) -> (u16, Value) {
    let body = body_of(payment_ref);
    let sig = Signer::new(key).sign_payment("POST", &format!("/orders/{order}/pay"), timestamp, &body);
    send(base, order, body, Some(timestamp), Some(sig)).await
}

/// A callback signed with `key` now for order `order`.
async fn pay(base: &str, order: i64, payment_ref: &str, key: &[u8]) -> (u16, Value) {
    pay_at(base, order, payment_ref, key, now()).await
}

/// The orders of `env`'s campaign, by id.
async fn order_ids(env: &Env) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM orders WHERE campaign_id = $1 ORDER BY id")
        .bind(&env.campaign)
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_callback_is_bound_to_its_order_its_time_and_its_body() {
    let env = Env::new(5, 1, 1).await;
    let recs = vec![env.reserve("ann", 1).await, env.reserve("bob", 1).await];
    env.produce_records(recs).await;
    env.drain(10).await;
    let ids = order_ids(&env).await;
    let (a, b) = (ids[0], ids[1]);
    let base = env.serve_http().await;

    // A valid callback for order a, replayed onto order b: the path is signed.
    let body = body_of("ref-a");
    let ts = now();
    let sig_a = Signer::new(PAYMENT_KEY).sign_payment("POST", &format!("/orders/{a}/pay"), ts, &body);
    let (s, v) = send(&base, b, body.clone(), Some(ts), Some(sig_a.clone())).await;
    assert_eq!((s, v["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{v}");
    // Tampered body under a's signature.
    let (s, v) = send(&base, a, body_of("ref-x"), Some(ts), Some(sig_a.clone())).await;
    assert_eq!((s, v["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{v}");
    // Another timestamp under the same signature.
    let (s, v) = send(&base, a, body.clone(), Some(ts + 1), Some(sig_a.clone())).await;
    assert_eq!((s, v["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{v}");
    // Missing headers; a signature over the body alone (the old scheme); another key.
    let (s, v) = send(&base, a, body.clone(), None, Some(sig_a.clone())).await;
    assert_eq!((s, v["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{v}");
    let (s, v) = send(&base, a, body.clone(), Some(ts), None).await;
    assert_eq!((s, v["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{v}");
    let body_only = Signer::new(PAYMENT_KEY).sign(&body);
    let (s, v) = send(&base, a, body.clone(), Some(ts), Some(body_only)).await;
    assert_eq!((s, v["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{v}");
    let (s, v) = pay(&base, a, "ref-a", b"not-the-payment-key-0123").await;
    assert_eq!((s, v["code"].as_str()), (401, Some("BAD_SIGNATURE")), "{v}");
    // Well signed, but too old or too far ahead.
    for ts in [now() - 400, now() + 400] {
        let (s, v) = pay_at(&base, a, "ref-a", PAYMENT_KEY, ts).await;
        assert_eq!((s, v["code"].as_str()), (401, Some("STALE_TIMESTAMP")), "{v}");
    }
    assert_eq!(env.order_status(a).await, ("PENDING_PAYMENT".into(), None), "nothing refused paid");
    assert_eq!(env.order_status(b).await, ("PENDING_PAYMENT".into(), None));

    // The genuine callback pays a; sent again (as is, or signed anew) it is the same 200 PAID.
    let (s, v) = send(&base, a, body.clone(), Some(ts), Some(sig_a.clone())).await;
    assert_eq!((s, v["code"].as_str()), (200, Some("PAID")), "{v}");
    let (s, v) = send(&base, a, body.clone(), Some(ts), Some(sig_a)).await;
    assert_eq!((s, v["code"].as_str()), (200, Some("PAID")), "{v}");
    let (s, v) = pay(&base, a, "ref-a", PAYMENT_KEY).await;
    assert_eq!((s, v["code"].as_str(), v["order_id"].as_i64()), (200, Some("PAID"), Some(a)), "{v}");

    // The same reference, validly signed for order b: refused, b stays unpaid.
    let (s, v) = pay(&base, b, "ref-a", PAYMENT_KEY).await;
    assert_eq!((s, v["code"].as_str()), (409, Some("PAYMENT_REF_USED")), "{v}");
    assert_eq!(env.order_status(a).await, ("PAID".into(), Some("ref-a".into())));
    assert_eq!(env.order_status(b).await, ("PENDING_PAYMENT".into(), None));
    // b pays with its own reference.
    let (s, v) = pay(&base, b, "ref-b", PAYMENT_KEY).await;
    assert_eq!((s, v["code"].as_str()), (200, Some("PAID")), "{v}");
}

/// Sets the pay-by time of `ids` in the past: the close worker takes them from now on.
async fn make_due(env: &Env, ids: &[i64]) {
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE id = ANY($1)")
        .bind(ids)
        .execute(&env.pool)
        .await
        .unwrap();
}

/// Runs `close_due` (batches of 5) until nothing is due; returns how many it closed.
async fn close_all_due(pool: sqlx::PgPool) -> usize {
    let mut closed = 0;
    for _ in 0..1000 {
        match closer::close_due(&pool, 5).await.unwrap() {
            0 => break,
            n => closed += n,
        }
    }
    closed
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
    let ids = order_ids(&env).await;
    assert_eq!(ids.len() as i64, N);
    let (paid_first, rest) = ids.split_at(50);
    let (closed_first, raced) = rest.split_at(50);
    let base = env.serve_http().await;

    // Both outcomes are made to happen: 50 orders are paid before any is due, then 50 are closed
    // before their callbacks come, then the other 100 are raced.
    let mut paid_answers = 0;
    let mut closed_answers = 0;
    let mut tally = |status: u16, body: &Value| match (status, body["code"].as_str()) {
        (200, Some("PAID")) => paid_answers += 1,
        (409, Some("CLOSED")) => closed_answers += 1,
        other => panic!("unexpected payment answer {other:?} {body}"),
    };
    for &id in paid_first {
        let (s, b) = pay(&base, id, &format!("ref-{id}"), PAYMENT_KEY).await;
        tally(s, &b);
    }
    make_due(&env, closed_first).await;
    let mut closed_by_workers = close_all_due(env.pool.clone()).await;
    assert_eq!(closed_by_workers, closed_first.len(), "only the due, unpaid orders are closed");
    for &id in closed_first {
        let (s, b) = pay(&base, id, &format!("ref-{id}"), PAYMENT_KEY).await;
        tally(s, &b);
    }

    // 100 payments and 4 close workers (small batches) at once.
    make_due(&env, raced).await;
    let pays = futures::future::join_all(raced.iter().map(|&id| {
        let base = base.clone();
        tokio::spawn(async move { pay(&base, id, &format!("ref-{id}"), PAYMENT_KEY).await })
    }));
    let closers = futures::future::join_all((0..4).map(|_| tokio::spawn(close_all_due(env.pool.clone()))));
    let (pays, closers) = tokio::join!(pays, closers);
    closed_by_workers += closers.into_iter().map(|c| c.unwrap()).sum::<usize>();
    for p in pays {
        let (status, body) = p.unwrap();
        tally(status, &body);
    }
    // Redis gets the closed orders' stock back.
    while closer::release_closed(&env.pool, &env.redis, &env.scripts, 50).await.unwrap() > 0 {}

    let paid = env.count("SELECT count(*) FROM orders WHERE campaign_id = $1 AND status = 'PAID'").await;
    let closed = env.count("SELECT count(*) FROM orders WHERE campaign_id = $1 AND status = 'CLOSED'").await;
    assert!(
        paid >= paid_first.len() as i64 && closed >= closed_first.len() as i64,
        "{paid} paid, {closed} closed"
    );
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

    // Idempotent callbacks: same ref on a paid order → same 200; another ref → 409; any pay of a
    // closed order → 409 CLOSED.
    let id = paid_first[0];
    let (s, b) = pay(&base, id, &format!("ref-{id}"), PAYMENT_KEY).await;
    assert_eq!((s, b["code"].as_str()), (200, Some("PAID")));
    let (s, b) = pay(&base, id, "another-ref", PAYMENT_KEY).await;
    assert_eq!((s, b["code"].as_str()), (409, Some("PAID")));
    let (s, b) = pay(&base, closed_first[0], "late", PAYMENT_KEY).await;
    assert_eq!((s, b["code"].as_str()), (409, Some("CLOSED")));
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
    let mut replenish = common::Replenish::listen().await;
    assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(), 1);
    assert_eq!(env.redis_stock().await, 3);
    assert!(
        replenish.heard(&env.campaign, Duration::from_secs(10)).await,
        "no replenish message for {}",
        env.campaign
    );
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 0);
}
