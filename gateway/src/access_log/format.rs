//! Access lines by a template of Nginx's variables (`log_format`): parsed once at load (an
//! unknown variable is refused with its offset), rendered per request straight into the line,
//! escaped as Nginx escapes (`escape=default`, `json` or `none`).
//!
//! A value Nginx does not have for a request (no `Referer`, no upstream, no user) is `-` with
//! `escape=default` and empty with `json` and `none`, as in Nginx. With `default`, `"`, `\`
//! and bytes below 0x20 or from 0x7F are written `\xHH`; with `json`, `"` and `\` get a
//! backslash, control bytes are `\n`, `\r`, `\t`, `\b`, `\f` or `\u00XX`, anything else is as it
//! is (bytes that are not UTF-8 become U+FFFD: a line is text); with `none`, as it is.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Local, Utc};
use http::HeaderName;

use super::Entry;

/// How values are escaped (Nginx's `log_format ... escape=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Escape {
    /// `\xHH` for `"`, `\`, bytes below 0x20 and from 0x7F; a missing value is `-`.
    #[default]
    Default,
    /// JSON string escapes; a missing value is empty.
    Json,
    /// As they are; a missing value is empty.
    None,
}

impl Escape {
    /// `default`, `json` or `none`, as Nginx writes it after `escape=`.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "default" => Some(Self::Default),
            "json" => Some(Self::Json),
            "none" => Some(Self::None),
            _ => None,
        }
    }

    /// How Nginx writes it after `escape=`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Json => "json",
            Self::None => "none",
        }
    }
}

/// Nginx's predefined `combined` format.
pub const COMBINED: &str =
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// A variable a template may name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Var {
    RemoteAddr,
    RemoteUser,
    TimeLocal,
    TimeIso8601,
    Msec,
    Host,
    Request,
    RequestMethod,
    RequestUri,
    Args,
    ServerProtocol,
    Scheme,
    Status,
    BodyBytesSent,
    RequestTime,
    UpstreamAddr,
    UpstreamResponseTime,
    UpstreamHeaderTime,
    RequestId,
    GatewayCode,
    /// `$http_<name>`: a request header (`_` for `-`), several joined as Nginx 1.23 does.
    Http(HeaderName),
}

/// The variables by name (`$http_<name>` aside).
const VARS: [(&str, Var); 19] = [
    ("remote_addr", Var::RemoteAddr),
    ("remote_user", Var::RemoteUser),
    ("time_local", Var::TimeLocal),
    ("time_iso8601", Var::TimeIso8601),
    ("msec", Var::Msec),
    ("host", Var::Host),
    ("request", Var::Request),
    ("request_method", Var::RequestMethod),
    ("request_uri", Var::RequestUri),
    ("args", Var::Args),
    ("server_protocol", Var::ServerProtocol),
    ("scheme", Var::Scheme),
    ("status", Var::Status),
    ("body_bytes_sent", Var::BodyBytesSent),
    ("request_time", Var::RequestTime),
    ("upstream_addr", Var::UpstreamAddr),
    ("upstream_response_time", Var::UpstreamResponseTime),
    ("upstream_header_time", Var::UpstreamHeaderTime),
    ("request_id", Var::RequestId),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
}

/// A parsed `log_format`: literal text and variables, and how the values are escaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTemplate {
    parts: Vec<Part>,
    escape: Escape,
}

/// Why a template was refused: the byte offset in its text, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Where, in bytes from the template's start.
    pub offset: usize,
    /// What.
    pub message: String,
}

impl LogTemplate {
    /// Nginx's `combined`, escaped by default.
    pub fn combined() -> Self {
        Self::parse(COMBINED, Escape::Default).unwrap_or_else(|_| unreachable!("COMBINED parses"))
    }

