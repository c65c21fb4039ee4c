//! After the burst: every queued request polled until it settles (exponential backoff, or the
//! server's `Retry-After` when it gives one), and a share of the winners paying for their order
//! through the order writer's payment callback, signed as the payment provider would.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use protocol::signing::{Signer, PAYMENT_SIGNATURE_HEADER, PAYMENT_TIMESTAMP_HEADER};

use crate::client::Queued;
use crate::crowd::Crowd;
use crate::progress::Progress;

/// Result codes that end polling; anything else (QUEUED, NOT_FOUND while the order writer has
/// not seen the record yet, a 5xx code, a transport error) is asked again.
const FINAL: [&str; 5] = ["SUCCESS", "SOLD_OUT", "FAILED", "PAID", "CLOSED"];

/// Whether `user` is one of the buyers who pay (a stable share of `percent`).
pub fn pays(user: &str, percent: u32) -> bool {
    // FNV-1a: stable across runs and processes.
    let h = user.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    (h % 100) < percent as u64
}

/// Polls every `(queued request, user)` until final or `deadline` (each with its result
/// token); winners who pay, pay. Returns the final results by code and the payment answers by
/// code.
pub async fn drain(
    client: &reqwest::Client,
    crowd: &Crowd,
    ids: Vec<(Queued, String)>,
    deadline: Instant,
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let bar = Progress::start("drain", ids.len() as u64);
    let done: Vec<(String, Option<String>)> = futures::stream::iter(ids)
        .map(|(queued, user)| {
            let bar = bar.clone();
            async move {
                let (code, order_id) = poll(client, crowd, &queued, deadline).await;
                let paid = match (&crowd.payments, order_id) {
                    (Some((writer, key)), Some(order)) if pays(&user, crowd.mix.pay_percent) => {
                        Some(pay(client, writer, key, order, &queued.request_id).await)
                    }
                    _ => None,
                };
                bar.add(1);
                (code, paid)
            }
        })
        .buffer_unordered(crowd.concurrency.min(128))
        .collect()
        .await;
    bar.finish();
    let (mut results, mut payments) = (BTreeMap::new(), BTreeMap::new());
    for (code, paid) in done {
        *results.entry(code).or_default() += 1;
        if let Some(p) = paid {
            *payments.entry(p).or_default() += 1;
        }
    }
    (results, payments)
}

/// Polls one result until it is final: waits the server's `Retry-After` when it sends one,
/// else 50 ms doubling to 1 s. Returns the code, and the order id of a SUCCESS.
async fn poll(
    client: &reqwest::Client,
    crowd: &Crowd,
    queued: &Queued,
    deadline: Instant,
) -> (String, Option<i64>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut wait = backoff;
        let code = match crate::client::poll(client, &crowd.gateways[0], &crowd.campaign, queued).await {
            Ok(r) => {
                if let Some(secs) =
                    r.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                {
                    wait = Duration::from_secs(secs.clamp(1, 5));
                }
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                let code = body["code"].as_str().unwrap_or("ERROR").to_string();
                if FINAL.contains(&code.as_str()) {
                    return (code, body["order_id"].as_i64());
                }
                code
            }
            Err(_) => "ERROR".into(),
        };
        if Instant::now() + wait > deadline {
            return (if code == "QUEUED" { "UNSETTLED".into() } else { format!("UNSETTLED_{code}") }, None);
        }
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Pays `order` through the order writer's callback; returns the answer's code.
async fn pay(client: &reqwest::Client, writer: &str, key: &[u8], order: i64, request_id: &str) -> String {
    let path = format!("/orders/{order}/pay");
    let body = serde_json::to_vec(&serde_json::json!({"payment_ref": format!("pay-{request_id}")}))
        .unwrap_or_default();
    let ts = chrono::Utc::now().timestamp();
    let signature = Signer::new(key).sign_payment("POST", &path, ts, &body);
    let sent = client
        .post(format!("{writer}{path}"))
        .header(PAYMENT_TIMESTAMP_HEADER, ts.to_string())
        .header(PAYMENT_SIGNATURE_HEADER, signature)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(r) => {
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            body["code"].as_str().map_or(format!("HTTP_{status}"), str::to_string)
        }
        Err(_) => "ERROR".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn about_the_asked_share_pays() {
        let n = (0..10_000).filter(|u| pays(&format!("user-{u}"), 30)).count();
        assert!((2_500..3_500).contains(&n), "{n}");
        assert_eq!((0..100).filter(|u| pays(&format!("user-{u}"), 0)).count(), 0);
        assert_eq!((0..100).filter(|u| pays(&format!("user-{u}"), 100)).count(), 100);
    }
}
