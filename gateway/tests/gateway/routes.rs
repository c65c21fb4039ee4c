//! Answers of the edge itself, shop routes, header stripping, isolation of a flooded campaign.

use std::collections::HashMap;

use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

fn shop_route(upstream: &MockServer) -> String {
    format!("[[route]]\nname = \"shop\"\npath_prefix = \"/\"\nupstreams = [\"{}\"]\n", upstream.address())
}

#[tokio::test]
async fn bad_input_unknown_campaign_window_and_missing_route() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let (open, unpublished) =
        (fixtures::cleanup::Campaign::new("gw"), fixtures::cleanup::Campaign::new("gw"));
    let (early, late) = (fixtures::cleanup::Campaign::new("gw"), fixtures::cleanup::Campaign::new("gw"));
    publish(&redis, &open, 10, 2).await;
    let upstream = MockServer::start().await;
    let mut conf =
        GatewayConf::new(&fixtures::stack::redis_url(), &upstream.address().to_string(), &open, "");
    conf.campaigns.push((unpublished.clone(), campaign_toml(&unpublished, "")));
    conf.campaigns.push((early.clone(), window_toml(&early, "future", "")));
    conf.campaigns.push((late.clone(), window_toml(&late, "past", "")));
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let url = gw.url(&format!("/seckill/{open}/order"));

    let cases: Vec<(reqwest::RequestBuilder, u16, &str, &str)> = vec![
        (http.post(&url), 401, "BAD_TOKEN", "Bearer"),
        (http.post(&url).header("x-user-id", "u"), 401, "BAD_TOKEN", "Bearer"),
        (http.post(&url).header("x-device-id", "has space"), 400, "BAD_REQUEST", "x-device-id"),
        (http.post(&url).header("x-device-id", "a".repeat(129)), 400, "BAD_REQUEST", "1 to 128"),
        (http.post(format!("{url}?qty=0")), 400, "BAD_REQUEST", "qty"),
        (http.post(format!("{url}?qty=abc")), 400, "BAD_REQUEST", "qty"),
        (http.get(&url), 400, "BAD_REQUEST", "POST"),
        (http.post(gw.url("/seckill/nope/order")), 404, "CAMPAIGN_UNKNOWN", ""),
        (http.post(gw.url("/seckill/nope/token")), 404, "CAMPAIGN_UNKNOWN", ""),
        (http.post(gw.url(&format!("/seckill/{early}/order"))), 425, "NOT_STARTED", ""),
        (http.post(gw.url(&format!("/seckill/{early}/abcdef/order"))), 425, "NOT_STARTED", ""),
        (http.post(gw.url(&format!("/seckill/{early}/captcha"))), 425, "NOT_STARTED", ""),
        (http.post(gw.url(&format!("/seckill/{early}/token"))), 425, "NOT_STARTED", ""),
        (http.post(gw.url(&format!("/seckill/{late}/order"))), 410, "ENDED", ""),
        (http.post(gw.url(&format!("/seckill/{open}/token"))), 400, "BAD_REQUEST", "x-device-id is required"),
        (
            http.post(gw.url(&format!("/seckill/{open}/token"))).header("x-device-id", "d"),
            401,
            "BAD_LOGIN",
            "",
        ),
        (http.get(gw.url("/anything")), 404, "ROUTE_NOT_FOUND", ""),
        (http.get(gw.url("/seckill/x/other")), 404, "ROUTE_NOT_FOUND", ""),
    ];
    for (req, status, code, words) in cases {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.headers()["content-type"], "application/json");
        let got = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{body}");
        assert!(body["message"].as_str().unwrap().contains(words), "{body}");
        assert!(!body["request_id"].as_str().unwrap().is_empty());
    }
    // The quantity against the limit, and an unpublished campaign, are Redis' answers: they
    // take a valid signed order.
    let t = ticket(&http, &gw, &open, "qty-3").await.unwrap();
    let (status, body) = t.order(&http, &gw.url(""), 3).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("BAD_REQUEST")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("between 1 and 2"), "{body}");
    let (status, body) = order(&http, &gw, &unpublished, "u").await;
    assert_eq!((status, body["code"].as_str()), (409, Some("CAMPAIGN_NOT_READY")), "{body}");
    assert!(upstream.received_requests().await.unwrap().is_empty(), "nothing was forwarded");
    let stock: i64 =
        fred::prelude::KeysInterface::get(&redis, protocol::keys::CampaignKeys::new(&open).stock)
            .await
            .unwrap();
    assert_eq!(stock, 10, "nothing was reserved");

    // Info: server time and state, cacheable for a second.
    let resp = http.get(gw.url(&format!("/seckill/{early}/info"))).send().await.unwrap();
    assert_eq!(resp.headers()["cache-control"], "max-age=1");
    let info: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(info["state"], "NOT_STARTED");
    assert!(info["server_time_ms"].as_i64().unwrap() > 0);
    assert!(info["starts_at"].as_str().is_some() && info["ends_at"].as_str().is_some());
    let info: serde_json::Value =
        http.get(gw.url(&format!("/seckill/{open}/info"))).send().await.unwrap().json().await.unwrap();
    assert_eq!((info["state"].as_str(), info["switches"]["closed"].as_bool()), (Some("OPEN"), Some(false)));
}