    /// Parses `text`: `$name` or `${name}` of a known variable, `$http_<name>`; a `$` before
    /// anything but a name is itself.
    pub fn parse(text: &str, escape: Escape) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut at = 0;
        while let Some(found) = text[at..].find('$') {
            let start = at + found;
            lit.push_str(&text[at..start]);
            let after = &text[start + 1..];
            let (name, len) = match after.strip_prefix('{') {
                Some(braced) => match braced.find('}') {
                    Some(end) => (&braced[..end], end + 2),
                    None => return Err(error(start, "unclosed ${")),
                },
                None => {
                    let end =
                        after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                    (&after[..end], end)
                }
            };
            at = start + 1 + len;
            if name.is_empty() {
                lit.push('$');
                continue;
            }
            if !lit.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut lit)));
            }
            parts.push(Part::Var(var(name).map_err(|m| error(start, m))?));
        }
        lit.push_str(&text[at..]);
        if !lit.is_empty() {
            parts.push(Part::Text(lit));
        }
        Ok(Self { parts, escape })
    }

    /// Appends the line of `e` to `out` (without the newline).
    pub fn render(&self, e: &Entry<'_>, out: &mut String) {
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => self.value(v, e, out),
            }
        }
    }

    /// Appends `var`'s value for `e`, escaped.
    fn value(&self, var: &Var, e: &Entry<'_>, out: &mut String) {
        let esc = self.escape;
        match var {
            Var::RemoteAddr => match e.client {
                Some(ip) => {
                    let _ = write!(out, "{ip}");
                }
                None => missing(out, esc),
            },
            Var::RemoteUser => match e.headers.and_then(basic_user) {
                Some(user) => push_bytes(out, &user, esc),
                None => missing(out, esc),
            },
            Var::TimeLocal => local_time(e.time, out, "%d/%b/%Y:%H:%M:%S %z"),
            Var::TimeIso8601 => local_time(e.time, out, "%Y-%m-%dT%H:%M:%S%:z"),
            Var::Msec => {
                let ms = e.time.timestamp_millis();
                let _ = write!(out, "{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
            }
            Var::Host => host(e, out, esc),
            Var::Request => request_line(e, out, esc),
            Var::RequestMethod => text_or_missing(out, e.method, esc),
            Var::RequestUri => text_or_missing(out, e.uri, esc),
            Var::Args => match e.uri.split_once('?') {
                Some((_, q)) => push_bytes(out, q.as_bytes(), esc),
                None => missing(out, esc),
            },
            Var::ServerProtocol => text_or_missing(out, e.protocol, esc),
            Var::Scheme => out.push_str(e.scheme),
            Var::Status => {
                let _ = write!(out, "{:03}", e.status);
            }
            Var::BodyBytesSent => {
                let _ = write!(out, "{}", e.bytes);
            }
            Var::RequestTime => seconds(out, Some(e.request_time), esc),
            Var::UpstreamAddr => match e.upstream {
                Some(a) => {
                    let _ = write!(out, "{a}");
                }
                None => missing(out, esc),
            },
            Var::UpstreamResponseTime => seconds(out, e.upstream.and(e.upstream_response_time), esc),
            Var::UpstreamHeaderTime => seconds(out, e.upstream.and(e.upstream_time), esc),
            Var::RequestId => text_or_missing(out, e.request_id, esc),
            Var::GatewayCode => text_or_missing(out, e.code.map_or("", |c| c.as_str()), esc),
            Var::Http(name) => header(e, name, out, esc),
        }
    }
}

fn error(offset: usize, message: impl Into<String>) -> TemplateError {
    TemplateError { offset, message: message.into() }
}

/// The variable `name` (without `$`).
fn var(name: &str) -> Result<Var, String> {
    if let Some(field) = name.strip_prefix("http_") {
        let field = field.replace('_', "-").to_ascii_lowercase();
        return HeaderName::from_bytes(field.as_bytes())
            .map(Var::Http)
            .map_err(|_| format!("${name}: not a header name"));
    }
    if name == "gateway_code" {
        return Ok(Var::GatewayCode);
    }
    match VARS.iter().find(|(known, _)| *known == name) {
        Some((_, v)) => Ok(v.clone()),
        None => {
            let known: Vec<_> = VARS.iter().map(|(k, _)| format!("${k}")).collect();
            Err(format!(
                "unknown variable ${name} (known: {}, $gateway_code, $http_<name>)",
                known.join(", ")
            ))
        }
    }
}

