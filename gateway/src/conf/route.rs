//! The `[[route]]`s: each one's host and path (`matching`), pool, body limit and response
//! compression; and the checks across routes (one place per host and path, one default server).

use std::collections::HashMap;

use protocol::conf::ConfError;

use super::limits::MAX_BODY_CAP;
use super::{action, compression, files, headers, matching};
use super::{pool, Checker, RawPoolFields, RawRoute, RouteConf};

/// Checks every route, then that no two routes of one host have the same path and that one
/// host at most is the default server.
pub(super) fn routes(c: &Checker<'_>, raw: &[RawRoute]) -> Result<Vec<RouteConf>, ConfError> {
    let mut routes = Vec::with_capacity(raw.len());
    let mut seen = HashMap::new();
    for (i, r) in raw.iter().enumerate() {
        let route = one(c, &format!("route[{i}]"), r)?;
        let hosts: Vec<Option<String>> = match route.hosts.is_empty() {
            true => vec![None],
            false => route.hosts.iter().map(|h| Some(h.key())).collect(),
        };
        for host in hosts {
            if let Some(first) = seen.insert((host.clone(), route.location.key()), i) {
                let (field, span) = path_field(r);
                return Err(c.err(
                    span,
                    &format!("route[{i}].{field}"),
                    format!(
                        "route[{first}] has the same host ({}) and path: one of them would never be used",
                        host.as_deref().unwrap_or("any")
                    ),
                ));
            }
        }
        routes.push(route);
    }
    default_server(c, raw, &routes)?;
    Ok(routes)
}

/// The field that holds a route's path, and its place.
fn path_field(r: &RawRoute) -> (&'static str, std::ops::Range<usize>) {
    match (&r.path, &r.path_prefix) {
        (Some(p), _) => ("path", p.span()),
        (None, Some(p)) => ("path_prefix", p.span()),
        (None, None) => ("name", r.name.span()),
    }
}

/// A request whose host no route names goes to the routes without `host`, or to the routes of
/// the one host marked `default_server = true`: not both, and not two hosts.
fn default_server(c: &Checker<'_>, raw: &[RawRoute], routes: &[RouteConf]) -> Result<(), ConfError> {
    let mut default: Option<(String, usize)> = None;
    let any_host = routes.iter().position(|r| r.hosts.is_empty());
    for (i, (r, route)) in raw.iter().zip(routes).enumerate() {
        let Some(flag) = r.default_server.as_ref().filter(|f| *f.get_ref()) else { continue };
        let field = format!("route[{i}].default_server");
        let Some(host) = route.hosts.first().map(|h| h.key()) else {
            return Err(c.err(
                flag.span(),
                &field,
                "needs a host: routes without host are the default already",
            ));
        };
        if let Some(j) = any_host {
            return Err(c.err(
                flag.span(),
                &field,
                format!("route[{j}] has no host and is the default already: give it a host, or drop this"),
            ));
        }
        match &default {
            Some((other, j)) if *other != host => {
                return Err(c.err(
                    flag.span(),
                    &field,
                    format!("route[{j}]'s host {other} is the default already"),
                ))
            }
            _ => default = Some((host, i)),
        }
    }
    Ok(())
}

/// The pool of a route that proxies.
fn route_pool(
    c: &Checker<'_>,
    prefix: &str,
    r: &RawRoute,
    upstreams: &super::S<Vec<super::S<String>>>,
) -> Result<super::PoolConf, ConfError> {
    pool(
        c,
        prefix,
        RawPoolFields {
            upstreams,
            connect: &r.connect_timeout_ms,
            read: &r.read_timeout_ms,
            send: Some(&r.send_timeout_ms),
            max_io_ms: 3_600_000,
            interval: &r.health_check_interval_ms,
            path: &r.health_check_path,
            route: Some((&r.balance, &r.health_check_host, &r.resolve_interval_ms)),
        },
    )
}

