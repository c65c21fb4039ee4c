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

/// A gateway selling `campaign` (its file gets `extra`) in front of an order writer that counts
/// the result queries reaching it. The writer must outlive the gateway's use of it.
async fn behind_counting_writer(campaign: &str, extra: &str) -> (MockServer, Arc<AtomicUsize>, Gateway) {
    let writer = MockServer::start().await;
    let reached = Arc::new(AtomicUsize::new(0));
    Mock::given(method("GET"))
        .and(path_regex("^/seckill/.+/result/.+$"))
        .respond_with(Counted(reached.clone()))
        .mount(&writer)
        .await;
    let gw = Gateway::on_stack(&writer, campaign, extra).await;
    (writer, reached, gw)
}

#[tokio::test]
async fn a_polling_storm_stops_at_the_edge() {
    let campaign = fixtures::cleanup::Campaign::new("gw");
    let (_writer, reached, gw) = behind_counting_writer(&campaign, "[limits]\nresult_per_sec = 5").await;
    let http = reqwest::Client::new();
    let url = gw.url(&format!("/seckill/{campaign}/result/some-request"));
    let token = crate::support::result_token(&campaign, "u", "some-request");

    let (mut ok, mut limited) = (0, 0);
    for _ in 0..60 {
        let resp = http.get(&url).header("x-result-token", &token).send().await.unwrap();
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
    let campaign = fixtures::cleanup::Campaign::new("gw");
    let (_writer, reached, gw) = behind_counting_writer(&campaign, "[limits]\nresult_per_sec = 5").await;
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
    let token = crate::support::result_token(&campaign, "u", "some-request");
    let url = gw.url(&format!("/seckill/{campaign}/result/some-request"));
    let resp = http.get(url).header("x-result-token", token).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
}

/// A result is answered to its buyer only: the QUEUED answer carries a result token bound to
/// the campaign, the user and the request id, and a poll without it, with another buyer's, with
/// a forged one, with a campaign token or with the owner's token on another request is refused
/// at the edge (401 `BAD_RESULT_TOKEN`, the same whether the id exists or not) and never
/// reaches the order writer. The owner's token is proxied, and not passed on upstream.
#[tokio::test]
async fn a_result_is_answered_to_its_buyer_only() {
    let redis = crate::support::client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    crate::support::publish(&redis, &campaign, 10, 1).await;
    let (writer, reached, gw) = behind_counting_writer(&campaign, "").await;
    let http = reqwest::Client::new();

    let (status, mine) = crate::support::order(&http, &gw, &campaign, "owner").await;
    assert_eq!((status, mine["code"].as_str()), (202, Some("QUEUED")), "{mine}");
    let (status, theirs) = crate::support::order(&http, &gw, &campaign, "other").await;
    assert_eq!((status, theirs["code"].as_str()), (202, Some("QUEUED")), "{theirs}");
    let id = mine["request_id"].as_str().unwrap();
    let token = mine["result_token"].as_str().expect("a QUEUED answer carries its result token");
    let their_token = theirs["result_token"].as_str().expect("every QUEUED answer carries one");
    let their_ticket = crate::support::ticket(&http, &gw, &campaign, "other").await.unwrap();
    let forged = {
        let mut t = token.to_string();
        let last = if t.ends_with('0') { '1' } else { '0' };
        t.pop();
        t.push(last);
        t
    };
    let mine_url = gw.url(&format!("/seckill/{campaign}/result/{id}"));
    let theirs_url =
        gw.url(&format!("/seckill/{campaign}/result/{}", theirs["request_id"].as_str().unwrap()));
    let made_up_url = gw.url(&format!("/seckill/{campaign}/result/no-such-request"));

    let refused = [
        ("no token", http.get(&mine_url)),
        ("another buyer's result token", http.get(&mine_url).header("x-result-token", their_token)),
        ("a forged result token", http.get(&mine_url).header("x-result-token", &forged)),
        ("another buyer's campaign token", http.get(&mine_url).bearer_auth(&their_ticket.token)),
        ("the owner's token on another request", http.get(&theirs_url).header("x-result-token", token)),
        ("the owner's token on a made-up id", http.get(&made_up_url).header("x-result-token", token)),
        ("no token on a made-up id", http.get(&made_up_url)),
    ];
    for (what, req) in refused {
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!((status, body["code"].as_str()), (401, Some("BAD_RESULT_TOKEN")), "{what}: {body}");
        assert!(body.get("order_id").is_none(), "{what}: {body}");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0, "no refused poll reached the order writer");

    let resp = http.get(&mine_url).header("x-result-token", token).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(reached.load(Ordering::SeqCst), 1, "the owner's poll is proxied");
    let seen = &writer.received_requests().await.unwrap()[0];
    assert!(seen.headers.get("x-result-token").is_none(), "the result token stays at the edge");
}
