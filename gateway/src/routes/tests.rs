//! The matcher against the examples of Nginx's documentation of `location` and `server_name`.

use std::path::Path;

use super::*;
use crate::conf::parse_server;

/// A table of routes `(host, path)` ("" for no host), named by their index.
fn table(routes: &[(&str, &str)]) -> RouteTable {
    let mut text = String::from("[server]\nlisten = \"127.0.0.1:8080\"\n");
    for (i, (host, path)) in routes.iter().enumerate() {
        let host = if host.is_empty() { String::new() } else { format!("host = '{host}'\n") };
        text +=
            &format!("[[route]]\nname = \"r{i}\"\n{host}path = '{path}'\nupstreams = [\"127.0.0.1:1\"]\n");
    }
    let conf = parse_server(Path::new("server.toml"), &text).unwrap();
    RouteTable::new(&conf.routes).unwrap()
}

#[test]
fn locations_by_nginx_precedence() {
    // The example of Nginx's `location` documentation, configurations A to E.
    let t = table(&[
        ("", "= /"),
        ("", "/"),
        ("", "/documents/"),
        ("", "^~ /images/"),
        ("", "~* \\.(gif|jpg|jpeg)$"),
    ]);
    let at = |p| t.find(Some("shop"), p);
    assert_eq!(at("/"), Some(0), "A: exact");
    assert_eq!(at("/index.html"), Some(1), "B: the longest prefix, no regex matches");
    assert_eq!(at("/documents/document.html"), Some(2), "C");
    assert_eq!(at("/images/1.gif"), Some(3), "D: ^~ stops the regex search");
    assert_eq!(at("/documents/1.JPG"), Some(4), "E: a regex beats the longest prefix; ~* any case");
}

#[test]
fn regexes_in_file_order_and_case() {
    let t = table(&[("", "/"), ("", "~ ^/a/(\\d+)$"), ("", "~ ^/a/"), ("", "~ \\.PHP$"), ("", "= /a/1")]);
    let at = |p| t.find(None, p);
    assert_eq!(at("/a/7"), Some(1), "the first regex in file order, not the longest");
    assert_eq!(at("/a/x"), Some(2));
    assert_eq!(at("/a/1"), Some(4), "= before any regex");
    assert_eq!(at("/x.php"), Some(0), "~ is case-sensitive: the prefix");
    assert_eq!(at("/x.PHP"), Some(3));
    let only_api = table(&[("", "/api/")]);
    assert_eq!(only_api.find(None, "/other"), None);
    assert_eq!(only_api.find(None, "/api"), None, "a prefix is a prefix of the path as sent");
}

#[test]
fn hosts_by_nginx_precedence() {
    // server_name's order: exact, longest *.name, longest name.*, first regex in file order.
    let t = table(&[
        ("", "/"),
        ("www.example.com", "/"),
        ("*.example.com", "/"),
        ("*.www.example.com", "/"),
        ("www.example.*", "/"),
        ("www.example.co.*", "/"),
        ("~^(www|shop)\\.example\\.net$", "/"),
        ("~^shop\\.", "/"),
        (".example.org", "/"),
    ]);
    let at = |h| t.find(Some(h), "/");
    assert_eq!(at("WWW.Example.com:8080"), Some(1), "exact, any case, without port");
    assert_eq!(at("www.example.com."), Some(1), "a trailing dot is the same name");
    assert_eq!(at("a.www.example.com"), Some(3), "the longest leading wildcard");
    assert_eq!(at("a.example.com"), Some(2));
    assert_eq!(at("example.com"), Some(0), "*.example.com is not example.com: the default");
    assert_eq!(at("www.example.co.uk"), Some(5), "the longest trailing wildcard");
    assert_eq!(at("www.example.net"), Some(4), "a trailing wildcard before any regex");
    assert_eq!(at("shop.example.net"), Some(6), "the first regex in file order");
    assert_eq!(at("shop.example.io"), Some(7));
    assert_eq!(at("example.org"), Some(8), ".name is the name itself");
    assert_eq!(at("a.b.example.org"), Some(8), "and every name under it");
    assert_eq!(at("other"), Some(0), "no name matches: the routes without host");
    assert_eq!(t.find(None, "/"), Some(0), "no Host at all: the same");
    assert_eq!(at("[::1]:8080"), Some(0));
}

