//! A payment provider's webhook in front of the order writer's payment callback: the worked
//! example of `docs/integrating.md`.
//!
//! The provider here signs its webhooks the way Stripe does: a header
//! `Provider-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(provider secret, "<t>.<body>")>`
//! (several `v1` while the provider rolls its secret), and posts events such as
//! `{"id": "evt_1", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_1",
//! "metadata": {"order_id": "42"}}}}`; the shop put the order id in the payment's metadata when it
//! created the payment for the order's `amount_cents`. The adapter:
//!
//! 1. checks the provider's signature (constant time) and its time (± 300 s), else 400;
//! 2. ignores every event but a succeeded payment (200: the provider must not retry them);
//! 3. re-signs `{"payment_ref": <the payment's id>}` for `POST /orders/{order_id}/pay` with the
//!    writer's payment key, and posts it;
//! 4. answers the provider by what a retry could change: 200 when the writer settled it (`PAID`,
//!    or an answer a retry cannot change: `CLOSED`, `PAYMENT_REF_USED`, `NOT_FOUND`, each logged
//!    for the shop to refund), 502 when the writer could not be reached or failed (the provider
//!    retries), 500 when the writer refused the adapter's own signature (a wrong key or clock:
//!    the provider retries while someone fixes it).
//!
//! Run: `PROVIDER_SECRET_FILE=… PAYMENT_KEY_FILE=… WRITER_URL=http://127.0.0.1:8081
//! ADAPTER_LISTEN=127.0.0.1:8090 cargo run -p backend --example payment_adapter`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use protocol::signing::{Signer, PAYMENT_SIGNATURE_HEADER, PAYMENT_TIMESTAMP_HEADER};
use serde_json::{json, Value};

/// The provider's signature header.
pub const PROVIDER_SIGNATURE_HEADER: &str = "provider-signature";

/// How far a webhook's `t` may be from this clock.
pub const TOLERANCE_SECS: i64 = 300;

/// What the adapter needs: the provider's webhook secret, the writer's payment key and address.
pub struct Adapter {
    /// Verifies the provider's signatures.
    pub provider: Signer,
    /// Signs the writer's callbacks.
    pub payment: Signer,
    /// The order writer's base URL (`http://host:port`).
    pub writer: String,
    /// The client to the writer (with a timeout).
    pub http: reqwest::Client,
}

/// The adapter's one route, `POST /webhook`.
pub fn router(adapter: Arc<Adapter>) -> Router {
    Router::new().route("/webhook", post(webhook)).with_state(adapter)
}

type Answer = (StatusCode, Json<Value>);

fn answer(status: StatusCode, what: &str, detail: Value) -> Answer {
    (status, Json(json!({ "result": what, "detail": detail })))
}

async fn webhook(State(a): State<Arc<Adapter>>, headers: HeaderMap, body: Bytes) -> Answer {
    let now = chrono::Utc::now().timestamp();
    let signature = headers.get(PROVIDER_SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    if let Err(why) = verify(&a.provider, signature, &body, now) {
        return answer(StatusCode::BAD_REQUEST, "refused", json!(why));
    }
    match paid_order(&body) {
        Ok(Some((order, payment_ref))) => forward(&a, order, &payment_ref, now).await,
        Ok(None) => answer(StatusCode::OK, "ignored", json!("not a succeeded payment")),
        Err(why) => {
            eprintln!("payment_adapter: a signed event the shop must look at: {why}");
            answer(StatusCode::OK, "ignored", json!(why))
        }
    }
}

/// Checks `Provider-Signature: t=…,v1=…` over `"<t>.<body>"` and `t` within the tolerance.
pub fn verify(provider: &Signer, header: Option<&str>, body: &[u8], now: i64) -> Result<(), &'static str> {
    let header = header.ok_or("no Provider-Signature header")?;
    let (mut t, mut v1) = (None, Vec::new());
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => v1.push(value),
            _ => {}
        }
    }
    let t = t.ok_or("the signature has no t=<unix seconds>")?;
    let signed = [format!("{t}.").as_bytes(), body].concat();
    if !v1.iter().any(|sig| provider.verify(&signed, sig).is_ok()) {
        return Err("no v1 signature matches the body");
    }
    if (now - t).abs() > TOLERANCE_SECS {
        return Err("the signature's time is outside the tolerance");
    }
    Ok(())
}

/// The order and payment reference of a succeeded payment event; `None` for any other event.
pub fn paid_order(body: &[u8]) -> Result<Option<(i64, String)>, String> {
    let event: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if event["type"] != "payment_intent.succeeded" {
        return Ok(None);
    }
    let payment = &event["data"]["object"];
    let payment_ref = payment["id"].as_str().filter(|r| !r.is_empty()).ok_or("the payment has no id")?;
    let order = payment["metadata"]["order_id"].as_str().and_then(|o| o.parse::<i64>().ok());
    let order = order.ok_or_else(|| format!("payment {payment_ref} has no metadata.order_id"))?;
    Ok(Some((order, payment_ref.to_string())))
}

/// Posts the writer's signed callback for `order` and answers the provider by its outcome.
async fn forward(a: &Adapter, order: i64, payment_ref: &str, now: i64) -> Answer {
    let path = format!("/orders/{order}/pay");
    let body = serde_json::to_vec(&json!({ "payment_ref": payment_ref })).expect("a JSON object");
    let signature = a.payment.sign_payment("POST", &path, now, &body);
    let sent = a
        .http
        .post(format!("{}{path}", a.writer))
        .header(PAYMENT_TIMESTAMP_HEADER, now.to_string())
        .header(PAYMENT_SIGNATURE_HEADER, signature)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let reply = match sent {
        Ok(reply) => reply,
        Err(e) => return answer(StatusCode::BAD_GATEWAY, "retry", json!(e.to_string())),
    };
    let status = reply.status().as_u16();
    let writer: Value = reply.json().await.unwrap_or(Value::Null);
    let code = writer["code"].as_str().unwrap_or("");
    match (status, code) {
        (200, "PAID") => answer(StatusCode::OK, "paid", writer),
        (409, "PAID" | "CLOSED" | "PAYMENT_REF_USED") | (404, _) => {
            eprintln!(
                "payment_adapter: payment {payment_ref} of order {order} not taken ({code}): refund it"
            );
            answer(StatusCode::OK, "refund", writer)
        }
        (401, _) => answer(StatusCode::INTERNAL_SERVER_ERROR, "misconfigured", writer),
        _ => answer(StatusCode::BAD_GATEWAY, "retry", writer),
    }
}

/// The value of environment variable `name`, or the reason it is needed.
fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).map_err(|_| anyhow::anyhow!("set {name} (see the header of this example)"))
}

/// A secret from the file named by environment variable `name` (a trailing newline dropped).
fn secret(name: &str) -> anyhow::Result<Vec<u8>> {
    let mut bytes = std::fs::read(env(name)?)?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    Ok(bytes)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let adapter = Adapter {
        provider: Signer::new(&secret("PROVIDER_SECRET_FILE")?),
        payment: Signer::new(&secret("PAYMENT_KEY_FILE")?),
        writer: env("WRITER_URL")?.trim_end_matches('/').to_string(),
        http: reqwest::Client::builder().timeout(std::time::Duration::from_secs(10)).build()?,
    };
    let listener = tokio::net::TcpListener::bind(env("ADAPTER_LISTEN")?).await?;
    eprintln!("payment_adapter: listening on {}", listener.local_addr()?);
    axum::serve(listener, router(Arc::new(adapter))).await?;
    Ok(())
}