#[tokio::test]
async fn an_order_is_answered_at_the_edge_and_only_results_reach_the_order_writer() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    publish(&redis, &campaign, 10, 1).await;
    let writer = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex("^/seckill/.+/result/.+$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({"code": "SUCCESS"})))
        .mount(&writer)
        .await;
    let shop = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("page"))
        .mount(&shop)
        .await;
    let mut conf =
        GatewayConf::new(&fixtures::stack::redis_url(), &writer.address().to_string(), &campaign, "");
    conf.routes = shop_route(&shop);
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    // Shop route: proxied as is.
    let resp = http.get(gw.url("/catalog?page=2")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "page");
    let seen = shop.received_requests().await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].url.path(), seen[0].url.query()), ("/catalog", Some("page=2")));

    // Order: answered by the gateway itself; nothing reaches the order writer.
    let (status, body) = order(&http, &gw, &campaign, "strip-1").await;
    assert_eq!(status, 202, "{body}");
    assert!(writer.received_requests().await.unwrap().is_empty(), "an order is not forwarded");
    // Result query: proxied to the order writer.
    let resp = http
        .get(gw.url(&format!("/seckill/{campaign}/result/abc")))
        .header("x-result-token", result_token(&campaign, "u", "abc"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["code"], "SUCCESS");

    let seen = writer.received_requests().await.unwrap();
    assert_eq!(seen.len(), 1, "only the result query");
    assert_eq!(seen[0].url.path(), format!("/seckill/{campaign}/result/abc"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flooded_campaign_does_not_take_the_shop_down() {
    // A private Redis kept busy by a slow script holds reservations in flight (each waits for its
    // bounded timeout and undo), so the campaign's budget of 4 fills up.
    let private = PrivateRedis::start(&[]).await;
    let redis = client(&private.url()).await.unwrap();
    let campaign = fixtures::stack::unique("gw");
    publish(&redis, &campaign, 100_000, 1).await;
    let writer = MockServer::start().await;
    let shop = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .mount(&shop)
        .await;
    let mut conf = GatewayConf::new(
        &private.url(),
        &writer.address().to_string(),
        &campaign,
        "[limits]\nmax_inflight = 4",
    );
    conf.routes = shop_route(&shop);
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();

    // The buyers get their tokens first (the token endpoint spends the captcha in Redis);
    // the orders go out only once Redis is busy.
    let tickets = futures::future::join_all((0..300).map(|i| {
        let (http, gw, campaign) = (&http, &gw, &campaign);
        async move { ticket(http, gw, campaign, &format!("flood-{i}")).await.unwrap() }
    }))
    .await;
    let stall = stall_redis(&private.url(), 1500).await;

    let flood = futures::future::join_all(tickets.iter().map(|t| {
        let (http, base) = (&http, gw.url(""));
        async move { t.order(http, &base, 1).await }
    }));
    let shopping = futures::future::join_all((0..100).map(|i| {
        let (http, gw) = (&http, &gw);
        async move {
            let resp = http.get(gw.url(&format!("/product/{i}"))).send().await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    }));
    let (flood, shopping) = tokio::join!(flood, shopping);
    assert_eq!(stall.await.unwrap().unwrap(), 1);

    assert!(shopping.iter().all(|(s, body)| *s == 200 && body == "ok"), "every shop request succeeded");
    let mut codes: HashMap<String, usize> = HashMap::new();
    for (status, body) in &flood {
        let code = body["code"].as_str().unwrap_or("?").to_string();
        assert!(
            matches!((status, code.as_str()), (202, _) | (429, "TRY_LATER") | (503, "SERVICE_DEGRADED")),
            "{status} {body}"
        );
        *codes.entry(code).or_default() += 1;
    }
    assert!(
        codes.get("TRY_LATER").copied().unwrap_or(0) > 0,
        "the campaign's budget refused some: {codes:?}"
    );
}

#[tokio::test]
async fn per_user_rate_limit_answers_rate_limited() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    publish(&redis, &campaign, 10, 1).await;
    let upstream = MockServer::start().await;
    let gw = Gateway::on_stack(&upstream, &campaign, "[limits]\nuser_per_sec = 2").await;
    let http = reqwest::Client::new();
    let eager = ticket(&http, &gw, &campaign, "eager").await.unwrap();
    let mut limited = 0;
    for _ in 0..10 {
        let (status, body) = eager.order(&http, &gw.url(""), 1).await;
        if body["code"] == "RATE_LIMITED" {
            assert_eq!(status, 429);
            limited += 1;
        }
    }
    // At most two per one-second window pass (the estimator's windows are fixed, so how many
    // are refused depends on where the boundaries fall; at least one is).
    assert!(limited >= 1, "some were rate limited");
    let (status, _) = order(&http, &gw, &campaign, "calm").await;
    assert_eq!(status, 202, "another user is not limited");
}

#[tokio::test]
async fn a_dead_upstream_is_skipped_in_both_pools() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    publish(&redis, &campaign, 100, 1).await;
    let writer = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({"via": "order-writer"})))
        .mount(&writer)
        .await;
    let shop = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .mount(&shop)
        .await;
    let dead = format!("127.0.0.1:{}", free_port());

    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), &dead, &campaign, "");
    conf.order_writer.push(writer.address().to_string());
    conf.order_writer_extra = "health_check_interval_ms = 100".into();
    conf.routes = format!(
        "[[route]]\nname = \"shop\"\npath_prefix = \"/\"\nupstreams = [\"{dead}\", \"{}\"]\nhealth_check_interval_ms = 100\n",
        shop.address()
    );
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    for i in 0..10 {
        let resp = http
            .get(gw.url(&format!("/seckill/{campaign}/result/hc-{i}")))
            .header("x-result-token", result_token(&campaign, "u", &format!("hc-{i}")))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(
            (status, body["via"].as_str()),
            (200, Some("order-writer")),
            "reached the live writer: {body}"
        );
        let resp = http.get(gw.url("/p")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "reached the live shop upstream");
    }
    assert_eq!(writer.received_requests().await.unwrap().len(), 10);
}

