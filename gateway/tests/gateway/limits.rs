//! The front door's limits, each answered with its status and a JSON code, never a hang or a
//! 5xx: head size and field count (431), body size (413, declared or counted), head and body
//! timeouts (408), smuggling and control characters (400), keep-alive timeout and requests per
//! connection. Raw TCP where the bytes matter; every read is bounded.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A parsed raw answer.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Raw {
    /// The JSON body's `code`.
    pub fn code(&self) -> String {
        let v: serde_json::Value = serde_json::from_str(&self.body).unwrap_or_default();
        v["code"].as_str().unwrap_or_default().to_string()
    }
}

/// Reads one answer (head, then `Content-Length` bytes or until close), within 10 s.
pub async fn read_answer(conn: &mut TcpStream) -> Option<Raw> {
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut chunk = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|n| rest.len() >= n) {
                let status = head.split(' ').nth(1)?.parse().ok()?;
                return Some(Raw { status, head: head.to_string(), body: rest[..len.unwrap()].to_string() });
            }
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, conn.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

/// Sends `bytes` on a new connection and reads one answer.
pub async fn send_raw(port: u16, bytes: &[u8]) -> Option<Raw> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = conn.write_all(bytes).await;
    read_answer(&mut conn).await
}

/// Whether the peer closes `conn` within `within` (EOF or reset, nothing else read).
async fn closes(conn: &mut TcpStream, within: Duration) -> bool {
    let mut b = [0u8; 64];
    matches!(tokio::time::timeout(within, conn.read(&mut b)).await, Ok(Ok(0)) | Ok(Err(_)))
}

async fn shop() -> MockServer {
    let shop = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200).set_body_string("ok")).mount(&shop).await;
    shop
}

async fn gateway(shop: &MockServer, limits: &str, route_extra: &str) -> Gateway {
    let campaign = fixtures::stack::unique("fd");
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.routes = format!(
        "[[route]]\nname = \"shop\"\npath_prefix = \"/shop/\"\nupstreams = [\"{}\"]\n{route_extra}\n\n[limits]\n{limits}\n",
        shop.address()
    );
    Gateway::start(&conf).await
}

#[tokio::test]
async fn large_heads_many_fields_and_large_bodies_are_refused_with_431_and_413() {
    let shop = shop().await;
    let gw = gateway(&shop, "max_headers = 20", "client_max_body_size = 1000").await;
    let http = reqwest::Client::new();

    // A 70 KB header: 431, for an order and for a shop page alike (default 32 KiB).
    let big = "x".repeat(70 * 1024);
    for req in [http.post(gw.url("/seckill/any/order")), http.get(gw.url("/shop/a"))] {
        let resp = req.header("x-big", &big).send().await.unwrap();
        assert_eq!(resp.status(), 431);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "HEADERS_TOO_LARGE", "{body}");
        assert!(!body["request_id"].as_str().unwrap().is_empty());
    }
    // 21 fields past max_headers = 20.
    let mut req = http.get(gw.url("/shop/a"));
    for i in 0..21 {
        req = req.header(format!("x-f{i}"), "v");
    }
    assert_eq!(req.send().await.unwrap().status(), 431);

    // A 2 MB order body: 413 at the default 1 MiB, before any order check.
    let resp = http.post(gw.url("/seckill/any/order")).body(vec![b'a'; 2 << 20]).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["code"], "BODY_TOO_LARGE");

    // The route's own limit (1000 bytes): declared length past it, a chunked body past it,
    // and a body within it that is proxied.
    let resp = http.post(gw.url("/shop/up")).body(vec![b'a'; 1001]).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    let raw = send_raw(
        gw.port,
        format!(
            "POST /shop/up HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n{}\r\n0\r\n\r\n",
            "a".repeat(2000)
        )
        .as_bytes(),
    )
    .await
    .expect("an answer, not a hang");
    assert_eq!((raw.status, raw.code().as_str()), (413, "BODY_TOO_LARGE"), "{raw:?}");
    let resp = http.post(gw.url("/shop/up")).body(vec![b'a'; 1000]).send().await.unwrap();
    assert_eq!((resp.status().as_u16(), resp.text().await.unwrap().as_str()), (200, "ok"));
    let bodies: Vec<usize> = shop.received_requests().await.unwrap().iter().map(|r| r.body.len()).collect();
    assert_eq!(bodies, vec![1000], "only the body within the limit reached the shop");
}

