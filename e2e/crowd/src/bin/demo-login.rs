//! `demo-login`: THE DEMO'S STAND-IN for a shop's login, never part of a deployment.
//!
//! A real shop signs its buyers in with its own auth service, which sets the login JWT the
//! buyer's page reads (the cookie `seckill_login`, see the README). The demo and the browser
//! tests have no shop, so this small server plays it: `GET /login` shows a form;
//! `GET /login?user=NAME&next=/seckill/ID/` signs a login JWT for NAME (HS256, with the demo's
//! own key from `SECKILL_LOGIN_KEY`, the key the demo's gateway verifies with; claim
//! `level` 1), sets the cookie and sends the browser back to `next`
//! (a path of this host only, else `/`). The demo's gateway reaches
//! it through a shop route (`[[route]] path_prefix = "/login"`) only in the demo's own server
//! file; the gateway itself has no login code. It also plays the rest of the shop: `GET /shop`
//! (and below) answers a small page, the demo's shop route that a client reads every 10 ms
//! while the sale runs, to measure what the sale costs the shop.
//!
//! ```sh
//! SECKILL_LOGIN_KEY=... demo-login --listen 127.0.0.1:8085
//! ```

use std::net::SocketAddr;

use anyhow::Context;
use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use clap::Parser;
use e2e::client::Auth;
use serde::Deserialize;

/// The cookie the buyer's page reads the login JWT from.
const COOKIE: &str = "seckill_login";
/// How long a demo login lasts, seconds (the JWT's `exp` and the cookie's `Max-Age`).
const LOGIN_SECS: u32 = 600;

#[derive(Parser, Debug)]
#[command(about = "The demo's stand-in shop login (issues login JWTs with the demo's own key)")]
struct Args {
    /// Where to listen (loopback).
    #[arg(long, default_value = "127.0.0.1:8085")]
    listen: SocketAddr,
    /// The environment variable holding the HS256 key (the gateway's `login_key`).
    #[arg(long, default_value = "SECKILL_LOGIN_KEY")]
    key_env: String,
}

#[derive(Debug, Deserialize)]
struct LoginQuery {
    user: Option<String>,
    next: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let key = std::env::var(&args.key_env).with_context(|| format!("{} is not set", args.key_env))?;
    let auth = Auth::hs256(key.as_bytes())?;
    let app = Router::new()
        .route("/login", get(login))
        .route("/shop", get(shop))
        .route("/shop/{*rest}", get(shop))
        .with_state(auth);
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("bind {}", args.listen))?;
    eprintln!("demo-login (the demo's stand-in shop login) on http://{}/login", args.listen);
    axum::serve(listener, app).await?;
    Ok(())
}

/// The rest of the shop: a small page.
async fn shop() -> &'static str {
    "hello, shop!\n"
}

/// A user name: 1 to 64 of `A-Z a-z 0-9 _ - .`.
fn valid_user(user: &str) -> bool {
    (1..=64).contains(&user.len()) && user.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

/// Where to go after signing in: a path of this host only, else `/`.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if same_origin_path(n) => n,
        _ => "/",
    }
}

/// Whether `n` (the query's `next`, already decoded once) is a path of this host: visible ASCII
/// (it becomes the `Location` header as it is), one leading `/` and no `\`, no control character
/// and no whitespace, and so again each time it is percent-decoded (a few times, bounded).
/// Browsers drop tabs and newlines from a URL and read `\` as `/`, so `/\t/evil.example` (the
/// query `next=/%09/evil.example`) or `/%2F/evil.example` would lead to another host.
fn same_origin_path(n: &str) -> bool {
    if !n.bytes().all(|b| b.is_ascii_graphic()) {
        return false;
    }
    let mut path = n.to_string();
    for _ in 0..4 {
        let plain = path.starts_with('/')
            && !path.starts_with("//")
            && !path.contains('\\')
            && !path.chars().any(|c| c.is_control() || c.is_whitespace());
        let decoded = percent_decoded(&path);
        if !plain || decoded == path {
            return plain;
        }
        path = decoded;
    }
    false
}

