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
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("rq");
    publish(&redis, &campaign, 100, 1).await;
    let shop = shop().await;
    let mut conf =
        GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "[limits]\nip_per_sec = 1");
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
        let ticket = fixtures::client::get_ticket_with(
            &http,
            &gw.url(""),
            &campaign,
            &login,
            &format!("dev-{user}"),
            &[("x-forwarded-for", &token_ip)],
        )
        .await
        .unwrap();
        let signed = ticket.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
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

/// Sends `signed` with its headers in the usual order, then a second line `extra` of one of them.
async fn order_with_second(
    http: &reqwest::Client,
    base: &str,
    t: &fixtures::client::Ticket,
    signed: &fixtures::client::SignedOrder,
    extra: (&str, &str),
) -> (u16, serde_json::Value) {
    let url = format!("{base}{}?{}", signed.path, signed.query);
    let resp = http
        .post(url)
        .bearer_auth(&t.token)
        .header("x-device-id", &t.device)
        .header("x-timestamp", &signed.timestamp)
        .header("x-nonce", &signed.nonce)
        .header("x-signature", &signed.signature)
        .header(extra.0, extra.1)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or_default())
}

/// A header the sale reads, given twice (the genuine value first, another after it, as a probe
/// did): ambiguous, refused 400 with a reason naming the header, and nothing reserved. The same
/// for the login at the token endpoint, and for two `Host` or `Content-Length` on any path.
#[tokio::test]
async fn a_second_value_of_a_header_the_sale_reads_is_refused() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("rq");
    publish(&redis, &campaign, 10, 1).await;
    let shop = shop().await;
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.routes = shop_route(&shop);
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let t = ticket(&http, &gw, &campaign, "alice").await.unwrap();
    let now = || chrono::Utc::now().timestamp();

    let forged_sig = "0".repeat(64);
    let ts = now().to_string();
    let seconds: [(&str, &str); 5] = [
        ("authorization", "Bearer another.token.here"),
        ("x-device-id", "dev-mallory"),
        ("x-timestamp", &ts),
        ("x-nonce", "another-nonce-0001"),
        ("x-signature", &forged_sig),
    ];
    for (name, value) in seconds {
        let signed = t.sign(1, now(), &fixtures::client::nonce());
        let (status, body) = order_with_second(&http, &gw.url(""), &t, &signed, (name, value)).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("BAD_REQUEST")), "two {name}: {body}");
        let message = body["message"].as_str().unwrap_or_default().to_ascii_lowercase();
        assert!(message.contains(name), "the reason names {name}: {body}");
    }
    let keys = protocol::keys::CampaignKeys::new(&campaign);
    let stock: i64 = fred::interfaces::KeysInterface::get(&redis, &keys.stock).await.unwrap();
    assert_eq!(stock, 10, "no ambiguous order reserved anything");

    // The login at the token endpoint, given twice.
    let login = auth().login("bob", serde_json::json!({}));
    let resp = http
        .post(gw.url(&format!("/seckill/{campaign}/token")))
        .bearer_auth(&login)
        .bearer_auth(auth().login("mallory", serde_json::json!({})))
        .header("x-device-id", "dev-bob")
        .json(&serde_json::json!({"challenge": "x", "answer": "y"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "BAD_REQUEST", "{body}");

    // Two Host, two Content-Length: on the sale's paths and on a shop route alike, as Nginx.
    let info = format!("/seckill/{campaign}/info");
    for target in [info.as_str(), "/page/shop"] {
        let two_hosts = format!("GET {target} HTTP/1.1\r\nHost: www.shop\r\nHost: admin.shop\r\n\r\n");
        let two_lengths = format!(
            "POST {target} HTTP/1.1\r\nHost: www.shop\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{{}}"
        );
        for (what, raw) in [("two Host", two_hosts), ("two Content-Length", two_lengths)] {
            let answer = crate::limits::send_raw(gw.port, raw.as_bytes()).await;
            let answer = answer.unwrap_or_else(|| panic!("{what} on {target}: no answer"));
            assert_eq!(
                (answer.status, answer.code().as_str()),
                (400, "BAD_REQUEST"),
                "{what} on {target}: {answer:?}"
            );
        }
    }
    // The genuine order still goes through.
    let (status, body) = t.order(&http, &gw.url(""), 1).await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");

    // A result query with its own token and a second one.
    let id = body["request_id"].as_str().unwrap();
    let resp = http
        .get(gw.url(&format!("/seckill/{campaign}/result/{id}")))
        .header("x-result-token", body["result_token"].as_str().unwrap())
        .header("x-result-token", result_token(&campaign, "mallory", id))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().to_ascii_lowercase().contains("x-result-token"), "{body}");
}