#[test]
fn a_host_keeps_its_own_paths_and_the_default_server() {
    let t = table(&[("", "/"), ("", "/api/"), ("admin.shop", "/admin/")]);
    assert_eq!(t.find(Some("www.shop"), "/api/cart"), Some(1));
    assert_eq!(t.find(Some("admin.shop"), "/admin/x"), Some(2));
    assert_eq!(t.find(Some("admin.shop"), "/api/cart"), None, "as Nginx: the host's server only");
    // Without host-less routes, a host named by no route goes to the default_server's routes,
    // and without one it has no route.
    let mut text = String::from("[server]\nlisten = \"127.0.0.1:8080\"\n");
    for (host, default) in [("a.shop", false), ("b.shop", true)] {
        text += &format!(
            "[[route]]\nname = \"{host}\"\nhost = \"{host}\"\ndefault_server = {default}\npath = \"/\"\n\
             upstreams = [\"127.0.0.1:1\"]\n"
        );
    }
    let conf = parse_server(Path::new("server.toml"), &text).unwrap();
    let t = RouteTable::new(&conf.routes).unwrap();
    assert_eq!(t.find(Some("a.shop"), "/"), Some(0));
    assert_eq!(t.find(Some("c.shop"), "/"), Some(1));
    assert_eq!(t.find(None, "/"), Some(1));
    assert_eq!(table(&[("a.shop", "/")]).find(Some("c.shop"), "/"), None, "no default: none");
}

#[test]
fn a_route_with_several_hosts_is_in_each() {
    let text = "[server]\nlisten = \"127.0.0.1:8080\"\n\
        [[route]]\nname = \"r0\"\nhosts = [\"shop.example\", \"www.shop.example\"]\npath = \"/\"\n\
        upstreams = [\"127.0.0.1:1\"]\n\
        [[route]]\nname = \"r1\"\nhosts = [\"shop.example\", \"www.shop.example\"]\npath = \"/api/\"\n\
        default_server = true\nupstreams = [\"127.0.0.1:1\"]\n\
        [[route]]\nname = \"r2\"\nhost = \"www.shop.example\"\npath = \"= /only-www\"\n\
        upstreams = [\"127.0.0.1:1\"]\n";
    let conf = parse_server(Path::new("server.toml"), text).unwrap();
    let t = RouteTable::new(&conf.routes).unwrap();
    assert_eq!(t.find(Some("shop.example"), "/a"), Some(0));
    assert_eq!(t.find(Some("www.shop.example"), "/api/x"), Some(1));
    assert_eq!(t.find(Some("www.shop.example"), "/only-www"), Some(2));
    assert_eq!(t.find(Some("shop.example"), "/only-www"), Some(0));
    assert_eq!(t.find(Some("elsewhere"), "/api/x"), Some(1), "the default server: the first host's");
}

#[test]
fn two_hundred_regex_locations_are_one_pass() {
    // Not a timing assertion: the table of 200 regexes answers, the last one included, and a
    // few thousand lookups run (a gross slowdown would show in the test's time).
    let paths: Vec<String> = (0..200).map(|i| format!("~ ^/r{i}/[a-z]+/\\d+$")).collect();
    let routes: Vec<(&str, &str)> = paths.iter().map(|p| ("", p.as_str())).collect();
    let t = table(&routes);
    for n in 0..5_000 {
        assert_eq!(t.find(Some("shop"), &format!("/r{}/item/{n}", n % 200)), Some(n % 200));
    }
    assert_eq!(t.find(Some("shop"), "/r1/item/x"), None);
}
