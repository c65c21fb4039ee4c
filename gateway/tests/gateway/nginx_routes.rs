//! The shop's routes as Nginx's `server_name` and `location` (issue 38, part 2), through the
//! binary on proxy-only files (no sale, none of the stack): each route's upstream answers its
//! own name, so an answer says which route a request took.

use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// An upstream answering `name` to every request.
async fn named(name: &str) -> MockServer {
    let up = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_string(name))
        .mount(&up)
        .await;
    up
}

/// A proxy-only file with `routes` (`(name, extra TOML lines)`), each to its own upstream
/// (answering its name); returns the text and the upstreams.
pub(crate) async fn proxy_file(routes: &[(&str, &str)]) -> (String, Vec<MockServer>) {
    let mut text = format!("[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n", workers());
    let mut ups = Vec::new();
    for (name, extra) in routes {
        let up = named(name).await;
        text += &format!("\n[[route]]\nname = \"{name}\"\nupstreams = [\"{}\"]\n{extra}\n", up.address());
        ups.push(up);
    }
    (text, ups)
}

/// `GET path` with `Host: host`: (status, body).
pub(crate) async fn get(gw: &Gateway, host: &str, path: &str) -> (u16, String) {
    let resp = reqwest::Client::new().get(gw.url(path)).header("host", host).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test]
async fn hosts_and_locations_take_nginx_precedence() {
    let (text, _ups) = proxy_file(&[
        ("fallback", "host = \"fallback.test\"\ndefault_server = true\npath = \"/\""),
        ("exact", "host = \"shop.test\"\npath = \"= /\""),
        ("prefix", "host = \"shop.test\"\npath = \"/\""),
        ("stop", "host = \"shop.test\"\npath = \"^~ /static/\""),
        ("image", "host = \"shop.test\"\npath = '~* \\.(png|jpg)$'"),
        ("first-regex", "host = \"shop.test\"\npath = '~ ^/p/(\\d+)'"),
        ("later-regex", "host = \"shop.test\"\npath = '~ ^/p/'"),
        ("legacy", "host = \"shop.test\"\npath_prefix = \"/p/\""),
        ("leading", "host = \"*.shop.test\"\npath = \"/\""),
        ("trailing", "host = \"www.shop.*\"\npath = \"/\""),
        ("regex", "host = '~^api\\d+\\.shop\\.test$'\npath = \"/\""),
    ])
    .await;
    let gw = Gateway::start_text(&text).await;
    let cases = [
        ("shop.test", "/", "exact"),
        ("SHOP.test:80", "/index.html", "prefix"),
        ("shop.test", "/static/a.png", "stop"),
        ("shop.test", "/img/a.PNG", "image"),
        ("shop.test", "/p/12", "first-regex"),
        ("shop.test", "/p/x", "later-regex"),
        ("a.shop.test", "/", "leading"),
        ("www.shop.test", "/", "leading"),
        ("www.shop.io", "/", "trailing"),
        ("api7.shop.test", "/", "leading"),
        ("api7.shop.tst", "/", "fallback"),
        ("unknown.example", "/x", "fallback"),
        ("fallback.test", "/x", "fallback"),
    ];
    for (host, path, route) in cases {
        assert_eq!(get(&gw, host, path).await, (200, route.to_string()), "{host}{path}: {}", gw.log());
    }
}