#[tokio::test]
async fn smuggling_and_control_characters_are_refused_with_400() {
    let shop = shop().await;
    let gw = gateway(&shop, "", "").await;
    let cases: [&[u8]; 5] = [
        b"POST /shop/a HTTP/1.1\r\nHost: s\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /shop/a HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\ncontent-length: 4\r\n\r\n0\r\n\r\n",
        b"GET /shop/a HTTP/1.1\r\nHost: s\r\nX-A: a\x01b\r\n\r\n",
        b"GET /shop/a HTTP/1.1\r\nHost: s\r\nX-A: a\x7f\r\n\r\n",
        b"GET /shop/a HTTP/1.1\r\nHost: s\r\nX\x00A: b\r\n\r\n",
    ];
    for bytes in cases {
        let raw = send_raw(gw.port, bytes).await.expect("an answer, not a hang");
        assert_eq!((raw.status, raw.code().as_str()), (400, "BAD_REQUEST"), "{raw:?}");
        assert!(raw.head.contains("Connection: close"), "{raw:?}");
    }
    assert!(shop.received_requests().await.unwrap().is_empty(), "nothing reached the shop");
    // A clean request on the same gateway still passes.
    let raw =
        send_raw(gw.port, b"GET /shop/a HTTP/1.1\r\nHost: s\r\nX-A: caf\xc3\xa9\tb\r\n\r\n").await.unwrap();
    assert_eq!(raw.status, 200, "{raw:?}");
}

#[tokio::test]
async fn slow_heads_and_bodies_get_408_and_idle_connections_close() {
    let shop = shop().await;
    let limits = "client_header_timeout_ms = 500\nclient_body_timeout_ms = 500\n\
                  keepalive_timeout_ms = 1000\nkeepalive_requests = 2";
    let gw = gateway(&shop, limits, "").await;

    // A head started and never finished.
    let started = Instant::now();
    let raw = send_raw(gw.port, b"GET /shop/a HTTP/1.1\r\nHost: s\r\n").await.expect("408, not a hang");
    assert_eq!((raw.status, raw.code().as_str()), (408, "REQUEST_TIMEOUT"), "{raw:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // A body announced and not sent.
    let raw = send_raw(gw.port, b"POST /shop/a HTTP/1.1\r\nHost: s\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .expect("408, not a hang");
    assert_eq!((raw.status, raw.code().as_str()), (408, "REQUEST_TIMEOUT"), "{raw:?}");

    // A connection that sends nothing is closed silently.
    let mut idle = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    assert!(closes(&mut idle, Duration::from_secs(5)).await, "a silent connection is closed");

    // Keep-alive: two requests per connection, then closed; idle past the timeout, closed.
    let get = b"GET /shop/a HTTP/1.1\r\nHost: s\r\n\r\n";
    let mut conn = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    conn.write_all(get).await.unwrap();
    let first = read_answer(&mut conn).await.unwrap();
    assert_eq!(first.status, 200);
    assert!(!first.head.to_ascii_lowercase().contains("connection: close"), "{first:?}");
    conn.write_all(get).await.unwrap();
    let second = read_answer(&mut conn).await.unwrap();
    assert_eq!(second.status, 200);
    assert!(closes(&mut conn, Duration::from_secs(5)).await, "closed after keepalive_requests");

    let mut conn = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    conn.write_all(get).await.unwrap();
    assert_eq!(read_answer(&mut conn).await.unwrap().status, 200);
    let idle_since = Instant::now();
    assert!(closes(&mut conn, Duration::from_secs(5)).await, "closed after keepalive_timeout");
    assert!(idle_since.elapsed() >= Duration::from_millis(900), "not before the timeout");
}
