//! The rest of the shop goes first (`[sale] shed_at_lag_ms`, `plugins::checks::pressure`): while the
//! gateway's threads run late, the sale's challenge, token and order endpoints answer
//! `TRY_LATER` with `Retry-After`, and the shop's routes and `/info` are still served. The
//! lateness is made for real: the whole gateway process is stopped (`SIGSTOP`) for 300 ms with
//! requests waiting on its sockets, then continued, so its timers wake 300 ms late.
//!
//! The campaign's in-flight budget (`[limits] max_inflight`) is shared by every buyer, so a
//! place is taken only once an order's body is read: one buyer's orders whose bodies never come
//! hold none of it.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A gateway in front of `shop` (`/shop/`), shedding past `shed_at_lag_ms` (0: never), and
/// the URL of its metrics.
async fn gateway(shop: &MockServer, shed_at_lag_ms: u64) -> (Gateway, fixtures::cleanup::Campaign, String) {
    let campaign = fixtures::cleanup::Campaign::new("shed");
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.shed_at_lag_ms = shed_at_lag_ms;
    let admin = free_port();
    conf.tables = format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\n");
    conf.routes = format!(
        "[[route]]\nname = \"shop\"\npath_prefix = \"/shop/\"\nupstreams = [\"{}\"]\n",
        shop.address()
    );
    (Gateway::start(&conf).await, campaign, format!("http://127.0.0.1:{admin}/metrics"))
}

/// One round: the gateway stopped, a challenge, an `/info` and a shop request sent, the
/// gateway continued 300 ms later. Returns the challenge's status, body and `Retry-After`, after
/// checking that the shop and `/info` were answered 200.
async fn late_round(gw: &Gateway, campaign: &str) -> (u16, Value, Option<String>) {
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    gw.signal("-STOP");
    let captcha = tokio::spawn(http.post(gw.url(&format!("/seckill/{campaign}/captcha"))).send());
    let info = tokio::spawn(http.get(gw.url(&format!("/seckill/{campaign}/info"))).send());
    let shop = tokio::spawn(http.get(gw.url("/shop/page")).send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    gw.signal("-CONT");
    let (info, shop) = (info.await.unwrap().unwrap(), shop.await.unwrap().unwrap());
    assert_eq!(
        (info.status().as_u16(), shop.status().as_u16()),
        (200, 200),
        "/info and the shop are never shed"
    );
    let r = captcha.await.unwrap().unwrap();
    let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null), retry)
}

#[tokio::test]
async fn a_late_gateway_sheds_the_sale_first_and_serves_the_shop() {
    let shop = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200).set_body_string("ok")).mount(&shop).await;
    let (shedding, campaign, shedding_metrics) = gateway(&shop, 5).await;
    let (never, other, never_metrics) = gateway(&shop, 0).await;
    let http = reqwest::Client::new();

    // On time: a challenge as always.
    let r = http.post(shedding.url(&format!("/seckill/{campaign}/captcha"))).send().await.unwrap();
    assert_eq!(r.status(), 200, "on time, nothing is shed");

    // Late: the challenge is shed, with the reason and when to come back. The request is read
    // after the probe's timer on resume (the probe's wake-up was queued first), so the first
    // round sheds; a few rounds bound the rare scheduling where it was not.
    let mut shed = None;
    for _ in 0..5 {
        let (status, body, retry) = late_round(&shedding, &campaign).await;
        if body["code"] == "TRY_LATER" {
            shed = Some((status, body, retry));
            break;
        }
        assert_eq!(body["code"], "CHALLENGE", "{body}");
    }
    let (status, body, retry) = shed.expect("a gateway 300 ms late sheds a challenge");
    assert_eq!((status, retry.as_deref()), (429, Some("1")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("the rest of the shop"), "{body}");
    // The operator sees the lag that shed it: the peak since the last scrape.
    let lag = sample(&scrape(&http, &shedding_metrics).await, "seckill_gateway_lag_peak_us", &[]);
    assert!(lag > 5_000.0, "the lag's peak shows the late threads past the threshold: {lag}");

    // The lag passes: challenges again.
    let back = eventually(Duration::from_secs(10), || {
        let (http, url) = (http.clone(), shedding.url(&format!("/seckill/{campaign}/captcha")));
        async move { http.post(url).send().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    assert!(back, "challenges are issued again once the gateway is on time");

    // The same lateness without `shed_at_lag_ms`: nothing is shed.
    for _ in 0..3 {
        let (status, body, _) = late_round(&never, &other).await;
        assert_eq!((status, body["code"].as_str()), (200, Some("CHALLENGE")), "{body}");
    }
    let lag = sample(&scrape(&http, &never_metrics).await, "seckill_gateway_lag_peak_us", &[]);
    assert_eq!(lag, 0.0, "without the knob nothing probes the lag");
}

/// `max_inflight = 4`: one buyer opens 4 orders with valid heads and a body that never comes;
/// another buyer's complete order, sent while they wait, is QUEUED within 500 ms (the slow
/// bodies hold no place of the budget).
#[tokio::test]
async fn orders_waiting_for_their_bodies_hold_no_place_of_the_budget() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("shed");
    publish(&redis, &campaign, 10, 1).await;
    let conf = GatewayConf::new(
        &fixtures::stack::redis_url(),
        "127.0.0.1:1",
        &campaign,
        "[limits]\nmax_inflight = 4",
    );
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let slow = ticket(&http, &gw, &campaign, "slow").await.unwrap();
    let other = ticket(&http, &gw, &campaign, "other").await.unwrap();

    let mut waiting = Vec::new();
    for _ in 0..4 {
        let o = slow.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
        let head = format!(
            "POST {}?{} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nX-Device-Id: {}\r\n\
             X-Timestamp: {}\r\nX-Nonce: {}\r\nX-Signature: {}\r\nContent-Length: 10\r\n\r\n",
            o.path, o.query, slow.token, slow.device, o.timestamp, o.nonce, o.signature
        );
        let mut conn = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
        conn.write_all(head.as_bytes()).await.unwrap();
        waiting.push(conn);
    }
    // The gateway has read the four heads and waits for their bodies.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let sent = Instant::now();
    let (status, body) = other.order(&http, &gw.url(""), 1).await;
    let took = sent.elapsed();
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
    assert!(took < Duration::from_millis(500), "answered in {took:?}");
    // The slow orders were still waiting for their bodies all along.
    for conn in &waiting {
        let mut b = [0u8; 1];
        assert!(conn.try_read(&mut b).is_err(), "a slow order was answered before its body came");
    }
}