#[tokio::test]
async fn a_regex_host_several_hosts_and_a_host_without_the_path() {
    let (text, _ups) = proxy_file(&[
        ("regex", "host = '~^api\\d+\\.shop\\.test$'\npath = \"/\""),
        ("admin", "host = \"admin.shop.test\"\npath = \"/admin/\""),
        ("any", "path = \"/\""),
        ("pair", "hosts = [\"one.test\", \"*.two.test\"]\npath = \"/\""),
    ])
    .await;
    let gw = Gateway::start_text(&text).await;
    assert_eq!(get(&gw, "api7.shop.test", "/v1").await, (200, "regex".into()));
    assert_eq!(get(&gw, "elsewhere", "/v1").await, (200, "any".into()));
    assert_eq!(get(&gw, "admin.shop.test", "/admin/x").await, (200, "admin".into()));
    assert_eq!(get(&gw, "one.test", "/x").await, (200, "pair".into()), "one of a route's hosts");
    assert_eq!(get(&gw, "a.two.test", "/x").await, (200, "pair".into()), "another");
    // As Nginx: the host's routes only; none matches, no other host's route is taken.
    let (status, _) = get(&gw, "admin.shop.test", "/other").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_bad_regex_or_a_second_route_for_a_place_is_refused_at_start() {
    for (extra, line, words) in [
        ("path = \"~ ^/(a\"", 9, "field `route[1].path`: not a valid regex"),
        ("path = \"/\"", 9, "field `route[1].path`: route[0] has the same host"),
    ] {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{{port}}\"\n\n[[route]]\nname = \"a\"\npath = \"/\"\n\
             upstreams = [\"127.0.0.1:1\"]\n[[route]]\n{extra}\nname = \"b\"\nupstreams = [\"127.0.0.1:1\"]\n"
        );
        let dir = temp_dir("gw-bad-");
        let file = dir.join("server.toml");
        std::fs::write(&file, text.replace("{port}", "8080")).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
            .arg("--conf")
            .arg(&file)
            .arg("--check")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(&format!("server.toml:{line}:")) && said.contains(words), "{said}");
        remove_unless_failed(&dir);
    }
}

/// A client that shows redirects rather than following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

#[tokio::test]
async fn return_answers_and_redirects_with_nginx_variables() {
    let (text, _ups) = proxy_file(&[("shop", "path = \"/\"")]).await;
    let routes = "\n[[route]]\nname = \"moved\"\nhost = \"old.test\"\npath = \"/\"\n\
                  return = \"301 https://new.test$request_uri\"\n\
                  [[route]]\nname = \"gone\"\npath = \"= /gone\"\nreturn = \"410 gone from $host ($args)\"\n\
                  [[route]]\nname = \"go\"\npath = \"/go/\"\nreturn = \"$scheme://$host/landing?from=$uri\"\n\
                  [[route]]\nname = \"item\"\npath = '~ ^/item/(\\d+)$'\nreturn = \"308 /items/$1$is_args$args\"\n\
                  [[route]]\nname = \"empty\"\npath = \"= /ping\"\nreturn = \"204\"\n";
    let gw = Gateway::start_text(&format!("{text}{routes}")).await;
    let http = no_redirects();
    let send = |host: &str, path: &str| http.get(gw.url(path)).header("host", host).send();
    let r = send("old.test:8080", "/a/b?c=d").await.unwrap();
    assert_eq!(r.status(), 301);
    assert_eq!(r.headers()["location"], "https://new.test/a/b?c=d");
    assert!(r.text().await.unwrap().contains("<h1>301 Moved Permanently</h1>"), "an HTML body, as Nginx");
    let r = send("Shop.Test", "/gone?why=sold").await.unwrap();
    assert_eq!(r.status(), 410);
    assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.text().await.unwrap(), "gone from shop.test (why=sold)");
    let r = send("shop.test", "/go/x").await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.headers()["location"].to_str().unwrap()),
        (302, "http://shop.test/landing?from=/go/x")
    );
    let r = send("shop.test", "/item/42?ref=mail").await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (308, "/items/42?ref=mail"));
    let r = send("shop.test", "/ping").await.unwrap();
    assert_eq!(r.status(), 204);
    // Anything else is still proxied.
    assert_eq!(get(&gw, "shop.test", "/item/x").await, (200, "shop".into()));
}

#[tokio::test]
async fn rewrite_and_replace_prefix_change_the_path_before_proxying() {
    let (text, ups) = proxy_file(&[
        (
            "api",
            "path = \"/api/\"\nrewrite = { regex = '^/api/v1/(\\w+)/(\\d+)$', replacement = '/v2/$2/$1' }",
        ),
        ("own-args", "path = \"/q/\"\nrewrite = { regex = '^/q/(.*)$', replacement = '/search?q=$1' }"),
        ("no-args", "path = \"/n/\"\nrewrite = { regex = '^/n/(.*)$', replacement = '/$1?' }"),
        ("shop", "path = \"/shop/\"\nreplace_prefix = \"/\""),
    ])
    .await;
    let gw = Gateway::start_text(&text).await;
    let seen = |i: usize| {
        let up = &ups[i];
        async move {
            let got = up.received_requests().await.unwrap();
            let last = got.last().expect("a request reached the upstream");
            last.url.path().to_string() + last.url.query().map(|q| format!("?{q}")).as_deref().unwrap_or("")
        }
    };
    assert_eq!(get(&gw, "a", "/api/v1/user/12?x=1").await.0, 200);
    assert_eq!(seen(0).await, "/v2/12/user?x=1", "captures in their new order, the query kept");
    assert_eq!(get(&gw, "a", "/api/other?x=1").await.0, 200);
    assert_eq!(seen(0).await, "/api/other?x=1", "no match: the path as sent");
    assert_eq!(get(&gw, "a", "/q/shoes?page=2").await.0, 200);
    assert_eq!(seen(1).await, "/search?q=shoes&page=2", "the client's query after the replacement's");
    assert_eq!(get(&gw, "a", "/n/x?drop=1").await.0, 200);
    assert_eq!(seen(2).await, "/x", "a replacement ending in ? drops the query");
    assert_eq!(get(&gw, "a", "/shop/cart?y=2").await.0, 200);
    assert_eq!(seen(3).await, "/cart?y=2", "the prefix replaced, like proxy_pass http://up/;");
}