/// `s` with each `%XX` replaced by its byte (invalid UTF-8 as U+FFFD).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b.get(i + 1..i + 3).filter(|h| b[i] == b'%' && h.iter().all(u8::is_ascii_hexdigit));
        match hex.and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn login(State(auth): State<Auth>, Query(q): Query<LoginQuery>) -> Response {
    let next = safe_next(q.next.as_deref()).to_string();
    let Some(user) = q.user.filter(|u| !u.is_empty()) else { return form(&next).into_response() };
    if !valid_user(&user) {
        return (StatusCode::BAD_REQUEST, "user: 1 to 64 of A-Z a-z 0-9 _ - .").into_response();
    }
    // Auth::login's JWT lasts LOGIN_SECS too (ten minutes).
    let jwt = auth.login(&user, serde_json::json!({"level": 1}));
    let cookie = format!("{COOKIE}={jwt}; Path=/seckill/; Max-Age={LOGIN_SECS}; SameSite=Strict");
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let (Ok(c), Ok(l)) = (HeaderValue::from_str(&cookie), HeaderValue::from_str(&next)) {
        r.headers_mut().insert(header::SET_COOKIE, c);
        r.headers_mut().insert(header::LOCATION, l);
    }
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn form(next: &str) -> Html<String> {
    let next = next.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;");
    Html(format!(
        "<!doctype html><meta charset=utf-8><meta name=viewport content='width=device-width, initial-scale=1'>\
         <title>DEMO login</title><style>body{{font:16px system-ui,sans-serif;max-width:30rem;margin:2rem auto;padding:0 1rem}}\
         .demo{{background:#fff3cd;border:2px solid #8a6d00;padding:.6rem;border-radius:.4rem}}</style>\
         <p class=demo><strong>DEMO stand-in login — not a shop's.</strong> It signs a login JWT with the demo's own key \
         for any name you type. 演示用登录，仅供演示。</p>\
         <form method=get action=/login><label>User / 用户名 <input name=user required pattern='[A-Za-z0-9_.-]{{1,64}}' autofocus></label>\
         <input type=hidden name=next value=\"{next}\"> <button>Sign in / 登录</button></form>"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_host_and_users_are_plain() {
        assert_eq!(safe_next(Some("/seckill/c/")), "/seckill/c/");
        for bad in [Some("//evil.example/"), Some("https://evil.example/"), Some("/\\evil"), None] {
            assert_eq!(safe_next(bad), "/");
        }
        assert!(valid_user("buyer-1.a_b"));
        assert!(!valid_user("") && !valid_user("a b") && !valid_user(&"x".repeat(65)));
    }

    #[test]
    fn next_refuses_every_way_off_this_host() {
        // As the query arrives decoded (axum's Query): `next=/%09/evil.example` is "/\t/evil.example",
        // which a browser reads as `//evil.example` (it drops tabs and newlines in a URL).
        let nasty = [
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\n/evil.example",
            "\t//evil.example",
            "/ /evil.example",
            "/\u{0}/evil.example",
            "/\u{7f}/evil.example",
            "/\u{a0}/evil.example",
            "/\u{3000}/evil.example",
            "//evil.example",
            "///evil.example",
            "/\\evil.example",
            "\\/evil.example",
            "/%2F/evil.example",
            "/%2f%2fevil.example",
            "/%5Cevil.example",
            "/%09/evil.example",
            "/%0a/evil.example",
            "/%252F/evil.example",
            "/%25252525252F/evil.example",
            "https://evil.example/",
            "javascript:alert(1)",
            "evil.example",
            "",
            " /seckill/c/",
            "/seckill/c/\u{2028}",
        ];
        for bad in nasty {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?}");
        }
        let good = ["/", "/seckill/c/", "/seckill/c/?a=1&b=x#top", "/shop/a-b_c.d~e", "/seckill/%E6%BC%94/"];
        for ok in good {
            assert_eq!(safe_next(Some(ok)), ok, "{ok:?}");
        }
    }

    #[tokio::test]
    async fn a_login_with_the_reported_next_goes_home() {
        let auth = Auth::hs256(b"0123456789abcdef0123456789abcdef").unwrap();
        for (query, to) in [("next=/%09/evil.example", "/"), ("next=/seckill/c/", "/seckill/c/")] {
            let uri = format!("http://127.0.0.1/login?user=buyer&{query}").parse().unwrap();
            let r = login(State(auth.clone()), Query::try_from_uri(&uri).unwrap()).await;
            assert_eq!(r.status(), StatusCode::SEE_OTHER, "{query}");
            assert_eq!(r.headers()[header::LOCATION], to, "{query}");
        }
    }
}
