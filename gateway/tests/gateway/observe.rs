//! The admin listener (`/metrics`, `/healthz`, `/readyz`) and the access log of a gateway
//! process: the counts a few answers produce, the fields of each access line, the id carried
//! upstream, and the file reopened on SIGUSR1 after a rename (logrotate's way).

use std::time::Duration;

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A gateway over the stack's Redis with a campaign of `stock`, a shop route to `upstream`, the
/// admin listener on a free port and a text access log in its folder.
async fn observed(campaign: &str, stock: i64, upstream: &MockServer, redis_url: &str) -> (Gateway, u16) {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    publish(&redis, campaign, stock, 1).await;
    let admin = free_port();
    let mut conf = GatewayConf::new(redis_url, &upstream.address().to_string(), campaign, "");
    conf.sold_out_ttl_ms = 60_000;
    conf.routes = format!(
        "[[route]]\nname = \"shop\"\npath_prefix = \"/\"\nupstreams = [\"{}\"]\n",
        upstream.address()
    );
    conf.tables = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[access_log]\noutput = \"access.log\"\nformat = \"text\"\n"
    );
    (Gateway::start(&conf).await, admin)
}

/// The access log's lines but the start probe's (`Gateway::start`), once it has at least `n`
/// (at most 5 s).
async fn lines(gw: &Gateway, n: usize) -> Vec<String> {
    let file = gw.dir.join("access.log");
    let read = || {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        text.lines().filter(|l| !l.contains("/seckill/probe/info")).map(String::from).collect::<Vec<_>>()
    };
    let enough = eventually(Duration::from_secs(5), || async { read().len() >= n }).await;
    let got: Vec<String> = read();
    assert!(enough, "{} access lines, expected {n}:\n{}", got.len(), got.join("\n"));
    got
}

#[tokio::test]
async fn metrics_count_the_answers_and_access_lines_tell_each_request() {
    let campaign = fixtures::cleanup::Campaign::new("gw");
    let upstream = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("shop"))
        .mount(&upstream)
        .await;
    let (gw, admin) = observed(&campaign, 2, &upstream, &fixtures::stack::redis_url()).await;
    let http = reqwest::Client::new();
    let admin_url = |path: &str| format!("http://127.0.0.1:{admin}{path}");

    // Two reservations, then sold out (the flag is set), then the local flag answers.
    let mut ids = Vec::new();
    for (user, code) in [("o-1", "QUEUED"), ("o-2", "QUEUED"), ("o-3", "SOLD_OUT"), ("o-4", "SOLD_OUT")] {
        let (_, body) = order(&http, &gw, &campaign, user).await;
        assert_eq!(body["code"].as_str(), Some(code), "{body}");
        ids.push(body["request_id"].as_str().unwrap().to_string());
    }
    let info = http.get(gw.url(&format!("/seckill/{campaign}/info"))).send().await.unwrap();
    assert_eq!(info.status().as_u16(), 200);
    let shop =
        http.get(gw.url("/catalog?page=2")).header("x-request-id", "client-made").send().await.unwrap();
    assert_eq!(shop.status().as_u16(), 200);
    let unknown = order(&http, &gw, "no-such-campaign", "o-5").await;
    assert_eq!(unknown.1["code"], "CAMPAIGN_UNKNOWN");

    // /metrics, /healthz, /readyz. A request is counted in its logging phase, after its answer
    // is written: scrape until the last one (the unknown campaign's) is in, 5 s at most.
    let mut m = scrape(&http, &admin_url("/metrics")).await;
    for _ in 0..50 {
        let last = sample(
            &m,
            "seckill_gateway_order_answers_total",
            &[("campaign", "(unknown)"), ("code", "CAMPAIGN_UNKNOWN")],
        );
        if last >= 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        m = scrape(&http, &admin_url("/metrics")).await;
    }
    let answers = |c: &str, code: &str| {
        sample(&m, "seckill_gateway_order_answers_total", &[("campaign", c), ("code", code)])
    };
    // o-3's order is refused SOLD_OUT (it sets the flag); o-4 is refused at the token endpoint.
    assert_eq!(answers(&campaign, "QUEUED"), 2.0);
    assert_eq!(answers(&campaign, "SOLD_OUT"), 2.0);
    assert_eq!(answers(&campaign, "LIMIT_REACHED"), 0.0);
    assert_eq!(answers("(unknown)", "CAMPAIGN_UNKNOWN"), 1.0);
    let count =
        |route: &str| sample(&m, "seckill_gateway_request_duration_seconds_count", &[("route", route)]);
    assert_eq!(
        (count("order"), count("token"), count("info"), count("shop")),
        (3.0, 9.0, 2.0, 1.0),
        "orders of o-1..o-3; captcha and token of o-1..o-4 and the unknown campaign's captcha; \
         info: ours and the start probe"
    );
    assert_eq!(sample(&m, "seckill_gateway_responses_total", &[("route", "order"), ("class", "2xx")]), 2.0);
    assert_eq!(sample(&m, "seckill_gateway_responses_total", &[("route", "order"), ("class", "4xx")]), 1.0);
    assert_eq!(
        sample(&m, "seckill_gateway_reserve_duration_seconds_count", &[]),
        3.0,
        "o-4 never reached Redis"
    );
    assert_eq!(sample(&m, "seckill_gateway_sold_out", &[("campaign", &campaign)]), 1.0);
    assert_eq!(sample(&m, "seckill_gateway_kafka_queue_capacity", &[]), 100_000.0);
    assert!(sample(&m, "seckill_gateway_redis_connected", &[]) >= 1.0);
    let health = http.get(admin_url("/healthz")).send().await.unwrap();
    let ready = http.get(admin_url("/readyz")).send().await.unwrap();
    assert_eq!((health.status().as_u16(), ready.status().as_u16()), (200, 200));

    // One access line per request, every field in place.
    let every = lines(&gw, 14).await;
    assert_eq!(every.len(), 14, "3 + 3 + 3 + 2 of the buyers, info, shop, the unknown campaign's captcha");
    let fields = |line: &str| line.split(' ').map(String::from).collect::<Vec<_>>();
    let is_order = |l: &&String| fields(l)[3].split('?').next().is_some_and(|p| p.ends_with("/order"));
    let all: Vec<String> = every.iter().filter(is_order).cloned().collect();
    let first = fields(&all[0]);
    assert!(first[0].ends_with('Z') && first[0].contains('T'), "{}", all[0]);
    assert_eq!(&first[1..3], ["127.0.0.1", "\"POST"]);
    assert!(first[3].starts_with(&format!("/seckill/{campaign}/")), "the hidden path: {}", all[0]);
    assert_eq!(first[4], "HTTP/1.1\"");
    assert_eq!((first[5].as_str(), first[9].as_str(), first[10].as_str()), ("202", "-", "QUEUED"));
    assert!(first[6].parse::<usize>().unwrap() > 50, "body bytes: {}", all[0]);
    assert!(first[7].parse::<f64>().unwrap() > 0.0, "request time: {}", all[0]);
    assert_eq!(first[11], ids[0], "the answer's request id");
    let codes: Vec<String> = all.iter().map(|l| fields(l)[10].clone()).collect();
    assert_eq!(codes, ["QUEUED", "QUEUED", "SOLD_OUT"]);
    assert!(all.iter().zip(&ids).all(|(l, id)| l.ends_with(id.as_str())));
    let shop_line = every.iter().find(|l| l.contains("/catalog?page=2")).expect("the shop line");
    let f = fields(shop_line);
    assert_eq!(
        (f[5].as_str(), f[8].as_str(), f[10].as_str()),
        ("200", upstream.address().to_string().as_str(), "-")
    );
    assert!(f[9].parse::<f64>().unwrap() > 0.0, "upstream time: {shop_line}");
    let sent = upstream.received_requests().await.unwrap();
    let carried = sent[0].headers.get("x-request-id").unwrap().to_str().unwrap();
    assert_eq!(carried, f[11], "the upstream got the line's id, not the client's");
}