#[tokio::test]
async fn rewrites_run_in_order_last_searches_again_and_a_cycle_is_500() {
    // = /z0 .. = /z14 each `rewrite ^ /z<i+1> last`; /z15 is proxied.
    let chain: Vec<(String, String)> = (0..16)
        .map(|i| {
            let rw = format!("rewrite = {{ regex = '^', replacement = '/z{}', flag = \"last\" }}", i + 1);
            (format!("z{i}"), format!("path = \"= /z{i}\"\n{}", if i < 15 { rw.as_str() } else { "" }))
        })
        .collect();
    let mut routes: Vec<(&str, &str)> = chain.iter().map(|(n, e)| (n.as_str(), e.as_str())).collect();
    routes.extend([
        ("legacy", "path = \"/legacy/\"\nrewrite = { regex = '^/legacy/(.*)$', replacement = '/shop/$1', flag = \"last\" }"),
        ("shop", "path = \"/shop/\""),
        (
            "chain",
            "path = \"/chain/\"\nrewrite = [{ regex = '^/chain/(.*)$', replacement = '/step/$1', flag = \"none\" },\n\
             { regex = '^/step/(.*)$', replacement = '/final/$1?z=1', flag = \"none\" }]",
        ),
        ("final", "path = \"/final/\"\nreplace_prefix = \"/fin/\""),
        ("go", "path = \"/go/\"\nrewrite = { regex = '^/go/(.*)$', replacement = '/dest/$1', flag = \"redirect\" }"),
    ]);
    let (text, ups) = proxy_file(&routes).await;
    let gw = Gateway::start_text(&text).await;
    let seen = |i: usize| {
        let up = &ups[i];
        async move {
            let got = up.received_requests().await.unwrap();
            let last = got.last().expect("a request reached the upstream");
            last.url.path().to_string() + last.url.query().map(|q| format!("?{q}")).as_deref().unwrap_or("")
        }
    };
    // Ten searches again are Nginx's most: the eleventh is a 500.
    assert_eq!(get(&gw, "a", "/z5").await, (200, "z15".into()));
    assert_eq!(get(&gw, "a", "/z4").await.0, 500);
    assert_eq!(get(&gw, "a", "/legacy/item?x=1").await, (200, "shop".into()));
    assert_eq!(seen(17).await, "/shop/item?x=1", "the new URI, the query kept");
    assert_eq!(get(&gw, "a", "/chain/a?y=2").await, (200, "final".into()));
    assert_eq!(seen(19).await, "/fin/a?z=1&y=2", "both rewrites, then the prefix of the route found");
    let no_follow = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = no_follow.get(gw.url("/go/x?y=1")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 302);
    assert_eq!(r.headers()["location"], "/dest/x?y=1");
}