/// A route's `host`, or its `hosts` (not both; not an empty list).
fn hosts(c: &Checker<'_>, prefix: &str, r: &RawRoute) -> Result<Vec<matching::HostName>, ConfError> {
    match (&r.host, &r.hosts) {
        (Some(_), Some(list)) => {
            Err(c.err(list.span(), &format!("{prefix}.hosts"), "give `host` or `hosts`, not both"))
        }
        (Some(h), None) => Ok(vec![matching::host(c, h, &format!("{prefix}.host"))?]),
        (None, Some(list)) if list.get_ref().is_empty() => Err(c.err(
            list.span(),
            &format!("{prefix}.hosts"),
            "must list at least one host (or leave it out: any host)",
        )),
        (None, Some(list)) => {
            list.get_ref().iter().map(|h| matching::host(c, h, &format!("{prefix}.hosts"))).collect()
        }
        (None, None) => Ok(Vec::new()),
    }
}

/// One route (`prefix`: `route[i]`).
fn one(c: &Checker<'_>, prefix: &str, r: &RawRoute) -> Result<RouteConf, ConfError> {
    let f = |name: &str| format!("{prefix}.{name}");
    if r.name.get_ref().trim().is_empty() {
        return Err(c.err(r.name.span(), &f("name"), "must not be empty"));
    }
    let location = match (&r.path, &r.path_prefix) {
        (Some(_), Some(old)) => {
            return Err(c.err(old.span(), &f("path_prefix"), "give `path` or `path_prefix`, not both"))
        }
        (Some(p), None) => matching::location(c, p, &f("path"), true)?,
        (None, Some(p)) => matching::location(c, p, &f("path_prefix"), false)?,
        (None, None) => {
            return Err(c.err(
                r.name.span(),
                &f("path"),
                "missing: `path = \"/\"` (or `= /exact`, `~ regex`)",
            ))
        }
    };
    let hosts = hosts(c, prefix, r)?;
    let answer = r.answer.as_ref().map(|a| action::answer(c, a, &f("return"))).transpose()?;
    let (rewrites, replace_prefix) = action::rewrites(c, prefix, (&r.rewrite, &r.replace_prefix), &location)?;
    let files = files::check(c, prefix, r, &location)?;
    let pool = route_action(c, prefix, r, answer.is_some(), files.is_some())?;
    let client_max_body_size = match &r.client_max_body_size {
        Some(v) => Some(c.int(v, &f("client_max_body_size"), 0, MAX_BODY_CAP)? as u64),
        None => None,
    };
    Ok(RouteConf {
        name: r.name.get_ref().clone(),
        hosts,
        default_server: r.default_server.as_ref().is_some_and(|d| *d.get_ref()),
        location,
        answer,
        rewrites,
        replace_prefix,
        headers: headers::check(c, prefix, r)?,
        error_pages: action::error_pages(c, prefix, &r.error_page)?,
        files,
        pool,
        client_max_body_size,
        compression: compression::check(c, prefix, r)?,
        limit_req: None,
        limit_conn: None,
    })
}