#[tokio::test]
async fn sigusr1_reopens_the_access_log_after_a_rename() {
    let campaign = fixtures::cleanup::Campaign::new("gw");
    let upstream = MockServer::start().await;
    let (gw, _) = observed(&campaign, 10, &upstream, &fixtures::stack::redis_url()).await;
    let http = reqwest::Client::new();
    order(&http, &gw, &campaign, "r-1").await;
    lines(&gw, 3).await; // its captcha, token and order lines

    let (file, rotated) = (gw.dir.join("access.log"), gw.dir.join("access.log.1"));
    std::fs::rename(&file, &rotated).unwrap();
    gw.signal("-USR1");
    assert!(eventually(Duration::from_secs(5), || async { file.exists() }).await, "reopened");
    let (_, body) = order(&http, &gw, &campaign, "r-2").await;
    let after = lines(&gw, 3).await;
    assert_eq!(after.len(), 3, "r-2's captcha, token and order, in the new file only");
    assert!(after[2].ends_with(body["request_id"].as_str().unwrap()), "{after:?}");
    let before = std::fs::read_to_string(&rotated).unwrap();
    assert!(
        before.lines().last().unwrap().contains("QUEUED"),
        "the renamed file keeps what was written before: {before}"
    );
    assert!(!before.contains(body["request_id"].as_str().unwrap()));
    assert!(gw.log().contains("access log reopened"), "{}", gw.log());
}

#[tokio::test]
async fn readyz_says_not_ready_while_redis_cannot_be_reached() {
    let campaign = fixtures::cleanup::Campaign::new("gw");
    let upstream = MockServer::start().await;
    let dead_redis = format!("redis://127.0.0.1:{}", free_port());
    let (_gw, admin) = observed(&campaign, 1, &upstream, &dead_redis).await;
    let http = reqwest::Client::new();
    let health = http.get(format!("http://127.0.0.1:{admin}/healthz")).send().await.unwrap();
    let ready = http.get(format!("http://127.0.0.1:{admin}/readyz")).send().await.unwrap();
    assert_eq!((health.status().as_u16(), ready.status().as_u16()), (200, 503));
    assert!(ready.text().await.unwrap().contains("Redis"));
    let other = http.get(format!("http://127.0.0.1:{admin}/nope")).send().await.unwrap();
    assert_eq!(other.status().as_u16(), 404);
}

#[tokio::test]
async fn a_request_refused_before_it_is_parsed_has_its_access_line_too() {
    let campaign = fixtures::cleanup::Campaign::new("gw");
    let upstream = MockServer::start().await;
    let (gw, _) = observed(&campaign, 1, &upstream, &fixtures::stack::redis_url()).await;
    // A 70 KB header: the front door answers 431 before the proxy sees the request.
    let resp = reqwest::Client::new()
        .get(gw.url("/catalog"))
        .header("x-padding", "a".repeat(70 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 431);
    let body: serde_json::Value = resp.json().await.unwrap();
    let all = lines(&gw, 1).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let f: Vec<&str> = all[0].split(' ').collect();
    assert_eq!(&f[1..5], ["127.0.0.1", "\"-", "-", "-\""], "{}", all[0]);
    assert_eq!((f[5], f[10], f[11]), ("431", "HEADERS_TOO_LARGE", body["request_id"].as_str().unwrap()));
    assert!(upstream.received_requests().await.unwrap().is_empty(), "nothing reached the upstream");
}