#[tokio::test]
async fn request_headers_set_and_removed_response_headers_added_and_hidden() {
    let up = MockServer::start().await;
    let answer = |status| {
        ResponseTemplate::new(status).insert_header("x-powered-by", "php").insert_header("x-up", "1")
    };
    Mock::given(wiremock::matchers::path("/missing")).respond_with(answer(404)).mount(&up).await;
    Mock::given(wiremock::matchers::any()).respond_with(answer(200)).mount(&up).await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n\n\
         [[route]]\nname = \"headers\"\nhost = \"shop.test\"\npath = \"/\"\nupstreams = [\"{up}\"]\n\
         proxy_set_header = {{ Host = \"upstream.internal\", \"X-Real-IP\" = \"$remote_addr\", \
         \"User-Agent\" = \"\", \"X-Path\" = \"$uri\" }}\n\
         add_header = {{ \"X-Frame-Options\" = \"DENY\" }}\n\
         add_header_always = {{ \"X-Always\" = \"yes\" }}\n\
         proxy_hide_header = [\"X-Powered-By\"]\n\n\
         [[route]]\nname = \"redirect\"\nhost = \"shop.test\"\npath = \"= /r\"\nreturn = \"302 /a\"\n\
         add_header = {{ \"X-Frame-Options\" = \"DENY\" }}\n\n\
         [[route]]\nname = \"plain\"\npath = \"/\"\nupstreams = [\"{up}\"]\n",
        workers(),
        up = up.address()
    );
    let gw = Gateway::start_text(&text).await;
    let http = no_redirects();
    let send = |host: &str, path: &str| {
        http.get(gw.url(path)).header("host", host).header("user-agent", "ua/1").send()
    };

    let ok = send("shop.test", "/a").await.unwrap();
    assert_eq!(ok.status(), 200);
    let h = ok.headers();
    assert_eq!((h["x-frame-options"].to_str().unwrap(), h["x-always"].to_str().unwrap()), ("DENY", "yes"));
    assert!(h.get("x-powered-by").is_none(), "hidden: {h:?}");
    assert_eq!(h["x-up"], "1", "the rest passes");
    let seen = up.received_requests().await.unwrap();
    let req = &seen.last().unwrap().headers;
    assert_eq!(req["host"], "upstream.internal");
    assert_eq!(req["x-real-ip"], "127.0.0.1");
    assert_eq!(req["x-path"], "/a");
    assert!(req.get("user-agent").is_none(), "an empty value removes the field: {req:?}");

    let missing = send("shop.test", "/missing").await.unwrap();
    assert_eq!(missing.status(), 404);
    let h = missing.headers();
    assert!(h.get("x-frame-options").is_none(), "not on a 404 without always");
    assert_eq!(h["x-always"], "yes");
    assert!(h.get("x-powered-by").is_none());

    let redirect = send("shop.test", "/r").await.unwrap();
    assert_eq!(
        (redirect.status().as_u16(), redirect.headers()["x-frame-options"].to_str().unwrap()),
        (302, "DENY")
    );

    // Without proxy_set_header, the upstream is told the client's Host as sent.
    assert_eq!(send("other.test:8080", "/b").await.unwrap().status(), 200);
    let seen = up.received_requests().await.unwrap();
    let req = &seen.last().unwrap().headers;
    assert_eq!(
        (req["host"].to_str().unwrap(), req["user-agent"].to_str().unwrap()),
        ("other.test:8080", "ua/1")
    );
}

#[tokio::test]
async fn a_slow_upstream_is_504_and_a_refused_one_502_with_html_pages_or_the_routes_own() {
    let slow = MockServer::start().await;
    Mock::given(wiremock::matchers::path("/slow"))
        .respond_with(ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(3)))
        .mount(&slow)
        .await;
    Mock::given(wiremock::matchers::any()).respond_with(ResponseTemplate::new(200)).mount(&slow).await;
    let refused = format!("127.0.0.1:{}", free_port());
    let pages = temp_dir("gw-pages-");
    let page = pages.join("50x.html");
    std::fs::write(&page, "<p>back soon</p>").unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n\n\
         [[route]]\nname = \"slow\"\npath = \"/\"\nupstreams = [\"{}\"]\nread_timeout_ms = 300\n\
         add_header = {{ \"X-Only-2xx\" = \"1\" }}\nadd_header_always = {{ \"X-Always\" = \"1\" }}\n\n\
         [[route]]\nname = \"refused\"\npath = \"/gone/\"\nupstreams = [\"{refused}\"]\n\
         error_page = {{ 502 = '{}' }}\n",
        workers(),
        slow.address(),
        page.display()
    );
    let gw = Gateway::start_text(&text).await;
    let http = reqwest::Client::new();
    assert_eq!(http.get(gw.url("/fast")).send().await.unwrap().status(), 200, "within the timeout");
    // The upstream would answer 200 after 3 s: the 504 is the route's read timeout.
    let r = http.get(gw.url("/slow")).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["content-type"].to_str().unwrap()), (504, "text/html"));
    assert_eq!(r.headers()["x-always"], "1");
    assert!(r.headers().get("x-only-2xx").is_none());
    assert!(r.text().await.unwrap().contains("<title>504 Gateway Timeout</title>"));
    // Refused, then (after a health check) no healthy address: 502 either way.
    for _ in 0..2 {
        let r = http.get(gw.url("/gone/x")).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.headers()["content-type"].to_str().unwrap()), (502, "text/html"));
        assert_eq!(r.text().await.unwrap(), "<p>back soon</p>", "the route's error_page");
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    // The defaults are Nginx's 60 s.
    let conf =
        gateway::conf::parse_server(std::path::Path::new("s.toml"), &text.replace("{port}", "1")).unwrap();
    let pool = conf.routes[1].pool.clone().unwrap();
    let minute = std::time::Duration::from_secs(60);
    assert_eq!((pool.connect_timeout, pool.read_timeout, pool.send_timeout), (minute, minute, minute));
    remove_unless_failed(&pages);
}

