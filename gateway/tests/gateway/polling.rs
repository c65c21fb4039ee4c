//! Result polling has its own per-address limit at the edge: a storm of polls is answered 429
//! by the gateway and never reaches the order writer, and polling uses up none of the order
//! limits of that address.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::Gateway;

/// Counts the result queries that reach the order writer.
struct Counted(Arc<AtomicUsize>);

impl Respond for Counted {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.0.fetch_add(1, Ordering::SeqCst);
        ResponseTemplate::new(200).set_body_json(serde_json::json!({"code": "SUCCESS"}))
    }
}

#[tokio::test]
async fn a_polling_storm_stops_at_the_edge() {
    let campaign = e2e::stack::unique("gw");
    let writer = MockServer::start().await;
    let reached = Arc::new(AtomicUsize::new(0));
    Mock::given(method("GET"))
        .and(path_regex("^/seckill/.+/result/.+$"))
        .respond_with(Counted(reached.clone()))
        .mount(&writer)
        .await;
    let gw = Gateway::on_stack(&writer, &campaign, "[limits]\nresult_per_sec = 5").await;
    let http = reqwest::Client::new();
    let url = gw.url(&format!("/seckill/{campaign}/result/some-request"));

    let (mut ok, mut limited) = (0, 0);
    for _ in 0..60 {
        let resp = http.get(&url).send().await.unwrap();
        match resp.status().as_u16() {
            200 => ok += 1,
            429 => {
                assert_eq!(resp.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
                let body: serde_json::Value = resp.json().await.unwrap();
                assert_eq!(body["code"], "RATE_LIMITED", "{body}");
                limited += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    // 5 a second pass (a window boundary during the loop lets at most a few more through).
    assert!((5..=20).contains(&ok), "{ok} passed");
    assert_eq!(ok + limited, 60);
    assert_eq!(reached.load(Ordering::SeqCst), ok, "only the polls that passed reached the writer");
}

/// A result query for a campaign the gateway does not sell is answered at the edge (404
/// `CAMPAIGN_UNKNOWN`): a flood of made-up campaign ids never reaches the order writer.
#[tokio::test]
async fn polls_for_unknown_campaigns_stop_at_the_edge() {
    let campaign = e2e::stack::unique("gw");
    let writer = MockServer::start().await;
    let reached = Arc::new(AtomicUsize::new(0));
    Mock::given(method("GET"))
        .and(path_regex("^/seckill/.+/result/.+$"))
        .respond_with(Counted(reached.clone()))
        .mount(&writer)
        .await;
    let gw = Gateway::on_stack(&writer, &campaign, "[limits]\nresult_per_sec = 5").await;
    let http = reqwest::Client::new();
    for i in 0..20 {
        let resp =
            http.get(gw.url(&format!("/seckill/made-up-{i}/result/some-request"))).send().await.unwrap();
        assert_eq!(resp.status(), 404);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "CAMPAIGN_UNKNOWN", "{body}");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0, "no poll of an unknown campaign reached the writer");
    // The campaign it sells is still proxied.
    let resp = http.get(gw.url(&format!("/seckill/{campaign}/result/some-request"))).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
}