/// A value the request does not have: `-` escaped by default, else nothing (as Nginx).
fn missing(out: &mut String, esc: Escape) {
    if esc == Escape::Default {
        out.push('-');
    }
}

fn text_or_missing(out: &mut String, s: &str, esc: Escape) {
    if s.is_empty() || s == "-" {
        missing(out, esc);
    } else {
        push_bytes(out, s.as_bytes(), esc);
    }
}

/// Appends `bytes` escaped as `esc` says.
pub(super) fn push_bytes(out: &mut String, bytes: &[u8], esc: Escape) {
    match esc {
        Escape::Default => {
            for &b in bytes {
                if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
                    out.push(b as char);
                } else {
                    let _ = write!(out, "\\x{b:02X}");
                }
            }
        }
        Escape::Json => {
            for c in String::from_utf8_lossy(bytes).chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    c if (c as u32) < 0x20 => {
                        let _ = write!(out, "\\u{:04X}", c as u32);
                    }
                    c => out.push(c),
                }
            }
        }
        Escape::None => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// Seconds with milliseconds (`0.012`), Nginx's `$request_time`; missing when `None`.
fn seconds(out: &mut String, d: Option<Duration>, esc: Escape) {
    match d {
        Some(d) => {
            let _ = write!(out, "{}.{:03}", d.as_secs(), d.subsec_millis());
        }
        None => missing(out, esc),
    }
}