#[tokio::test]
async fn a_path_is_matched_normalized_so_a_fenced_path_cannot_be_walked_around() {
    let (text, ups) =
        proxy_file(&[("shop", "path = \"/\""), ("api", "path = \"/api/\"\nreplace_prefix = \"/\"")]).await;
    let fence = "\n[[route]]\nname = \"fence\"\npath = \"^~ /admin/\"\nreturn = \"403 no\"\n";
    let gw = Gateway::start_text(&format!("{text}{fence}")).await;
    let raw = |target: &str| {
        let head = format!("GET {target} HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n");
        async move { crate::limits::send_raw(gw.port, head.as_bytes()).await.expect("an answer") }
    };
    for target in ["/admin/x", "/%61dmin/x", "//admin//x", "/a/../admin/x", "/a/%2e%2e/admin/x"] {
        assert_eq!(raw(target).await.status, 403, "{target}");
    }
    let seen = ups[0].received_requests().await.unwrap();
    assert!(!seen.iter().any(|r| r.url.path().contains("dmin")), "none reached the shop");
    for target in ["/a%zz", "/../etc/passwd", "/a%00"] {
        let answer = raw(target).await;
        assert_eq!((answer.status, answer.code().as_str()), (400, "BAD_REQUEST"), "{target}: {answer:?}");
    }
    // A path proxied as is goes as it came; a rewritten one is encoded again.
    // (The upstream's URL parser resolves dot segments itself: a double slash shows it.)
    assert_eq!(raw("/x//y%20z?q=1").await.status, 200);
    let seen = ups[0].received_requests().await.unwrap();
    assert_eq!(seen.last().unwrap().url.as_str().split_once("/x").unwrap().1, "//y%20z?q=1");
    assert_eq!(raw("/api//v1/a%20b?q=1").await.status, 200);
    let seen = ups[1].received_requests().await.unwrap();
    let url = &seen.last().unwrap().url;
    assert_eq!((url.path(), url.query()), ("/v1/a%20b", Some("q=1")), "merged, prefix replaced, encoded");
}

/// `GET path HTTP/1.0` with no Host: (the head, lower case).
async fn get_without_host(gw: &Gateway, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = gw.url("").trim_start_matches("http://").trim_end_matches('/').to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf).to_ascii_lowercase()
}

#[tokio::test]
async fn host_without_a_host_field_is_the_servers_name_as_nginxs() {
    // Found by e2e/parity against Nginx: `$host` of a request without `Host` was empty (a
    // redirect to `https:///moved`); Nginx's is the server's name.
    let (text, _ups) = proxy_file(&[(
        "moved",
        "host = \"ans.test\"\ndefault_server = true\npath = \"/\"\nreturn = \"200 to https://$host$request_uri\"",
    )])
    .await;
    let text = text.replace("upstreams = [", "# upstreams = [");
    let gw = Gateway::start_text(&text).await;
    let answer = get_without_host(&gw, "/moved?x=1").await;
    assert!(answer.ends_with("\r\n\r\nto https://ans.test/moved?x=1"), "{answer}");
    // With a Host, its name, as before.
    assert_eq!(get(&gw, "Other.Test:80", "/a").await, (200, "to https://other.test/a".into()));
}
