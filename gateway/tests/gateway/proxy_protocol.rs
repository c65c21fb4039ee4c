//! The PROXY protocol on the plain listener (`[server] proxy_protocol = true`), through the
//! binary on a proxy-only file: the header's source (v1 and v2) is the client's address for
//! every request of the connection (`X-Real-IP`, `X-Forwarded-For` upstream); a connection
//! without a valid header is closed unanswered, as Nginx's.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::*;

/// Answers with the `X-Real-IP` it received.
struct RealIp;

impl Respond for RealIp {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let ip = req.headers.get("x-real-ip").and_then(|v| v.to_str().ok()).unwrap_or("none");
        ResponseTemplate::new(200).set_body_string(format!("ip={ip}"))
    }
}

/// Writes `bytes` on a new connection and reads until the server closes (5 s at most).
async fn exchange(gw: &Gateway, bytes: &[u8]) -> String {
    let addr = gw.url("/").trim_start_matches("http://").trim_end_matches('/').to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn v2_header() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&[198, 51, 100, 9, 127, 0, 0, 1, 0x1f, 0x90, 0, 80]);
    h
}

#[tokio::test]
async fn the_proxy_headers_source_is_the_client_of_every_request_of_its_connection() {
    let up = MockServer::start().await;
    Mock::given(wiremock::matchers::any()).respond_with(RealIp).mount(&up).await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\nproxy_protocol = true\n\n[[route]]\nname = \"r\"\npath = \"/\"\nupstreams = [\"{}\"]\n",
        workers(),
        up.address()
    );
    let gw = Gateway::start_text(&text).await;
    let two = "GET /a HTTP/1.1\r\nHost: shop.test\r\n\r\nGET /b HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n";
    // Version 1, two requests on the connection (the second after the first's answer).
    let v1 = format!("PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n{}", &two[..two.find("GET /b").unwrap()]);
    let addr = gw.url("/").trim_start_matches("http://").trim_end_matches('/').to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(v1.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("ip=203.0.113.7"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    s.write_all(&two.as_bytes()[two.find("GET /b").unwrap()..]).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(String::from_utf8_lossy(&rest).contains("ip=203.0.113.7"), "the second request too");
    // Version 2.
    let mut v2 = v2_header();
    v2.extend_from_slice(b"GET / HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n");
    assert!(exchange(&gw, &v2).await.contains("ip=198.51.100.9"));
    // UNKNOWN: the socket's peer.
    let unknown = b"PROXY UNKNOWN\r\nGET / HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n";
    assert!(exchange(&gw, unknown).await.contains("ip=127.0.0.1"));
    // No header, or a broken one: closed, nothing answered, nothing proxied.
    let before = up.received_requests().await.unwrap().len();
    assert_eq!(exchange(&gw, b"GET / HTTP/1.1\r\nHost: shop.test\r\n\r\n").await, "");
    assert_eq!(exchange(&gw, b"PROXY TCP4 nope 127.0.0.1 1 2\r\nGET / HTTP/1.1\r\n\r\n").await, "");
    assert_eq!(up.received_requests().await.unwrap().len(), before);
}
