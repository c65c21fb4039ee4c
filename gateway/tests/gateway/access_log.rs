//! The access log as Nginx's, through the binary on a proxy-only file: `combined` by default,
//! line by line as Nginx 1.22 wrote it for the same requests (its time aside), and a template
//! of Nginx's variables with `escape = "json"`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// Writes `bytes` on a new connection and reads until the server closes (5 s at most).
async fn exchange(gw: &Gateway, bytes: &[u8]) {
    let addr = format!("127.0.0.1:{}", gw.port);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
}

/// The log's lines but the start probe's, once it has `n` (at most 5 s).
async fn lines(gw: &Gateway, n: usize) -> Vec<String> {
    let file = gw.dir.join("access.log");
    let read = || {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        text.lines().filter(|l| !l.contains("/seckill/probe/info")).map(String::from).collect::<Vec<_>>()
    };
    let enough = eventually(Duration::from_secs(5), || async { read().len() >= n }).await;
    let got = read();
    assert!(enough, "{} access lines, expected {n}:\n{}", got.len(), got.join("\n"));
    got
}

/// A gateway with routes for `/` (proxied to `up`), `= /gone` (410) and `/dead` (refused), and
/// `access_log` (the table's body) to `access.log`.
async fn gateway(up: &MockServer, access_log: &str) -> Gateway {
    let dead = free_port();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n\n\
         [[route]]\nname = \"page\"\npath = \"/\"\nupstreams = [\"{}\"]\n\n\
         [[route]]\nname = \"gone\"\npath = \"= /gone\"\nreturn = \"410 gone\"\n\n\
         [[route]]\nname = \"dead\"\npath = \"/dead\"\nupstreams = [\"127.0.0.1:{dead}\"]\n\n\
         [access_log]\noutput = \"access.log\"\n{access_log}\n",
        workers(),
        up.address()
    );
    Gateway::start_text(&text).await
}

/// The requests both servers were sent, as raw bytes.
const REQUESTS: [&[u8]; 4] = [
    b"GET /a?x=1 HTTP/1.1\r\nHost: Shop.Test:8080\r\nUser-Agent: t/1 \"q\" \xc3\xa9\r\nReferer: http://r.test/\r\n\
      Authorization: Basic dXNlcjpwYXNz\r\nConnection: close\r\n\r\n",
    b"HEAD /b HTTP/1.0\r\n\r\n",
    b"GET /gone HTTP/1.1\r\nHost: shop.test\r\nReferer: \r\nConnection: close\r\n\r\n",
    b"POST /dead HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
];

/// What Nginx 1.22 wrote for [`REQUESTS`] (`return 200 "page"` at `/`, `return 410 "gone"`,
/// a refused `proxy_pass` at `/dead`), `[TIME]` for its `$time_local`.
const NGINX: [&str; 4] = [
    r#"127.0.0.1 - user [TIME] "GET /a?x=1 HTTP/1.1" 200 4 "http://r.test/" "t/1 \x22q\x22 \xC3\xA9""#,
    r#"127.0.0.1 - - [TIME] "HEAD /b HTTP/1.0" 200 0 "-" "-""#,
    r#"127.0.0.1 - - [TIME] "GET /gone HTTP/1.1" 410 4 "" "-""#,
    r#"127.0.0.1 - - [TIME] "POST /dead HTTP/1.1" 502 157 "-" "-""#,
];

/// The fields of a combined line: the time replaced by `TIME`, split on spaces outside quotes.
fn fields(line: &str) -> Vec<String> {
    let (head, rest) = line.split_once('[').unwrap();
    let (time, tail) = rest.split_once(']').unwrap();
    assert!(chrono::DateTime::parse_from_str(time, "%d/%b/%Y:%H:%M:%S %z").is_ok(), "time_local: {line}");
    let line = format!("{head}[TIME]{tail}");
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[tokio::test]
async fn combined_lines_are_nginx_s_field_by_field() {
    let up = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_string("page"))
        .mount(&up)
        .await;
    let gw = gateway(&up, "").await;
    for r in REQUESTS {
        exchange(&gw, r).await;
    }
    let got = lines(&gw, REQUESTS.len()).await;
    let names = [
        "remote_addr",
        "-",
        "remote_user",
        "time_local",
        "request",
        "status",
        "body_bytes_sent",
        "referer",
        "user_agent",
    ];
    for (line, nginx) in got.iter().zip(NGINX) {
        let (g, n) = (fields(line), fields(nginx.replace("[TIME]", "[01/Jan/2026:00:00:00 +0000]").as_str()));
        assert_eq!(g.len(), names.len(), "{line}");
        for ((name, g), n) in names.iter().zip(&g).zip(&n) {
            // The error pages' bodies are each server's own.
            if *name == "body_bytes_sent" && n == "157" {
                continue;
            }
            assert_eq!(g, n, "{name} of\n  gateway: {line}\n  nginx:   {nginx}");
        }
    }
    assert_eq!(got.len(), NGINX.len(), "{got:?}");
}

#[tokio::test]
async fn a_template_with_json_escaping() {
    let up = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_string("page"))
        .mount(&up)
        .await;
    let template = r#"{"ip":"$remote_addr","host":"$host","req":"$request","s":$status,"ua":"$http_user_agent","ref":"$http_referer","up":"$upstream_addr","ut":"$upstream_response_time","rt":$request_time,"id":"$request_id"}"#;
    let gw = gateway(&up, &format!("template = '{template}'\nescape = \"json\"")).await;
    exchange(&gw, REQUESTS[0]).await;
    exchange(&gw, REQUESTS[2]).await;
    let got = lines(&gw, 2).await;
    let v: Vec<serde_json::Value> = got.iter().map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!((v[0]["ip"].as_str(), v[0]["host"].as_str()), (Some("127.0.0.1"), Some("shop.test")));
    assert_eq!(v[0]["req"], "GET /a?x=1 HTTP/1.1");
    assert_eq!((v[0]["s"].as_u64(), v[0]["ua"].as_str()), (Some(200), Some("t/1 \"q\" é")));
    assert_eq!(v[0]["up"], up.address().to_string());
    assert!(v[0]["ut"].as_str().unwrap().parse::<f64>().is_ok(), "{}", got[0]);
    let sent = up.received_requests().await.unwrap();
    let a = sent.iter().find(|r| r.url.path() == "/a").unwrap();
    let carried = a.headers.get("x-request-id").unwrap().to_str().unwrap();
    assert_eq!(v[0]["id"], carried, "the id sent upstream");
    // Nothing upstream, no referer: empty with escape=json, as in Nginx.
    assert_eq!(
        (v[1]["s"].as_u64(), v[1]["up"].as_str(), v[1]["ut"].as_str()),
        (Some(410), Some(""), Some(""))
    );
    assert_eq!((v[1]["ua"].as_str(), v[1]["ref"].as_str()), (Some(""), Some("")));
}
