//! A route's request-rate and connection limits, Nginx's `limit_req` and `limit_conn` (issue 38),
//! through the binary on proxy-only files: the burst then the limit's status, header-keyed
//! buckets each their own, a burst delayed without `nodelay`, requests in flight counted and
//! given back when they end (also when the client leaves), and a bad zone refused at its place.
//! (The same limits beside a real Nginx: e2e/parity/07-limits.conf; `limit_conn` is shown here,
//! the parity corpus sending one request at a time.)

use std::process::Command;
use std::time::{Duration, Instant};

use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::nginx_routes::{get, proxy_file};
use crate::support::*;

const ZONES: &str = "\n[[limit_req_zone]]\nname = \"ip\"\nkey = \"$binary_remote_addr\"\nrate = \"1r/m\"\n\
    \n[[limit_req_zone]]\nname = \"key\"\nkey = \"$http_x_api_key\"\nrate = \"1r/m\"\n\
    \n[[limit_req_zone]]\nname = \"slow\"\nkey = \"$remote_addr\"\nrate = \"2r/s\"\n\
    \n[[limit_req_zone]]\nname = \"quick\"\nkey = \"$remote_addr\"\nrate = \"2r/s\"\n\
    \n[[limit_conn_zone]]\nname = \"conn\"\nkey = \"$remote_addr\"\n";

/// `GET path` on host `lim.test` with `X-Api-Key: key` when given: the status.
async fn keyed(gw: &Gateway, path: &str, key: Option<&str>) -> u16 {
    let mut req = reqwest::Client::new().get(gw.url(path)).header("host", "lim.test");
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_burst_passes_then_the_limit_answers_its_status_and_keys_are_their_own() {
    let admin = fixtures::stack::free_port();
    let (text, _ups) = proxy_file(&[
        ("ip", "path = \"/a/\"\nlimit_req = { zone = \"ip\", burst = 2, nodelay = true }\nlimit_req_status = 429"),
        ("key", "path = \"/k/\"\nlimit_req = { zone = \"key\", burst = 1, nodelay = true }"),
    ])
    .await;
    let ret = "\n[[route]]\nname = \"ret\"\npath = \"= /ret\"\nreturn = \"200 ok\"\nlimit_req = { zone = \"ip\" }\n";
    let text = format!("{text}{ret}{ZONES}\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n");
    let gw = Gateway::start_text(&text).await;
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(get(&gw, "lim.test", "/a/x").await);
    }
    assert!(got[..3].iter().all(|a| *a == (200, "ip".to_string())), "the first and the burst of 2: {got:?}");
    for (status, body) in &got[3..] {
        assert_eq!(*status, 429, "{got:?}");
        assert!(body.contains("<title>429 Too Many Requests</title>"), "an HTML page: {body}");
    }
    // A `return` answers before the limits (Nginx's rewrite phase), whatever the bucket holds.
    assert_eq!(get(&gw, "lim.test", "/ret").await.0, 200);
    // Two keys, two buckets of 1 + 1; no key: not limited; Nginx's default status 503.
    let a: Vec<u16> = futures::future::join_all((0..3).map(|_| keyed(&gw, "/k/x", Some("a")))).await;
    assert_eq!(a.iter().filter(|s| **s == 200).count(), 2, "{a:?}");
    assert_eq!(a.iter().filter(|s| **s == 503).count(), 1, "{a:?}");
    assert_eq!(keyed(&gw, "/k/x", Some("b")).await, 200, "b's bucket is its own");
    for _ in 0..4 {
        assert_eq!(keyed(&gw, "/k/x", None).await, 200, "no key: not counted");
    }
    let http = reqwest::Client::new();
    let samples = scrape(&http, &format!("http://127.0.0.1:{admin}/metrics")).await;
    let limited = |zone| {
        sample(&samples, "seckill_gateway_route_limited_total", &[("limit", "limit_req"), ("zone", zone)])
    };
    assert_eq!((limited("ip"), limited("key")), (2.0, 1.0), "{}", gw.log());
}