/// What a route does: proxy (`upstreams`: its pool), answer (`return`) or serve files
/// (`root`/`alias`): one of them.
fn route_action(
    c: &Checker<'_>,
    prefix: &str,
    r: &RawRoute,
    answers: bool,
    files: bool,
) -> Result<Option<super::PoolConf>, ConfError> {
    let f = |name: &str| format!("{prefix}.{name}");
    let (root_field, root_span) = match (&r.root, &r.alias) {
        (Some(v), _) => ("root", v.span()),
        (None, Some(v)) => ("alias", v.span()),
        (None, None) => ("root", 0..0),
    };
    match (&r.upstreams, answers, files) {
        (Some(upstreams), false, false) => {
            let mut pool = route_pool(c, prefix, r, upstreams)?;
            pool.tls = super::upstream::tls(c, prefix, r, &pool.upstreams)?;
            Ok(Some(pool))
        }
        (Some(u), true, _) => {
            Err(c.err(u.span(), &f("upstreams"), "a route with `return` answers itself: drop `upstreams`"))
        }
        (Some(u), false, true) => Err(c.err(
            u.span(),
            &f("upstreams"),
            format!("a route with `{root_field}` serves files: drop `upstreams`"),
        )),
        (None, true, true) => {
            Err(c.err(root_span, &f(root_field), "a route with `return` answers itself: drop it"))
        }
        (None, true, false) | (None, false, true) => Ok(None),
        // Rewrites only: a request none of them takes away is answered 404.
        (None, false, false) if r.rewrite.is_some() => Ok(None),
        (None, false, false) => Err(c.err(
            r.name.span(),
            &f("upstreams"),
            "missing: give `upstreams`, `return` or `root` (files)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, parse, GOOD};

    #[test]
    fn route_body_limit() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.routes[0].client_max_body_size, None, "[limits]' by default");
        let with =
            |extra: &str| GOOD.replace("path_prefix = \"/\"", &format!("path_prefix = \"/\"\n{extra}"));
        assert_eq!(
            parse(&with("client_max_body_size = 10")).unwrap().routes[0].client_max_body_size,
            Some(10)
        );
        expect_err(&with("client_max_body_size = -5"), 17, "route[0].client_max_body_size", "between 0");
    }

    /// `[server]` and `routes` (TOML of `[[route]]`s, each line as written).
    fn file(routes: &str) -> String {
        format!("[server]\nlisten = \"127.0.0.1:8080\"\n{routes}")
    }

    fn route(extra: &str) -> String {
        format!("[[route]]\nname = \"r\"\nupstreams = [\"127.0.0.1:1\"]\n{extra}\n")
    }

    fn refused(routes: &str, line: usize, field: &str, words: &str) {
        let got = super::super::parse_server(std::path::Path::new("conf/server.toml"), &file(routes));
        protocol::conf::assert_refused(got, "conf/server.toml", line, field, words);
    }

    #[test]
    fn bad_hosts_and_paths_are_refused_at_their_place() {
        // Lines: 1 [server], 2 listen, 3 [[route]], 4 name, 5 upstreams, 6 the extra line.
        refused(&route("path = \"~ ^/(a\""), 6, "route[0].path", "not a valid regex");
        refused(&route("path = \"~* [z-a]\""), 6, "route[0].path", "not a valid regex");
        refused(&route("path = \"~~ /a\""), 6, "route[0].path", "unknown match kind \"~~\"");
        refused(&route("path = \"@named\""), 6, "route[0].path", "unknown match kind");
        refused(&route("path = \"=\""), 6, "route[0].path", "followed by a space");
        refused(&route("path = \"= nope\""), 6, "route[0].path", "must start with /");
        refused(&route("path_prefix = \"~ x\""), 6, "route[0].path_prefix", "must start with /");
        refused(&route("path = \"/\"\npath_prefix = \"/\""), 7, "route[0].path_prefix", "not both");
        refused(&route(""), 4, "route[0].path", "missing");
        refused(&route("path = \"/\"\nhost = \"~(\""), 7, "route[0].host", "not a valid regex");
        for bad in ["a.*.com", "*", "shop:80", "*.", "a b", "x.*.*"] {
            refused(
                &route(&format!("path = \"/\"\nhost = \"{bad}\"")),
                7,
                "route[0].host",
                "not a host name",
            );
        }
    }

    #[test]
    fn one_route_per_host_and_path_and_one_default() {
        let two = |a: &str, b: &str| format!("{}{}", route(a), route(b));
        // The second route's path line: 3 + 4 lines of the first route + its own 4th line.
        refused(&two("path = \"/a\"", "path = \"/a\""), 10, "route[1].path", "route[0] has the same host");
        refused(&two("path_prefix = \"/a\"", "path = \"^~ /a\""), 10, "route[1].path", "same host (any)");
        let hosted = two("host = \"A.shop\"\npath = \"~ x\"", "host = \"a.shop\"\npath = \"~ x\"");
        refused(&hosted, 12, "route[1].path", "same host (a.shop)");
        let ok = two("host = \"a.shop\"\npath = \"/a\"", "host = \"b.shop\"\npath = \"/a\"");
        assert!(super::super::parse_server(std::path::Path::new("s.toml"), &file(&ok)).is_ok());
        let exact_and_prefix = two("path = \"= /a\"", "path = \"/a\"");
        assert!(super::super::parse_server(std::path::Path::new("s.toml"), &file(&exact_and_prefix)).is_ok());
        // default_server: on a host, with no host-less route, one host only.
        refused(&route("path = \"/\"\ndefault_server = true"), 7, "route[0].default_server", "needs a host");
        let with_any = two("path = \"/\"", "host = \"a\"\npath = \"/\"\ndefault_server = true");
        refused(&with_any, 12, "route[1].default_server", "route[0] has no host");
        let two_defaults = two(
            "host = \"a\"\npath = \"/\"\ndefault_server = true",
            "host = \"b\"\npath = \"/\"\ndefault_server = true",
        );
        refused(&two_defaults, 14, "route[1].default_server", "host a is the default already");
        // Several hosts: each one's place is checked.
        let listed = two("hosts = [\"a\", \"B\"]\npath = \"/\"", "host = \"b\"\npath = \"/\"");
        refused(&listed, 12, "route[1].path", "same host (b)");
        refused(&route("path = \"/\"\nhosts = []"), 7, "route[0].hosts", "at least one");
        refused(&route("path = \"/\"\nhosts = [\"a\", \"b:80\"]"), 7, "route[0].hosts", "not a host name");
        refused(&route("path = \"/\"\nhost = \"a\"\nhosts = [\"b\"]"), 8, "route[0].hosts", "not both");
    }

    #[test]
    fn returns_and_rewrites_are_checked_at_their_place() {
        // A route with return has no upstreams: lines 3 [[route]], 4 name, 5 path, 6 return.
        let ret = |r: &str| format!("[[route]]\nname = \"r\"\npath = \"/\"\nreturn = \"{r}\"\n");
        let ok = super::super::parse_server(
            std::path::Path::new("s.toml"),
            &file(&ret("301 https://$host$request_uri")),
        );
        let answer = ok.unwrap().routes[0].answer.clone().unwrap();
        assert_eq!((answer.status, answer.location.is_some()), (301, true));
        for (bad, words) in [
            ("99 x", "\"99\" is not a status"),
            ("600", "\"600\" is not a status"),
            ("444", "444 is not mapped"),
            ("abc", "\"abc\" is not a status"),
            ("301", "needs the URL"),
            ("302 https://$hots/", "unknown variable $hots"),
        ] {
            refused(&ret(bad), 6, "route[0].return", words);
        }
        refused(
            &format!("{}upstreams = [\"127.0.0.1:1\"]\n", ret("204")),
            7,
            "route[0].upstreams",
            "drop `upstreams`",
        );
        refused("[[route]]\nname = \"r\"\npath = \"/\"\n", 4, "route[0].upstreams", "missing");
        let rw = |r: &str| route(&format!("path = \"/\"\n{r}"));
        refused(
            &rw("rewrite = { regex = \"(\", replacement = \"/\" }"),
            7,
            "route[0].rewrite.regex",
            "not a valid regex",
        );
        refused(
            &rw("rewrite = { regex = \"x\", replacement = \"x\" }"),
            7,
            "route[0].rewrite.replacement",
            "starting with /",
        );
        refused(
            &rw("rewrite = { regex = \"x\", replacement = \"/$9$x\" }"),
            7,
            "route[0].rewrite.replacement",
            "unknown variable $x",
        );
        refused(
            &rw("rewrite = { regex = \"x\", replacment = \"/\" }"),
            7,
            "rewrite",
            "unknown field `replacment`",
        );
        refused(
            &rw("rewrite = [{ regex = \"x\", replacement = \"/\" }, { regex = \"y\", replacement = \"/\", flag = \"lats\" }]"),
            7,
            "route[0].rewrite[1].flag",
            "must be last, break, redirect, permanent or none",
        );
        refused(
            &rw("rewrite = [{ regex = \"x\", replacment = \"/\" }]"),
            7,
            "rewrite",
            "unknown field `replacment`",
        );
        refused(&rw("rewrite = 3"), 7, "rewrite", "a table { regex, replacement, flag } or a list");
        let two = super::super::parse_server(
            std::path::Path::new("s.toml"),
            &file(&rw("rewrite = [{ regex = 'a', replacement = 'https://x/', flag = \"last\" }, \
                       { regex = 'b', replacement = '/c', flag = \"permanent\" }]")),
        );
        let flags: Vec<_> = two.unwrap().routes[0].rewrites.iter().map(|r| (r.flag, r.redirect)).collect();
        use super::super::RewriteFlag::{Last, Permanent};
        assert_eq!(flags, [(Last, Some(302)), (Permanent, Some(301))], "a URL redirects whatever the flag");
        refused(&rw("replace_prefix = \"new/\""), 7, "route[0].replace_prefix", "start with /");
        refused(
            &route("path = \"~ x\"\nreplace_prefix = \"/\""),
            7,
            "route[0].replace_prefix",
            "use `rewrite`",
        );
    }

    #[test]
    fn headers_are_checked_at_their_place() {
        let h = |extra: &str| route(&format!("path = \"/\"\n{extra}"));
        let text = file(&h("proxy_set_header = { Host = \"$host\", \"Accept-Encoding\" = \"\" }\n\
             add_header = { \"X-A\" = \"a\" }\nadd_header_always = { \"X-B\" = \"$request_id\" }\n\
             proxy_hide_header = [\"Server\"]"));
        let c = super::super::parse_server(std::path::Path::new("s.toml"), &text).unwrap();
        let headers = &c.routes[0].headers;
        assert_eq!(headers.set.len(), 2);
        assert!(headers.set.iter().any(|(n, v)| n == "accept-encoding" && v.is_none()), "empty: removed");
        assert_eq!(
            headers.add.iter().map(|(n, _, a)| (n.as_str(), *a)).collect::<Vec<_>>(),
            [("x-a", false), ("x-b", true)]
        );
        assert_eq!(headers.hide, [http::header::SERVER]);
        refused(
            &h("proxy_set_header = { \"Bad Name\" = \"x\" }"),
            7,
            "route[0].proxy_set_header.Bad Name",
            "not a header name",
        );
        refused(
            &h("add_header = { \"X-A\" = \"a\\u0001\" }"),
            7,
            "route[0].add_header.X-A",
            "not a header value",
        );
        refused(
            &h("add_header_always = { \"X-A\" = \"$nope\" }"),
            7,
            "route[0].add_header_always.X-A",
            "unknown variable",
        );
        refused(
            &h("proxy_hide_header = [\"ok\", \"(bad)\"]"),
            7,
            "route[0].proxy_hide_header",
            "not a header name",
        );
    }

    #[test]
    fn timeouts_are_nginx_defaults_and_bounded() {
        let c = super::super::parse_server(std::path::Path::new("s.toml"), &file(&route("path = \"/\"")))
            .unwrap();
        let pool = c.routes[0].pool.clone().unwrap();
        let minute = std::time::Duration::from_secs(60);
        assert_eq!((pool.connect_timeout, pool.read_timeout, pool.send_timeout), (minute, minute, minute));
        let set = |t: &str| route(&format!("path = \"/\"\n{t}"));
        refused(&set("send_timeout_ms = 5"), 7, "route[0].send_timeout_ms", "between 10 and 3600000");
        refused(&set("read_timeout_ms = 3600001"), 7, "route[0].read_timeout_ms", "between 10 and 3600000");
        refused(&set("connect_timeout_ms = 75001"), 7, "route[0].connect_timeout_ms", "between 10 and 75000");
    }
}