/// The sale's own headers (the order signature, the payment callback's, the record's) are the
/// sale's business: a proxied request, to a shop route or a result query, carries none of them;
/// the shop's login (`Authorization`) goes on.
#[tokio::test]
async fn the_sales_own_headers_never_reach_an_upstream() {
    let campaign = fixtures::cleanup::Campaign::new("rq");
    let (shop, writer) = (shop().await, shop().await);
    let mut conf =
        GatewayConf::new(&fixtures::stack::redis_url(), &writer.address().to_string(), &campaign, "");
    conf.routes = shop_route(&shop);
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let owned = [
        "x-signature",
        "x-nonce",
        "x-timestamp",
        "x-payment-signature",
        "x-payment-timestamp",
        "seckill-signature",
        "x-result-token",
    ];
    let send = |path: String| {
        let mut req = http.get(gw.url(&path)).header("authorization", "Bearer shop-login");
        if path.contains("/result/") {
            // The result token is the sale's: checked at the edge, then stripped.
            req = req.header("x-result-token", result_token(&campaign, "u", "some-id"));
        }
        for name in owned.iter().filter(|n| **n != "x-result-token") {
            req = req.header(*name, "client-value");
        }
        req.send()
    };
    assert_eq!(send("/account/orders".into()).await.unwrap().status(), 200);
    assert_eq!(send(format!("/seckill/{campaign}/result/some-id")).await.unwrap().status(), 200);
    for (upstream, path) in
        [(&shop, "/account/orders".to_string()), (&writer, format!("/seckill/{campaign}/result/some-id"))]
    {
        let seen = upstream.received_requests().await.unwrap();
        let req = seen.iter().find(|r| r.url.path() == path).expect("proxied");
        for name in owned {
            assert!(req.headers.get(name).is_none(), "{name} reached {path}");
        }
        assert_eq!(req.headers.get("authorization").unwrap(), "Bearer shop-login", "{path}");
    }
}

/// An absolute-form target (`GET http://admin.shop/ HTTP/1.1`) beside another `Host`: the
/// target's authority wins and replaces `Host` (RFC 9112 section 3.2.2), so the route chosen
/// and the host the upstream is told are the same one.
#[tokio::test]
async fn an_absolute_form_target_routes_and_proxies_by_its_authority() {
    let campaign = fixtures::cleanup::Campaign::new("rq");
    let (www, admin) = (shop().await, shop().await);
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.routes = format!(
        "[[route]]\nname = \"www\"\nhost = \"www.shop\"\npath_prefix = \"/\"\nupstreams = [\"{}\"]\n\n\
         [[route]]\nname = \"admin\"\nhost = \"admin.shop\"\npath_prefix = \"/\"\nupstreams = [\"{}\"]\n",
        www.address(),
        admin.address()
    );
    let gw = Gateway::start(&conf).await;
    let raw = b"GET http://admin.shop/panel HTTP/1.1\r\nHost: www.shop\r\nConnection: close\r\n\r\n";
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut conn, raw).await.unwrap();
    let answer = crate::limits::read_answer(&mut conn).await.expect("an answer");
    assert_eq!(answer.status, 200, "{answer:?}");
    let to_admin = admin.received_requests().await.unwrap();
    let to_www = www.received_requests().await.unwrap();
    assert_eq!((to_admin.len(), to_www.len()), (1, 0), "routed by the target's authority");
    assert_eq!(to_admin[0].url.path(), "/panel");
    assert_eq!(to_admin[0].headers.get("host").unwrap(), "admin.shop", "the upstream is told the same host");
    // Two Host fields beside it: ambiguous, refused with the JSON answer.
    let two = b"GET http://admin.shop/panel HTTP/1.1\r\nHost: www.shop\r\nHost: admin.shop\r\n\r\n";
    let answer = crate::limits::send_raw(gw.port, two).await.expect("an answer");
    assert_eq!((answer.status, answer.code().as_str()), (400, "BAD_REQUEST"), "{answer:?}");
    assert_eq!(admin.received_requests().await.unwrap().len(), 1);
}

