//! The gateway beside a real Nginx, request by request (`e2e/parity/`, the `parity` binary): the
//! fixtures' requests, each sent as raw bytes in several forms (odd encodings, dot segments,
//! case, long headers, big bodies), and what is compared of the two answers.

use std::collections::BTreeMap;

pub use fixtures::raw_http::{parse, send, Answer, Request};

/// The `# request: METHOD HOST TARGET` lines of a fixture, each optionally followed by header
/// lines after `|`: `# request: GET gz.test /big | Accept-Encoding: gzip | Range: bytes=0-9`.
pub fn base_requests(fixture: &str, name: &str) -> Vec<Request> {
    fixture
        .lines()
        .filter_map(|l| l.strip_prefix("# request: "))
        .filter_map(|l| {
            let mut fields = l.split('|');
            let mut parts = fields.next()?.split_whitespace();
            let (method, host, target) = (parts.next()?, parts.next()?, parts.next()?);
            let mut headers: Vec<(String, String)> = fields
                .filter_map(|h| h.split_once(':'))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            let shown: Vec<String> = headers.iter().map(|(k, v)| format!(" | {k}: {v}")).collect();
            let preface =
                headers.iter().find(|(k, _)| k == "PROXY").map(|(_, v)| proxy_header(v)).unwrap_or_default();
            headers.retain(|(k, _)| k != "PROXY");
            Some(Request {
                label: format!("{name}: {method} {host} {target}{}", shown.concat()),
                method: method.into(),
                host: Some(host.into()),
                target: target.into(),
                headers,
                body: Vec::new(),
                preface,
            })
        })
        .collect()
}

/// A request line's `| PROXY: v1 203.0.113.7` or `| PROXY: v2 198.51.100.9`: the PROXY header
/// (HAProxy's, version 1 or 2) a load balancer would write for that client (port 5555) to
/// 127.0.0.1:80.
fn proxy_header(spec: &str) -> Vec<u8> {
    let (version, ip) = spec.split_once(' ').unwrap_or((spec, "203.0.113.7"));
    let ip: std::net::Ipv4Addr = ip.trim().parse().unwrap_or(std::net::Ipv4Addr::new(203, 0, 113, 7));
    if version == "v2" {
        let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        h.extend_from_slice(&[0x21, 0x11, 0, 12]);
        h.extend_from_slice(&ip.octets());
        h.extend_from_slice(&[127, 0, 0, 1, 0x15, 0xb3, 0, 80]);
        return h;
    }
    format!("PROXY TCP4 {ip} 127.0.0.1 5555 80\r\n").into_bytes()
}

/// Each request in its forms: as written, with a query, a dot segment, a double slash, a
/// `..` segment, its first letter percent-encoded, upper case, a trailing slash, an encoded
/// slash, a 4 KB header (Nginx refuses a header line past its 8 KB buffer with 400; the
/// gateway takes longer ones), a 256 KB body, HEAD, the host upper case and with a trailing
/// dot, and HTTP/1.0 without a host.
pub fn variants(base: &Request) -> Vec<Request> {
    let t = &base.target;
    let (path, query) = t.split_once('?').map_or((t.as_str(), None), |(p, q)| (p, Some(q)));
    let with = |label: &str, target: String| Request {
        label: format!("{} [{label}]", base.label),
        target,
        ..base.clone()
    };
    let q = |p: String| match query {
        Some(q) => format!("{p}?{q}"),
        None => p,
    };
    let rest = path.strip_prefix('/').unwrap_or(path);
    let mut out = vec![
        with("as is", t.clone()),
        with("query", format!("{t}{}a=1&b=%20x", if query.is_some() { "&" } else { "?" })),
        with("dot segment", q(format!("/./{rest}"))),
        with("double slash", q(format!("//{rest}"))),
        with("dot-dot", q(format!("/zz/../{rest}"))),
        with("encoded letter", q(encode_first(path))),
        with("upper case", q(path.to_uppercase())),
        with("trailing slash", q(if path.ends_with('/') { path.to_string() } else { format!("{path}/") })),
        with("encoded slash", q(path.replacen('/', "%2F", 2).replacen("%2F", "/", 1))),
    ];
    let mut long = with("4 KB header", t.clone());
    long.headers.push(("X-Long".into(), "a".repeat(4096)));
    let mut big = with("256 KB body", t.clone());
    big.method = "POST".into();
    big.body = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    let mut head = with("HEAD", t.clone());
    head.method = "HEAD".into();
    let host = base.host.clone().unwrap_or_default();
    let mut upper = with("host upper case", t.clone());
    upper.host = Some(host.to_uppercase());
    let mut dot = with("host trailing dot", t.clone());
    dot.host = Some(format!("{host}."));
    let mut old = with("HTTP/1.0, no host", t.clone());
    old.host = None;
    out.extend([long, big, head, upper, dot, old]);
    out
}

