//! WebSocket pass-through on a shop route (an echo upstream made by the test, on loopback),
//! idle past the route's read timeout; and response compression per route, off by default.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A WebSocket echo server on a free loopback port; returns its address.
async fn echo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        for _ in 0..16 {
            let Ok((tcp, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { return };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() || msg.is_binary() {
                        let _ = ws.send(msg).await;
                    }
                }
            });
        }
    });
    addr
}

fn route(name: &str, prefix: &str, upstream: &str, extra: &str) -> String {
    format!(
        "[[route]]\nname = \"{name}\"\npath_prefix = \"{prefix}\"\nupstreams = [\"{upstream}\"]\n{extra}\n\n"
    )
}

#[tokio::test]
async fn websocket_passes_through_and_stays_open_past_the_read_timeout() {
    let echo = echo_server().await;
    let campaign = fixtures::cleanup::Campaign::new("ws");
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.routes = route("ws", "/ws/", &echo, "read_timeout_ms = 300");
    let gw = Gateway::start(&conf).await;

    let tcp = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let url = format!("ws://127.0.0.1:{}/ws/echo", gw.port);
    let (mut ws, resp) = tokio_tungstenite::client_async(url, tcp).await.expect("the upgrade passes");
    assert_eq!(resp.status(), 101);
    for text in ["hello", "again"] {
        ws.send(Message::text(text)).await.unwrap();
        let back = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(back.into_text().unwrap().as_str(), text);
        // Idle past the route's 300 ms read timeout: the connection stays.
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    ws.send(Message::binary(vec![0u8, 1, 2])).await.unwrap();
    let back = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(back.into_data().as_ref(), &[0u8, 1, 2]);
}

#[tokio::test]
async fn responses_are_compressed_only_on_routes_that_ask() {
    let shop = MockServer::start().await;
    let page = "a flash sale page. ".repeat(1000);
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_raw(page.clone(), "text/html"))
        .mount(&shop)
        .await;
    let campaign = fixtures::cleanup::Campaign::new("gz");
    let upstream = shop.address().to_string();
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.routes = route("packed", "/packed/", &upstream, "compression_level = 6")
        + &route("plain", "/plain/", &upstream, "")
        + &route("gz", "/gz/", &upstream, "compression_level = 6\ncompression_algorithms = [\"gzip\"]")
        + &route("long", "/long/", &upstream, "compression_level = 6\ncompression_min_length = 100000")
        + &route("css", "/css/", &upstream, "compression_level = 6\ncompression_types = [\"text/css\"]");
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();

    for (encoding, magic) in [("gzip", &[0x1f_u8, 0x8b][..]), ("br", &[][..])] {
        let resp = http.get(gw.url("/packed/p")).header("accept-encoding", encoding).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers().get("content-encoding").map(|v| v.to_str().unwrap()), Some(encoding));
        let body = resp.bytes().await.unwrap();
        assert!(body.len() < page.len() / 4, "{encoding}: {} bytes for {}", body.len(), page.len());
        assert!(body.starts_with(magic));
    }
    // Without Accept-Encoding, and on a route that does not ask: as the upstream sent it.
    let resp = http.get(gw.url("/packed/p")).send().await.unwrap();
    assert!(resp.headers().get("content-encoding").is_none());
    assert_eq!(resp.text().await.unwrap(), page);
    let resp = http.get(gw.url("/plain/p")).header("accept-encoding", "gzip, br").send().await.unwrap();
    assert!(resp.headers().get("content-encoding").is_none(), "off by default");
    assert_eq!(resp.text().await.unwrap(), page);
    // Nginx's gzip directives: the client's first coding the route allows; a body below the
    // route's minimum length and HTTP/1.0 are sent as they are; text/html is always a type.
    let encoding = |path: &'static str, accept: &'static str| {
        let req = http.get(gw.url(path)).header("accept-encoding", accept).send();
        async move {
            req.await.unwrap().headers().get("content-encoding").map(|v| v.to_str().unwrap().to_string())
        }
    };
    assert_eq!(encoding("/gz/p", "br, gzip").await.as_deref(), Some("gzip"), "br not allowed there");
    assert_eq!(encoding("/gz/p", "br").await, None);
    assert_eq!(encoding("/gz/p", "gzip;q=0").await, None, "q=0 refuses a coding");
    assert_eq!(encoding("/long/p", "gzip").await, None, "19,000 bytes < compression_min_length");
    assert_eq!(encoding("/css/p", "gzip").await.as_deref(), Some("gzip"), "text/html always listed");
    let old = http.get(gw.url("/gz/p")).version(reqwest::Version::HTTP_10).header("accept-encoding", "gzip");
    assert!(old.send().await.unwrap().headers().get("content-encoding").is_none(), "gzip_http_version 1.1");
    // The gateway's own answers are never compressed.
    let resp =
        http.get(gw.url(&format!("/seckill/{campaign}/info"))).header("accept-encoding", "gzip").send();
    assert!(resp.await.unwrap().headers().get("content-encoding").is_none());
}
