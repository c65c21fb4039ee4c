//! How the gateway reads a request whose meaning could be taken two ways: several
//! `X-Forwarded-For` lines, two values of a header the sale reads, an absolute-form target
//! beside a `Host`, pipelined requests; and what of the sale's own headers reaches a shop.

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

fn shop_route(upstream: &MockServer) -> String {
    format!("[[route]]\nname = \"shop\"\npath_prefix = \"/\"\nupstreams = [\"{}\"]\n", upstream.address())
}

async fn shop() -> MockServer {
    let shop = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(200)).mount(&shop).await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200)).mount(&shop).await;
    shop
}

/// A trusted proxy that adds its own `X-Forwarded-For` line after the client's forged one
/// (HAProxy's `option forwardfor`): every line counts, read as one list, so the address the
/// proxy saw is the one limited and the one the shop learns.
#[tokio::test]
async fn every_forwarded_for_line_counts() {
    let redis = client(&e2e::stack::redis_url()).await.unwrap();
    let campaign = e2e::stack::unique("rq");
    publish(&redis, &campaign, 100, 1).await;
    let shop = shop().await;
    let mut conf =
        GatewayConf::new(&e2e::stack::redis_url(), "127.0.0.1:1", &campaign, "[limits]\nip_per_sec = 1");
    conf.routes = shop_route(&shop);
    conf.server_extra = "trusted_proxies = [\"127.0.0.0/8\"]".into();
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();

    let resp = http
        .get(gw.url("/page/lines"))
        .header("x-forwarded-for", "1.1.1.1")
        .header("x-forwarded-for", "198.51.100.7")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = shop.received_requests().await.unwrap();
    let req = seen.iter().find(|r| r.url.path() == "/page/lines").expect("proxied");
    assert_eq!(req.headers.get("x-real-ip").unwrap(), "198.51.100.7");
    assert_eq!(req.headers.get("x-forwarded-for").unwrap(), "1.1.1.1, 198.51.100.7, 127.0.0.1");

    // One client behind the proxy forges a new first line on every order: the proxy's line
    // still names it, and its second order within a second is limited.
    let mut limited = 0;
    for i in 0..6 {
        let user = format!("forger-{i}");
        let login = auth().login(&user, serde_json::json!({}));
        let token_ip = format!("192.0.2.{i}");
        let ticket = e2e::client::get_ticket_with(
            &http,
            &gw.url(""),
            &campaign,
            &login,
            &format!("dev-{user}"),
            &[("x-forwarded-for", &token_ip)],
        )
        .await
        .unwrap();
        let signed = ticket.sign(1, chrono::Utc::now().timestamp(), &e2e::client::nonce());
        let forged = format!("203.0.113.{i}");
        let lines = [("x-forwarded-for", forged.as_str()), ("x-forwarded-for", "198.51.100.7")];
        let (status, body) = ticket.send_with(&http, &gw.url(""), &signed, &lines).await;
        match body["code"].as_str() {
            Some("RATE_LIMITED") => limited += 1,
            _ => assert_eq!(status, 202, "{body}"),
        }
    }
    assert!(limited >= 1, "one client past 1 request/s is limited whatever its first line says");
}