/// `/abc` → `/%61bc` (the first letter after the first slash, when there is one).
fn encode_first(path: &str) -> String {
    match path.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, c)) => format!("{}%{:02X}{}", &path[..i], c as u32, &path[i + 1..]),
        None => path.to_string(),
    }
}

/// The response headers compared (what the fixtures set or hide, and whether a body is
/// compressed).
pub const COMPARED_HEADERS: [&str; 5] = ["location", "x-added", "x-always", "x-secret", "content-encoding"];

/// Compared too when either answer is a file's (it has an `ETag`, or a 416's `Content-Range`):
/// the static fixture's; other answers' types and lengths are each server's own pages.
pub const FILE_HEADERS: [&str; 5] =
    ["content-type", "content-length", "content-range", "etag", "last-modified"];

/// The differences between Nginx's answer and the gateway's (none: identical as compared): the
/// status; the compared headers; for a 200 or a 206, the body (an echo's JSON by its fields, else the
/// bytes). Other statuses' bodies are each server's own page.
pub fn differences(nginx: &Answer, gateway: &Answer) -> Vec<String> {
    let mut out = Vec::new();
    if nginx.status != gateway.status {
        out.push(format!("status {} vs {}", nginx.status, gateway.status));
        return out;
    }
    let gateway = &same_boundary(nginx, gateway);
    let file = [nginx, gateway]
        .iter()
        .any(|a| a.headers.contains_key("etag") || a.headers.contains_key("content-range"));
    let files = if file { &FILE_HEADERS[..] } else { &[] };
    for h in COMPARED_HEADERS.iter().chain(files) {
        let h = *h;
        if h == "content-length"
            && (!matches!(nginx.status, 200 | 206) || nginx.headers.contains_key("content-encoding"))
        {
            continue; // each server's own page, or its own compressed bytes
        }
        let (n, g) = (nginx.headers.get(h), gateway.headers.get(h));
        if h == "location" && n.zip(g).is_some_and(|(n, g)| same_target(n, g)) {
            continue;
        }
        if n != g {
            out.push(format!("{h}: {:?} vs {:?}", nginx.headers.get(h), gateway.headers.get(h)));
        }
    }
    let (nginx, gateway) = (&decoded(nginx), &decoded(gateway));
    if matches!(nginx.status, 200 | 206) && nginx.body != gateway.body {
        let json = |b: &[u8]| serde_json::from_slice::<BTreeMap<String, serde_json::Value>>(b).ok();
        match (json(&nginx.body), json(&gateway.body)) {
            (Some(n), Some(g)) => {
                for k in n.keys().chain(g.keys()).collect::<std::collections::BTreeSet<_>>() {
                    if n.get(k) != g.get(k) {
                        out.push(format!("upstream saw {k}: {:?} vs {:?}", n.get(k), g.get(k)));
                    }
                }
            }
            _ => out.push(format!(
                "body {:?} vs {:?}",
                String::from_utf8_lossy(&nginx.body[..nginx.body.len().min(80)]),
                String::from_utf8_lossy(&gateway.body[..gateway.body.len().min(80)])
            )),
        }
    }
    out
}

/// `answer` with its body gunzipped when it says `Content-Encoding: gzip` (each server
/// compresses in its own bytes: what is compared is what the client reads); a body that does
/// not inflate is kept as it came.
fn decoded(answer: &Answer) -> Answer {
    let mut out = answer.clone();
    if answer.headers.get("content-encoding").is_some_and(|e| e == "gzip") {
        let mut plain = Vec::new();
        let mut reader = flate2::read::GzDecoder::new(answer.body.as_slice());
        if std::io::Read::read_to_end(&mut reader, &mut plain).is_ok() {
            out.body = plain;
        }
    }
    out
}

/// `gateway`'s answer with Nginx's `multipart/byteranges` boundary in place of its own (each
/// server numbers its own; the rest of the two bodies must be the same).
fn same_boundary(nginx: &Answer, gateway: &Answer) -> Answer {
    let boundary = |a: &Answer| {
        let t = a.headers.get("content-type")?;
        t.strip_prefix("multipart/byteranges; boundary=").map(str::to_string)
    };
    let (Some(n), Some(g)) = (boundary(nginx), boundary(gateway)) else { return gateway.clone() };
    let mut out = gateway.clone();
    out.headers.insert("content-type".into(), format!("multipart/byteranges; boundary={n}"));
    let (from, to) = (format!("--{g}").into_bytes(), format!("--{n}").into_bytes());
    out.body.clear();
    let mut rest = gateway.body.as_slice();
    while let Some(i) = rest.windows(from.len()).position(|w| w == from.as_slice()) {
        out.body.extend_from_slice(&rest[..i]);
        out.body.extend_from_slice(&to);
        rest = &rest[i + from.len()..];
    }
    out.body.extend_from_slice(rest);
    out
}