#[tokio::test]
async fn without_nodelay_the_burst_waits_and_with_it_passes_at_once() {
    let (text, _ups) = proxy_file(&[
        ("slow", "path = \"/slow/\"\nlimit_req = { zone = \"slow\", burst = 5 }"),
        ("quick", "path = \"/quick/\"\nlimit_req = { zone = \"quick\", burst = 5, nodelay = true }"),
    ])
    .await;
    let gw = Gateway::start_text(&format!("{text}{ZONES}")).await;
    let timed = |path: &'static str| {
        let gw = &gw;
        async move {
            let start = Instant::now();
            for _ in 0..4 {
                assert_eq!(get(gw, "lim.test", path).await.0, 200, "{path}: within the burst");
            }
            start.elapsed()
        }
    };
    let quick = timed("/quick/x").await;
    let slow = timed("/slow/x").await;
    // 2r/s: each of the 3 after the first waits about 500 ms (its excess over the rate).
    assert!(slow >= Duration::from_millis(1000), "the burst waited: {slow:?}");
    assert!(quick < slow, "nodelay passes at once: {quick:?} vs {slow:?}");
}

/// An upstream answering after `delay`.
async fn slow_upstream(delay: Duration) -> MockServer {
    let up = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_string("slow").set_delay(delay))
        .mount(&up)
        .await;
    up
}

#[tokio::test]
async fn limit_conn_counts_requests_in_flight_and_gives_them_back() {
    let up = slow_upstream(Duration::from_millis(1500)).await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n{ZONES}\n[[route]]\nname = \"c\"\npath = \"/c/\"\n\
         upstreams = [\"{}\"]\nlimit_conn = {{ zone = \"conn\", max = 2 }}\nlimit_conn_status = 429\n",
        workers(),
        up.address()
    );
    let gw = Gateway::start_text(&text).await;
    let three: Vec<u16> = futures::future::join_all((0..3).map(|_| keyed(&gw, "/c/x", None))).await;
    assert_eq!(three.iter().filter(|s| **s == 200).count(), 2, "{three:?}");
    assert_eq!(three.iter().filter(|s| **s == 429).count(), 1, "{three:?}");
    // Ended: their places are back.
    let two: Vec<u16> = futures::future::join_all((0..2).map(|_| keyed(&gw, "/c/x", None))).await;
    assert_eq!(two, [200, 200]);
    // Two clients that leave before the answer: their places come back too (at the latest when
    // the upstream's answer ends the request).
    let short = reqwest::Client::builder().timeout(Duration::from_millis(200)).build().unwrap();
    for _ in 0..2 {
        let url = gw.url("/c/x");
        assert!(short.get(url).header("host", "lim.test").send().await.is_err(), "left early");
    }
    let gw = &gw;
    let back = eventually(Duration::from_secs(10), move || async move {
        let both = futures::future::join_all((0..2).map(|_| keyed(gw, "/c/x", None))).await;
        both == [200, 200]
    })
    .await;
    assert!(back, "the places of the clients that left came back: {}", gw.log());
}

#[test]
fn a_route_naming_an_unknown_zone_is_refused_at_its_place() {
    let dir = std::env::temp_dir().join(fixtures::stack::unique("gw-check-"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("server.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:1\"\n{ZONES}\n[[route]]\nname = \"r\"\npath = \"/\"\n\
         upstreams = [\"127.0.0.1:2\"]\nlimit_req = {{ zone = \"nope\", burst = 1 }}\n"
    );
    std::fs::write(&file, &text).unwrap();
    let line = text.lines().position(|l| l.starts_with("limit_req =")).unwrap() + 1;
    let out =
        Command::new(env!("CARGO_BIN_EXE_gateway")).arg("--conf").arg(&file).arg("--check").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(stderr.contains(&format!("server.toml:{line}:")), "line {line}: {stderr}");
    assert!(
        stderr.contains("route[0].limit_req.zone") && stderr.contains("no [[limit_req_zone]] named \"nope\""),
        "{stderr}"
    );
    remove_unless_failed(&dir);
}