#[tokio::test]
async fn unreachable_upstreams_answer_502_html_to_the_shop_and_json_to_the_sale() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    publish(&redis, &campaign, 10, 1).await;
    let dead = format!("127.0.0.1:{}", free_port());
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), &dead, &campaign, "");
    conf.order_writer_extra = "health_check_interval_ms = 100".into();
    conf.routes = format!(
        "[[route]]\nname = \"shop\"\npath_prefix = \"/\"\nupstreams = [\"{dead}\"]\nhealth_check_interval_ms = 100\n"
    );
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    // Before and after the health check marks the address down: a refused connect, then no
    // healthy address; both are the upstream's fault, never a 500.
    for _ in 0..3 {
        // A shop visitor reads an HTML page, as from Nginx; the sale's answer stays JSON.
        let shop = http.get(gw.url("/p")).send().await.unwrap();
        assert_eq!(
            (shop.status().as_u16(), shop.headers()["content-type"].to_str().unwrap()),
            (502, "text/html")
        );
        assert!(shop.text().await.unwrap().contains("<h1>502 Bad Gateway</h1>"));
        let result = http
            .get(gw.url(&format!("/seckill/{campaign}/result/some-id")))
            .header("x-result-token", result_token(&campaign, "u", "some-id"))
            .send()
            .await
            .unwrap();
        assert_eq!(result.status(), 502);
        let body: serde_json::Value = result.json().await.unwrap();
        assert_eq!(body["code"], "UPSTREAM_UNAVAILABLE", "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    // An order still reserves and is answered QUEUED: the record waits in the outbox.
    let (status, body) = order(&http, &gw, &campaign, "buyer").await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
}

/// Upstreams learn who the client is; a client's own `X-Forwarded-For` counts only behind a
/// proxy listed in `server.trusted_proxies`, and the IP rate limit keys on the same address.
#[tokio::test]
async fn forwarded_headers_and_ip_limits_trust_only_listed_proxies() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    publish(&redis, &campaign, 100, 1).await;
    let writer = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(200)).mount(&writer).await;
    let shop = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(200)).mount(&shop).await;
    let http = reqwest::Client::new();
    // What the shop saw of the request tagged `step` (by path: a request the proxy had to send
    // twice on a stale pooled connection must not shift what the next step looks at).
    let seen_by_shop = |step: &'static str| {
        let shop = &shop;
        async move {
            let seen = shop.received_requests().await.unwrap();
            let req = seen.iter().rev().find(|r| r.url.path() == format!("/page/{step}")).expect("proxied");
            let h = |name: &str| req.headers.get(name).map(|v| v.to_str().unwrap().to_string());
            (h("x-forwarded-for"), h("x-real-ip"), h("x-forwarded-proto"))
        }
    };

    // Nobody trusted (the default): the peer is the client, whatever it sends.
    let mut conf =
        GatewayConf::new(&fixtures::stack::redis_url(), &writer.address().to_string(), &campaign, "");
    conf.routes = shop_route(&shop);
    let plain = Gateway::start(&conf).await;
    let resp = http
        .get(plain.url("/page/plain"))
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-real-ip", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let local = Some("127.0.0.1".to_string());
    assert_eq!(seen_by_shop("plain").await, (local.clone(), local.clone(), Some("http".into())));

    // Behind a trusted proxy (loopback here): the rightmost untrusted address is the client.
    conf.server_extra = "trusted_proxies = [\"127.0.0.0/8\"]".into();
    conf.campaigns = vec![(campaign.clone(), campaign_toml(&campaign, "[limits]\nip_per_sec = 1"))];
    let behind = Gateway::start(&conf).await;
    let resp = http
        .get(behind.url("/page/behind"))
        .header("x-forwarded-for", "1.1.1.1, 203.0.113.9")
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        seen_by_shop("behind").await,
        (Some("1.1.1.1, 203.0.113.9, 127.0.0.1".into()), Some("203.0.113.9".into()), Some("https".into()))
    );

    // The IP limit counts that client, not the proxy: one client hammering is limited, another
    // client behind the same proxy is not.
    // (Each buyer gets its token from an address of its own: tokens are limited apart.)
    let order_from = |ip: &'static str, user: String, i: usize| {
        let (http, base, campaign) = (http.clone(), behind.url(""), campaign.clone());
        async move {
            let login = auth().login(&user, serde_json::json!({}));
            let token_ip = format!("192.0.2.{i}");
            let ticket = fixtures::client::get_ticket_with(
                &http,
                &base,
                &campaign,
                &login,
                &format!("dev-{user}"),
                &[("x-forwarded-for", &token_ip)],
            )
            .await
            .unwrap();
            let signed = ticket.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
            let (status, body) = ticket.send_with(&http, &base, &signed, &[("x-forwarded-for", ip)]).await;
            (status, body["code"].as_str().unwrap_or_default().to_string())
        }
    };
    let mut limited = 0;
    for i in 0..6 {
        let (status, code) = order_from("198.51.100.7", format!("hammer-{i}"), i).await;
        if code == "RATE_LIMITED" {
            assert_eq!(status, 429);
            limited += 1;
        }
    }
    assert!(limited >= 1, "one client past 1 request/s is limited");
    assert_eq!(order_from("198.51.100.8", "calm".into(), 100).await, (202, "QUEUED".to_string()));
    // The order writer (result queries) learns the client behind the proxy too.
    let resp = http
        .get(behind.url(&format!("/seckill/{campaign}/result/calm")))
        .header("x-forwarded-for", "198.51.100.8")
        .header("x-result-token", result_token(&campaign, "calm", "calm"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = writer.received_requests().await.unwrap();
    let forwarded = seen.last().expect("the result query was proxied");
    assert_eq!(forwarded.headers.get("x-real-ip").unwrap(), "198.51.100.8");
}