/// Two `Location`s naming the same target: Nginx writes its own redirects absolute, with the
/// port it listens on (`absolute_redirect`, `port_in_redirect`); the gateway keeps them as
/// written, relative, which the client resolves against the URL it asked (RFC 9110). The same
/// path on the same host, each server's own port aside.
fn same_target(nginx: &str, gateway: &str) -> bool {
    let path = |l: &str| -> String {
        match l.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("/".to_string(), |i| rest[i..].to_string()),
            None => l.to_string(),
        }
    };
    let absolute = |l: &str| l.contains("://");
    match (absolute(nginx), absolute(gateway)) {
        (true, false) => path(nginx) == gateway,
        _ => nginx == gateway,
    }
}

/// The names of a `combined` access line's fields, as [`combined_fields`] gives them.
pub const COMBINED_FIELDS: [&str; 7] =
    ["remote_addr", "remote_user", "request", "status", "body_bytes_sent", "http_referer", "http_user_agent"];

/// The fields of an access line in Nginx's `combined` format, its time left out (it is each
/// server's own moment): see [`COMBINED_FIELDS`]; `None` when the line is not of that shape.
pub fn combined_fields(line: &str) -> Option<Vec<String>> {
    let (addr, rest) = line.split_once(" - ")?;
    let (user, rest) = rest.split_once(" [")?;
    let (_time, rest) = rest.split_once("] \"")?;
    let (request, rest) = rest.split_once("\" ")?;
    let (status, rest) = rest.split_once(' ')?;
    let (bytes, rest) = rest.split_once(" \"")?;
    let (referer, agent) = rest.split_once("\" \"")?;
    let agent = agent.strip_suffix('"')?;
    Some([addr, user, request, status, bytes, referer, agent].map(String::from).to_vec())
}

