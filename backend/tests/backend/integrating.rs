//! `docs/integrating.md`'s worked example, run: the payment adapter of
//! `backend/examples/payment_adapter.rs` in front of the order writer's payment callback, fed a
//! provider's signed webhooks as a provider sends them, on the real stack.

use crate::common;

#[path = "../../examples/payment_adapter.rs"]
#[allow(dead_code)] // its `main` and run-time helpers
mod adapter;

use std::sync::Arc;

use common::{Env, PAYMENT_KEY};
use protocol::signing::Signer;
use serde_json::{json, Value};

const PROVIDER_SECRET: &[u8] = b"whsec-test-0123456789";

/// The adapter in front of the writer at `writer`, signing with `payment_key`, on a free port.
async fn start_adapter(writer: &str, payment_key: &[u8]) -> String {
    let a = adapter::Adapter {
        provider: Signer::new(PROVIDER_SECRET),
        payment: Signer::new(payment_key),
        writer: writer.to_string(),
        http: reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build().unwrap(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, adapter::router(Arc::new(a))).await.unwrap() });
    base
}

fn succeeded(payment: &str, order: i64) -> Vec<u8> {
    let object = json!({"id": payment, "amount": 1999, "metadata": {"order_id": order.to_string()}});
    serde_json::to_vec(
        &json!({"id": "evt_1", "type": "payment_intent.succeeded", "data": {"object": object}}),
    )
    .unwrap()
}

/// Posts `body` as the provider does, signed with `secret` at `t`; (status, the adapter's
/// `result`).
async fn deliver(adapter: &str, body: Vec<u8>, secret: &[u8], t: i64) -> (u16, String) {
    let signed = [format!("{t}.").as_bytes(), &body].concat();
    let header = format!("t={t},v1={}", Signer::new(secret).sign(&signed));
    let reply = reqwest::Client::new()
        .post(format!("{adapter}/webhook"))
        .header(adapter::PROVIDER_SIGNATURE_HEADER, header)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = reply.status().as_u16();
    let v: Value = reply.json().await.unwrap();
    (status, v["result"].as_str().unwrap_or_default().to_string())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_payment_adapter_pays_orders_from_a_providers_webhooks() {
    let env = Env::new(5, 1, 1).await;
    let recs = vec![env.reserve("ann", 1).await, env.reserve("bob", 1).await];
    env.produce_records(recs).await;
    env.drain(10).await;
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders WHERE campaign_id = $1 ORDER BY id")
        .bind(&env.campaign)
        .fetch_all(&env.pool)
        .await
        .unwrap();
    let (a, b) = (ids[0], ids[1]);
    let writer = env.serve_http().await;
    let adapter = start_adapter(&writer, PAYMENT_KEY).await;

    // Not the provider's: a wrong secret, an old signature, no signature at all.
    assert_eq!(deliver(&adapter, succeeded("pi_a", a), b"not-the-secret-0123", now()).await.0, 400);
    assert_eq!(deliver(&adapter, succeeded("pi_a", a), PROVIDER_SECRET, now() - 600).await.0, 400);
    let unsigned = reqwest::Client::new().post(format!("{adapter}/webhook")).body("{}").send().await.unwrap();
    assert_eq!(unsigned.status().as_u16(), 400);
    assert_eq!(env.order_status(a).await, ("PENDING_PAYMENT".into(), None), "nothing refused paid");

    // The provider's: paid, and the provider's retry of the same event is the same 200.
    assert_eq!(deliver(&adapter, succeeded("pi_a", a), PROVIDER_SECRET, now()).await, (200, "paid".into()));
    assert_eq!(deliver(&adapter, succeeded("pi_a", a), PROVIDER_SECRET, now()).await, (200, "paid".into()));
    assert_eq!(env.order_status(a).await, ("PAID".into(), Some("pi_a".into())));

    // Events a retry cannot change are taken (200) and told to the shop: another event type, a
    // payment without its order, the same payment for another order (refund it).
    let other =
        serde_json::to_vec(&json!({"type": "charge.refunded", "data": {"object": {"id": "ch_1"}}})).unwrap();
    assert_eq!(deliver(&adapter, other, PROVIDER_SECRET, now()).await, (200, "ignored".into()));
    let bare =
        serde_json::to_vec(&json!({"type": "payment_intent.succeeded", "data": {"object": {"id": "pi_x"}}}))
            .unwrap();
    assert_eq!(deliver(&adapter, bare, PROVIDER_SECRET, now()).await, (200, "ignored".into()));
    assert_eq!(deliver(&adapter, succeeded("pi_a", b), PROVIDER_SECRET, now()).await, (200, "refund".into()));
    assert_eq!(env.order_status(b).await, ("PENDING_PAYMENT".into(), None), "one reference pays one order");

    // The writer out of reach: 502, the provider retries; the adapter's own key wrong: 500.
    let dead =
        start_adapter(&format!("http://127.0.0.1:{}", fixtures::stack::free_port()), PAYMENT_KEY).await;
    assert_eq!(deliver(&dead, succeeded("pi_b", b), PROVIDER_SECRET, now()).await, (502, "retry".into()));
    let wrong = start_adapter(&writer, b"not-the-payment-key-0123").await;
    assert_eq!(
        deliver(&wrong, succeeded("pi_b", b), PROVIDER_SECRET, now()).await,
        (500, "misconfigured".into())
    );
    assert_eq!(env.order_status(b).await, ("PENDING_PAYMENT".into(), None));

    // The provider's retry once the writer is back (here: the right adapter) pays b.
    assert_eq!(deliver(&adapter, succeeded("pi_b", b), PROVIDER_SECRET, now()).await, (200, "paid".into()));
    assert_eq!(env.order_status(b).await, ("PAID".into(), Some("pi_b".into())));
}