/// Framing the gateway cannot trust and bodies past the order's 4 KB cap get the JSON answer
/// every other refusal gets, with one code each: a `Content-Length` that is a list or not
/// digits, an unknown `Transfer-Encoding` (400 `BAD_REQUEST`), an order body past the cap,
/// declared or chunked (413 `BODY_TOO_LARGE`).
#[tokio::test]
async fn framing_and_body_size_refusals_are_json_with_one_code() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("rq");
    publish(&redis, &campaign, 10, 1).await;
    let conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let info = format!("/seckill/{campaign}/info");
    let framing = [
        (
            "a Content-Length list",
            format!("POST {info} HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 2\r\n\r\n{{}}"),
        ),
        (
            "two lengths in a list",
            format!("POST {info} HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 3\r\n\r\n{{}}"),
        ),
        ("a signed length", format!("POST {info} HTTP/1.1\r\nHost: a\r\nContent-Length: +2\r\n\r\n{{}}")),
        ("an unknown coding", format!("POST {info} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n")),
        (
            "a coding before chunked",
            format!("POST {info} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ),
    ];
    for (what, raw) in framing {
        let answer = crate::limits::send_raw(gw.port, raw.as_bytes()).await;
        let answer = answer.unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!((answer.status, answer.code().as_str()), (400, "BAD_REQUEST"), "{what}: {answer:?}");
    }

    // An order whose body is past 4 KB: declared, then chunked; both 413, nothing reserved.
    let t = ticket(&http, &gw, &campaign, "alice").await.unwrap();
    let mut big = t.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
    big.body = vec![b'x'; 5000];
    let (status, body) = t.send(&http, &gw.url(""), &big).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("BODY_TOO_LARGE")), "declared: {body}");
    let signed = t.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
    let mut raw = format!(
        "POST {}?{} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {}\r\nX-Device-Id: {}\r\nX-Timestamp: {}\r\n\
         X-Nonce: {}\r\nX-Signature: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        signed.path, signed.query, t.token, t.device, signed.timestamp, signed.nonce, signed.signature
    )
    .into_bytes();
    for _ in 0..5 {
        raw.extend_from_slice(format!("3e8\r\n{}\r\n", "x".repeat(1000)).as_bytes());
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let answer = crate::limits::send_raw(gw.port, &raw).await.expect("an answer");
    assert_eq!((answer.status, answer.code().as_str()), (413, "BODY_TOO_LARGE"), "chunked: {answer:?}");
    let keys = protocol::keys::CampaignKeys::new(&campaign);
    let stock: i64 = fred::interfaces::KeysInterface::get(&redis, &keys.stock).await.unwrap();
    assert_eq!(stock, 10);
}

/// Two requests in one TCP write (HTTP/1.1 pipelining): the first is answered, and either the
/// second is answered too, in order, or the first answer says `Connection: close` and the
/// connection closes with the second never run (RFC 9112 section 9.3.2). Never a second
/// request executed and its answer dropped.
#[tokio::test]
async fn pipelined_requests_are_answered_in_order_or_announced_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("rq");
    publish(&redis, &campaign, 10, 2).await;
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.campaigns = vec![(
        campaign.clone(),
        campaign_toml(&campaign, "").replace("per_user_limit = 1", "per_user_limit = 2"),
    )];
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let t = ticket(&http, &gw, &campaign, "alice").await.unwrap();

    let order_bytes = |s: &fixtures::client::SignedOrder| {
        format!(
            "POST {}?{} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {}\r\nX-Device-Id: {}\r\nX-Timestamp: {}\r\n\
             X-Nonce: {}\r\nX-Signature: {}\r\nContent-Length: 0\r\n\r\n",
            s.path, s.query, t.token, t.device, s.timestamp, s.nonce, s.signature
        )
    };
    let now = chrono::Utc::now().timestamp();
    let (first, second) =
        (t.sign(1, now, &fixtures::client::nonce()), t.sign(1, now, &fixtures::client::nonce()));
    let info = format!("GET /seckill/{campaign}/info HTTP/1.1\r\nHost: a\r\n\r\n");
    let keys = protocol::keys::CampaignKeys::new(&campaign);
    for (what, bytes, orders) in [
        ("two GET /info", format!("{info}{info}"), 0),
        ("two signed orders", format!("{}{}", order_bytes(&first), order_bytes(&second)), 2),
    ] {
        let before: i64 = fred::interfaces::KeysInterface::get(&redis, &keys.stock).await.unwrap();
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
        conn.write_all(bytes.as_bytes()).await.unwrap();
        let one =
            crate::limits::read_answer(&mut conn).await.unwrap_or_else(|| panic!("{what}: no first answer"));
        assert!(one.status < 300, "{what}: {one:?}");
        let closing = one.head.to_ascii_lowercase().contains("connection: close");
        let answered = if closing {
            // Announced: nothing more comes, the connection closes.
            let mut rest = Vec::new();
            let read =
                tokio::time::timeout(std::time::Duration::from_secs(10), conn.read_to_end(&mut rest)).await;
            assert!(
                matches!(read, Ok(Ok(_))) && rest.is_empty(),
                "{what}: closed after the announced answer"
            );
            1
        } else {
            let two = crate::limits::read_answer(&mut conn).await;
            assert!(
                two.is_some(),
                "{what}: the first answer kept the connection alive, the second never came"
            );
            2
        };
        let after: i64 = fred::interfaces::KeysInterface::get(&redis, &keys.stock).await.unwrap();
        if orders > 0 {
            assert_eq!(before - after, answered, "{what}: every order run was answered, no other ran");
        }
    }
}