/// The differences between Nginx's `combined` line and the gateway's for one request: every
/// field but the time, the body's bytes only when `bytes` (a body both sent alike: an identical
/// 200 or 206 not compressed; error pages and compressed bodies are each server's own).
pub fn log_differences(nginx: &str, gateway: &str, bytes: bool) -> Vec<String> {
    let (Some(n), Some(g)) = (combined_fields(nginx), combined_fields(gateway)) else {
        return vec![format!("not combined lines: {nginx:?} vs {gateway:?}")];
    };
    COMBINED_FIELDS
        .iter()
        .zip(n.iter().zip(&g))
        .filter(|(name, (a, b))| a != b && (bytes || **name != "body_bytes_sent"))
        .map(|(name, (a, b))| format!("{name} {a:?} vs {b:?}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_lines_are_compared_field_by_field_but_the_time() {
        let n = r#"127.0.0.1 - user [06/Dec/2026:18:02:27 +0000] "GET /a?x=1 HTTP/1.1" 200 4 "http://r.test/" "t/1 \x22q\x22""#;
        let g = r#"127.0.0.1 - user [06/Dec/2026:18:02:28 +0000] "GET /a?x=1 HTTP/1.1" 200 5 "http://r.test/" "t/1 \x22q\x22""#;
        assert_eq!(combined_fields(n).unwrap()[2], "GET /a?x=1 HTTP/1.1");
        assert_eq!(combined_fields(n).unwrap()[6], "t/1 \\x22q\\x22");
        assert!(log_differences(n, g, false).is_empty());
        assert_eq!(log_differences(n, g, true), ["body_bytes_sent \"4\" vs \"5\""]);
        let other = g.replace("user", "-").replace(" 200 ", " 404 ");
        assert_eq!(log_differences(n, &other, false).len(), 2);
        assert!(log_differences(n, "junk", false)[0].starts_with("not combined"));
    }

    #[test]
    fn fixture_lines_give_requests_and_each_has_fifteen_forms() {
        let reqs = base_requests("# request: GET a.test /x/y?k=1\n# other\n# request: POST b.test /\n", "f");
        assert_eq!(reqs.len(), 2);
        let v = variants(&reqs[0]);
        assert_eq!(v.len(), 15);
        let targets: Vec<&str> = v.iter().map(|r| r.target.as_str()).collect();
        assert!(
            targets.contains(&"/./x/y?k=1")
                && targets.contains(&"//x/y?k=1")
                && targets.contains(&"/zz/../x/y?k=1")
        );
        assert!(
            targets.contains(&"/%78/y?k=1")
                && targets.contains(&"/X/Y?k=1")
                && targets.contains(&"/x%2Fy?k=1")
        );
        assert!(targets.contains(&"/x/y?k=1&a=1&b=%20x"));
        let with =
            base_requests("# request: GET c.test /z | Accept-Encoding: gzip | Range: bytes=0-9\n", "f");
        assert_eq!(with[0].target, "/z");
        assert_eq!(
            with[0].headers,
            [("Accept-Encoding".into(), "gzip".into()), ("Range".into(), "bytes=0-9".into())]
        );
        assert!(variants(&with[0]).iter().all(|r| r.headers.starts_with(&with[0].headers)));
        let pp = base_requests("# request: GET p.test / | PROXY: v1 198.51.100.2\n# request: GET p.test / | PROXY: v2 10.1.2.3\n", "f");
        assert!(
            pp[0].headers.is_empty()
                && pp[0]
                    .bytes()
                    .starts_with(b"PROXY TCP4 198.51.100.2 127.0.0.1 5555 80\r\nGET / HTTP/1.1\r\n")
        );
        assert!(pp[1].bytes().starts_with(b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\x0a\x01\x02\x03"));
        assert!(
            variants(&pp[0]).iter().all(|r| r.bytes().starts_with(b"PROXY TCP4")),
            "every form behind the header"
        );
        let old = v.iter().find(|r| r.host.is_none()).unwrap();
        assert!(String::from_utf8(old.bytes())
            .unwrap()
            .starts_with("GET /x/y?k=1 HTTP/1.0\r\nConnection: close"));
    }

    #[test]
    fn differences_are_the_status_the_compared_headers_and_a_200s_body() {
        let a = |status, body: &str, h: &[(&str, &str)]| Answer {
            status,
            headers: h.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: body.as_bytes().to_vec(),
        };
        assert!(differences(&a(502, "<nginx>", &[]), &a(502, "<gateway>", &[])).is_empty());
        assert_eq!(differences(&a(502, "", &[]), &a(504, "", &[])), ["status 502 vs 504"]);
        assert_eq!(
            differences(&a(301, "", &[("location", "/a")]), &a(301, "", &[("location", "/b")])).len(),
            1
        );
        let d = differences(
            &a(200, r#"{"uri":"/a","host":"h"}"#, &[]),
            &a(200, r#"{"uri":"/b","host":"h"}"#, &[]),
        );
        assert_eq!(d, ["upstream saw uri: Some(String(\"/a\")) vs Some(String(\"/b\"))"]);
        assert_eq!(differences(&a(200, "x", &[]), &a(200, "y", &[])).len(), 1);
        // A gzipped body is compared by what it inflates to; gzip on one side only differs.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        std::io::Write::write_all(&mut gz, b"same").unwrap();
        let gz = Answer { body: gz.finish().unwrap(), ..a(200, "", &[("content-encoding", "gzip")]) };
        assert!(differences(&gz, &Answer { body: b"same".to_vec(), ..gz.clone() }).is_empty());
        assert_eq!(differences(&gz, &a(200, "same", &[])).len(), 1);
        // Nginx's absolute form of a relative redirect is the same target; another path is not.
        let loc = |l| a(302, "", &[("location", l)]);
        assert!(differences(&loc("http://h:1234/e/x?q=1"), &loc("/e/x?q=1")).is_empty());
        assert_eq!(differences(&loc("http://h:1234/e/x"), &loc("/e/y")).len(), 1);
        assert_eq!(differences(&loc("https://h/e"), &loc("http://h/e")).len(), 1);
        // A file's headers are compared (its length only for a 200 or 206), and a multipart
        // answer's boundary is each server's own.
        let file = |status, etag, len| a(status, "", &[("etag", etag), ("content-length", len)]);
        assert_eq!(differences(&file(200, "\"1-2\"", "2"), &file(200, "\"1-3\"", "2")).len(), 1);
        assert_eq!(differences(&file(200, "\"1\"", "2"), &file(200, "\"1\"", "3")).len(), 1);
        assert!(differences(&file(416, "\"1\"", "197"), &file(416, "\"1\"", "172")).is_empty());
        let multi = |b: &str| {
            let t = format!("multipart/byteranges; boundary={b}");
            a(206, &format!("\r\n--{b}\r\nxy\r\n--{b}--\r\n"), &[("content-type", &t), ("content-range", "")])
        };
        assert!(differences(&multi("0001"), &multi("0002")).is_empty());
    }
}