thread_local! {
    /// The last second formatted per format, as Nginx caches its times: (format, second, text).
    static LOCAL_TIMES: RefCell<Vec<(&'static str, i64, String)>> = const { RefCell::new(Vec::new()) };
}

/// Appends `t` in the local time zone by `fmt`, formatted once a second per thread.
fn local_time(t: DateTime<Utc>, out: &mut String, fmt: &'static str) {
    let sec = t.timestamp();
    LOCAL_TIMES.with(|cache| {
        let mut cache = cache.borrow_mut();
        let slot = match cache.iter().position(|(f, _, _)| std::ptr::eq(*f, fmt)) {
            Some(i) => i,
            None => {
                cache.push((fmt, i64::MIN, String::new()));
                cache.len() - 1
            }
        };
        let (_, at, text) = &mut cache[slot];
        if *at != sec {
            text.clear();
            let _ = write!(text, "{}", t.with_timezone(&Local).format(fmt));
            *at = sec;
        }
        out.push_str(text);
    });
}

/// Nginx's `$host`: the host sent (no port, no trailing dot, lowercase), else the route's
/// server name.
fn host(e: &Entry<'_>, out: &mut String, esc: Escape) {
    let name = crate::shop::host_name(e.host);
    let name = if name.is_empty() { e.server_name } else { name };
    for b in name.bytes() {
        push_bytes(out, &[b.to_ascii_lowercase()], esc);
    }
}

/// `$request`: `method uri protocol`, or missing when the request was not parsed.
fn request_line(e: &Entry<'_>, out: &mut String, esc: Escape) {
    if e.method == "-" || e.method.is_empty() {
        return missing(out, esc);
    }
    push_bytes(out, e.method.as_bytes(), esc);
    out.push(' ');
    push_bytes(out, e.uri.as_bytes(), esc);
    out.push(' ');
    push_bytes(out, e.protocol.as_bytes(), esc);
}

/// `$http_<name>`: the field's values joined by `, ` (`; ` for `Cookie`), missing when absent.
fn header(e: &Entry<'_>, name: &HeaderName, out: &mut String, esc: Escape) {
    let Some(headers) = e.headers else { return missing(out, esc) };
    let sep: &[u8] = if name == http::header::COOKIE { b"; " } else { b", " };
    let mut any = false;
    for v in headers.get_all(name) {
        if any {
            push_bytes(out, sep, esc);
        }
        push_bytes(out, v.as_bytes(), esc);
        any = true;
    }
    if !any {
        missing(out, esc);
    }
}

/// The user of an `Authorization: Basic` field (Nginx's `$remote_user`, with or without
/// `auth_basic`): what comes before `:` in the decoded credentials.
fn basic_user(headers: &http::HeaderMap) -> Option<Vec<u8>> {
    let v = headers.get(http::header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let rest = rest.trim_ascii();
    let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
    let end = decoded.iter().position(|&b| b == b':')?;
    let mut user = decoded;
    user.truncate(end);
    Some(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &[u8])]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (name, value) in fields {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        h
    }

    fn entry(h: &http::HeaderMap) -> Entry<'_> {
        Entry {
            time: "2026-05-01T10:00:00.123456Z".parse().unwrap(),
            client: Some("203.0.113.7".parse().unwrap()),
            method: "GET",
            uri: "/a?b=1",
            protocol: "HTTP/1.1",
            status: 200,
            bytes: 512,
            request_time: Duration::from_micros(12_345),
            upstream: None,
            upstream_time: None,
            code: None,
            request_id: "id-1",
            upstream_response_time: None,
            headers: Some(h),
            host: "Shop.Example.:8080",
            scheme: "https",
            server_name: "",
        }
    }

    fn line(t: &LogTemplate, e: &Entry<'_>) -> String {
        let mut out = String::new();
        t.render(e, &mut out);
        out
    }

    /// What `$time_local` is in this process's zone (the tests may run in any).
    fn local(fmt: &str) -> String {
        let t: DateTime<Utc> = "2026-05-01T10:00:00Z".parse().unwrap();
        t.with_timezone(&Local).format(fmt).to_string()
    }

    #[test]
    fn combined_is_nginx_s_with_a_dash_for_what_is_missing() {
        let h = headers(&[("user-agent", b"curl/8.5.0")]);
        let tl = local("%d/%b/%Y:%H:%M:%S %z");
        assert_eq!(
            line(&LogTemplate::combined(), &entry(&h)),
            format!("203.0.113.7 - - [{tl}] \"GET /a?b=1 HTTP/1.1\" 200 512 \"-\" \"curl/8.5.0\"")
        );
        // `user:pass`; a present but empty `Referer` is empty, as in Nginx.
        let h = headers(&[("authorization", b"Basic dXNlcjpwYXNz"), ("referer", b"")]);
        let e = Entry { client: None, status: 0, ..entry(&h) };
        assert_eq!(
            line(&LogTemplate::combined(), &e),
            format!("- - user [{tl}] \"GET /a?b=1 HTTP/1.1\" 000 512 \"\" \"-\"")
        );
        let bad = headers(&[("authorization", b"Basic !!!")]);
        assert!(line(&LogTemplate::combined(), &entry(&bad)).starts_with("203.0.113.7 - - ["));
    }

    #[test]
    fn values_are_escaped_as_nginx_escapes_them() {
        // Control bytes other than a tab never reach a header (the parser refuses them).
        let bytes: &[u8] = b"a\x01b\x1fc\td\x7fe\"f\\g\xc3\xa9";
        let escaped = |escape| {
            let mut out = String::new();
            push_bytes(&mut out, bytes, escape);
            out
        };
        assert_eq!(escaped(Escape::Default), "a\\x01b\\x1Fc\\x09d\\x7Fe\\x22f\\x5Cg\\xC3\\xA9");
        assert_eq!(escaped(Escape::Json), "a\\u0001b\\u001Fc\\td\u{7f}e\\\"f\\\\gé");
        assert_eq!(escaped(Escape::None), "a\u{1}b\u{1f}c\td\u{7f}e\"f\\gé");
        let h = headers(&[("user-agent", b"\"\t\xc3\xa9")]);
        let e = entry(&h);
        let t = |escape| LogTemplate::parse("[$http_user_agent]", escape).unwrap();
        assert_eq!(line(&t(Escape::Default), &e), "[\\x22\\x09\\xC3\\xA9]");
        assert_eq!(line(&t(Escape::Json), &e), "[\\\"\\té]");
        // A missing value: `-` by default, empty with json and none.
        let t = |escape| LogTemplate::parse("\"$http_referer\" $upstream_addr", escape).unwrap();
        assert_eq!(line(&t(Escape::Default), &e), "\"-\" -");
        assert_eq!(line(&t(Escape::Json), &e), "\"\" ");
        assert_eq!(line(&t(Escape::None), &e), "\"\" ");
        // Literal text is never escaped.
        assert_eq!(line(&LogTemplate::parse("\"\\$status", Escape::Default).unwrap(), &e), "\"\\200");
    }

    #[test]
    fn every_variable_has_its_value() {
        let h = headers(&[
            ("x-forwarded-for", b"10.0.0.1"),
            ("x-forwarded-for", b"10.0.0.2"),
            ("cookie", b"a=1"),
            ("cookie", b"b=2"),
        ]);
        let e = Entry {
            upstream: Some("127.0.0.1:9000".parse().unwrap()),
            upstream_time: Some(Duration::from_millis(3)),
            upstream_response_time: Some(Duration::from_millis(1_204)),
            code: Some(protocol::codes::Code::SoldOut),
            ..entry(&h)
        };
        let t = LogTemplate::parse(
            "$remote_addr|$host|$request|$request_method|$request_uri|$args|$server_protocol|$scheme|\
             $status|$body_bytes_sent|$request_time|$upstream_addr|$upstream_response_time|\
             $upstream_header_time|$request_id|$gateway_code|$http_x_forwarded_for|$http_cookie|$msec|${status}x",
            Escape::Default,
        )
        .unwrap();
        assert_eq!(
            line(&t, &e),
            "203.0.113.7|shop.example|GET /a?b=1 HTTP/1.1|GET|/a?b=1|b=1|HTTP/1.1|https|200|512|0.012|\
             127.0.0.1:9000|1.204|0.003|id-1|SOLD_OUT|10.0.0.1, 10.0.0.2|a=1; b=2|1777629600.123|200x"
        );
        let t = LogTemplate::parse("$time_iso8601 $host $args $gateway_code", Escape::Default).unwrap();
        let e = Entry { uri: "/a", host: "", server_name: "shop.example", ..entry(&h) };
        assert_eq!(line(&t, &e), format!("{} shop.example - -", local("%Y-%m-%dT%H:%M:%S%:z")));
        // A request refused before it was parsed.
        let refused = Entry { method: "-", uri: "-", protocol: "-", headers: None, host: "", ..entry(&h) };
        assert_eq!(
            line(&LogTemplate::parse("\"$request\" $http_x_a $host.", Escape::Default).unwrap(), &refused),
            "\"-\" - ."
        );
    }

    #[test]
    fn an_unknown_variable_is_refused_at_its_place() {
        let err = LogTemplate::parse("$remote_addr [$time_locl]", Escape::Default).unwrap_err();
        assert_eq!(err.offset, 14);
        assert!(err.message.contains("unknown variable $time_locl"), "{}", err.message);
        assert_eq!(LogTemplate::parse("a ${status", Escape::Json).unwrap_err().offset, 2);
        assert!(LogTemplate::parse("$http_x_a", Escape::Json).is_ok());
        assert_eq!(
            LogTemplate::parse("1 $ 2 $$", Escape::Json).unwrap().parts,
            vec![Part::Text("1 $ 2 $$".into())]
        );
        assert_eq!(Escape::parse("json"), Some(Escape::Json));
        assert_eq!(Escape::parse("JSON"), None);
    }
}
