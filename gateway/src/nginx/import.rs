//! nginx.conf's `http` → the gateway's `[server]` and `[[route]]`s (the proxy on its own), and a
//! note for every directive not mapped, or mapped with a different meaning, at its place. A
//! `location` becomes a route of its `server`'s names; what a `server` sets for its locations
//! is inherited as Nginx inherits it (an array directive, `proxy_set_header`, `add_header`,
//! `proxy_hide_header`, only when the location sets none of its own). Nothing is mapped into a
//! different behaviour without a note saying so.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::limits::{self, Zone};
use super::logs;
use super::note::{bytes, note, q, Note};
use super::parse::Directive;
use crate::conf::upstream::nginx_ms as millis;

/// The gateway's conf for what maps, and the notes.
#[derive(Debug, Default)]
pub struct Import {
    /// The conf (TOML).
    pub toml: String,
    /// Every directive not mapped or mapped differently.
    pub notes: Vec<Note>,
}

/// What a level (`server`, `location`) sets that its locations inherit.
#[derive(Debug, Clone, Default)]
struct Inherited {
    set_header: Option<Vec<(String, String)>>,
    add_header: Option<Vec<(String, String, bool)>>,
    hide_header: Option<Vec<String>>,
    timeouts: BTreeMap<&'static str, i64>,
    max_body: Option<i64>,
    gzip: Gzip,
    ssl: ProxySsl,
    /// The zones of `http` that map (`limit_req_zone`, `limit_conn_zone`).
    zones: Vec<Zone>,
    /// `limit_req` and `limit_conn` (inline tables), as Nginx's arrays: a level with its own
    /// replaces the outer's (`Some(None)`: its own did not map).
    limit_req: Option<Option<String>>,
    limit_conn: Option<Option<String>>,
    limit_req_status: Option<u16>,
    limit_conn_status: Option<u16>,
    /// `root`, `index`, `default_type`: inherited from `http` and `server` as Nginx's.
    root: Option<String>,
    index: Option<Vec<String>>,
    default_type: Option<String>,
}

/// What a level sets of `proxy_ssl_*` (HTTPS to upstreams).
#[derive(Debug, Clone, Default)]
struct ProxySsl {
    name: Option<String>,
    trusted: Option<String>,
    verify: Option<bool>,
}

/// What a level sets of the `gzip` module.
#[derive(Debug, Clone, Default)]
struct Gzip {
    on: Option<bool>,
    level: Option<i64>,
    types: Option<Vec<String>>,
    min_length: Option<i64>,
}

/// One route being built.
#[derive(Debug, Default)]
struct Route {
    name: String,
    hosts: Vec<String>,
    default_server: bool,
    path: String,
    upstreams: Vec<String>,
    balance: Option<String>,
    tls: bool,
    replace_prefix: Option<String>,
    answer: Option<String>,
    /// `rewrite`s: regex, replacement, flag (`none` for Nginx's none).
    rewrites: Vec<(String, String, &'static str)>,
    /// The location's `alias`, or its inherited `root`, when it serves files.
    files: Option<FilesFrom>,
    try_files: Option<Vec<String>>,
    inherited: Inherited,
}

/// Where a files route's folder comes from.
#[derive(Debug, Clone)]
enum FilesFrom {
    Root(String),
    Alias(String),
}

/// Imports the directives of a whole file (its `http` block).
pub fn import(top: &[Directive]) -> Import {
    let mut out = Import::default();
    let mut upstreams: BTreeMap<String, Upstream> = BTreeMap::new();
    let mut routes = Vec::new();
    let mut listen: Option<String> = None;
    let mut http_zones = Vec::new();
    let mut access_log = None;
    for d in top {
        match (d.name.as_str(), &d.block) {
            ("http", Some(http)) => {
                for d in http.iter().filter(|d| d.name == "upstream") {
                    upstream(d, &mut upstreams, &mut out.notes);
                }
                let zoned =
                    http.iter().filter(|d| matches!(d.name.as_str(), "limit_req_zone" | "limit_conn_zone"));
                let zones = zoned.filter_map(|d| limits::zone(d, &mut out.notes)).collect();
                let outer = Inherited { zones, ..Inherited::default() };
                let skip = ["server", "upstream", "log_format", "access_log"];
                let http_level = level(http, outer, &skip, &mut out.notes);
                access_log = logs::access_log(http, &mut out.notes);
                http_zones.clone_from(&http_level.zones);
                for d in http.iter().filter(|d| d.name == "server") {
                    server(d, &http_level, &upstreams, &mut routes, &mut listen, &mut out.notes);
                }
                implicit_default(&mut routes);
            }
            ("events" | "worker_processes" | "worker_connections" | "pid" | "user" | "error_log", _) => note(
                &mut out.notes,
                d,
                false,
                "process settings: the gateway's own are [server] workers/threads and its log",
            ),
            _ => note(&mut out.notes, d, false, "outside `http`: only http's servers are imported"),
        }
    }
    out.toml = render(listen.as_deref(), &http_zones, &routes);
    out.toml.push_str(access_log.as_deref().unwrap_or(""));
    out
}

/// Nginx's default server, when no `listen` names one, is the first server: its routes (the
/// first route's hosts) answer requests for other hosts and without one.
fn implicit_default(routes: &mut [Route]) {
    if routes.iter().any(|r| r.default_server) {
        return;
    }
    let Some(first) = routes.iter().find(|r| !r.hosts.is_empty()).map(|r| r.hosts.clone()) else { return };
    for r in routes.iter_mut().filter(|r| r.hosts == first) {
        r.default_server = true;
    }
}

/// An `upstream` block as the gateway writes it: its servers (`ADDR[:PORT] [weight=N]
/// [max_fails=N] [fail_timeout=T]`) and its balancing (`least_conn`, `ip_hash`, `hash KEY`).
#[derive(Debug, Clone, Default)]
struct Upstream {
    servers: Vec<String>,
    balance: Option<String>,
}

/// `upstream NAME { server ADDR [params]; least_conn; ... }`: its servers and balancing by name.
fn upstream(d: &Directive, all: &mut BTreeMap<String, Upstream>, notes: &mut Vec<Note>) {
    let Some(name) = d.args.first() else { return note(notes, d, false, "an upstream without a name") };
    let mut up = Upstream::default();
    for s in d.block.iter().flatten() {
        match (s.name.as_str(), s.args.as_slice()) {
            ("server", [addr, params @ ..]) => {
                if let Some(line) = server_line(s, addr, params, notes) {
                    up.servers.push(line);
                }
            }
            ("least_conn" | "ip_hash", []) => up.balance = Some(s.name.clone()),
            ("hash", [key] | [key, _])
                if key.starts_with("$remote_addr")
                    || key.starts_with("$binary_remote_addr")
                    || key.starts_with("$http_")
                    || key.starts_with("$cookie_") =>
            {
                up.balance = Some(format!("hash {key}"));
                if s.args.get(1).is_none_or(|c| c != "consistent") {
                    note(notes, s, true, "hashed consistently (ketama), as `hash ... consistent`");
                }
            }
            ("keepalive" | "keepalive_timeout" | "keepalive_requests", _) => note(
                notes,
                s,
                true,
                "the gateway keeps upstream connections alive on its own (Pingora's pool)",
            ),
            _ => note(
                notes,
                s,
                false,
                "not built: servers, least_conn, ip_hash and hash of $remote_addr, $http_*, $cookie_* are",
            ),
        }
    }
    all.insert(name.clone(), up);
}

/// One `server` line as a gateway `upstreams` entry (Nginx's port 80 written out); `None`
/// (noted) when it cannot map.
fn server_line(s: &Directive, addr: &str, params: &[String], notes: &mut Vec<Note>) -> Option<String> {
    if addr.starts_with("unix:") {
        note(notes, s, false, "a unix socket upstream is not built");
        return None;
    }
    let with_port = match addr.parse::<std::net::SocketAddr>() {
        Ok(_) => addr.to_string(),
        Err(_) if addr.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) => addr.to_string(),
        Err(_) => format!("{addr}:80"),
    };
    if let Some(p) = params.iter().find(|p| *p == "backup" || *p == "down") {
        note(notes, s, false, &format!("a `{p}` server is left out of the pool (not built)"));
        return None;
    }
    let mut line = with_port;
    for p in params {
        match p.split_once('=').map(|(k, _)| k) {
            Some("weight" | "max_fails" | "fail_timeout") => line = format!("{line} {p}"),
            _ => note(
                notes,
                s,
                false,
                &format!("`{p}` left out: weight, max_fails and fail_timeout are built"),
            ),
        }
    }
    Some(line)
}

/// The settings of a level's directives on top of `outer`'s; the others noted unless `skip`.
fn level(list: &[Directive], outer: Inherited, skip: &[&str], notes: &mut Vec<Note>) -> Inherited {
    let mut l = outer;
    let (mut set, mut add, mut hide) = (None::<Vec<_>>, None::<Vec<_>>, None::<Vec<_>>);
    let mut own = (None, None);
    for d in list {
        match d.name.as_str() {
            n if skip.contains(&n) => {}
            "proxy_set_header" if d.args.len() == 2 => {
                let list = set.get_or_insert_with(Vec::new);
                if header_value(d, notes) {
                    list.push((d.args[0].clone(), d.args[1].clone()));
                }
            }
            "add_header" if (2..=3).contains(&d.args.len()) => {
                let always = d.args.get(2).is_some_and(|a| a == "always");
                let list = add.get_or_insert_with(Vec::new);
                if header_value(d, notes) {
                    list.push((d.args[0].clone(), d.args[1].clone(), always));
                }
            }
            "proxy_hide_header" if d.args.len() == 1 => {
                hide.get_or_insert_with(Vec::new).push(d.args[0].clone())
            }
            "proxy_connect_timeout" | "proxy_read_timeout" | "proxy_send_timeout" => {
                match d.args.first().and_then(|a| millis(a)) {
                    Some(ms) => {
                        l.timeouts.insert(timeout_field(&d.name), ms);
                    }
                    None => note(notes, d, false, "a time as Nginx writes it (60s, 1m, 500ms) was expected"),
                }
            }
            "client_max_body_size" => match d.args.first().and_then(|a| bytes(a)) {
                Some(b) => l.max_body = Some(b),
                None => note(notes, d, false, "a size as Nginx writes it (1m, 512k) was expected"),
            },
            n if n.starts_with("gzip") => gzip(d, &mut l.gzip, notes),
            n if n.starts_with("proxy_ssl") => proxy_ssl(d, &mut l.ssl, notes),
            "limit_req_zone" | "limit_conn_zone" | "limit_req" | "limit_conn" | "limit_req_status"
            | "limit_conn_status" => limit(d, &mut l, &mut own, notes),
            "root" | "index" | "default_type" => files_setting(d, &mut l, notes),
            "types" => note(
                notes,
                d,
                true,
                "a files route's Content-Type is the gateway's built-in table, Nginx's mime.types (types of your own are not mapped)",
            ),
            "error_page" => note(
                notes,
                d,
                false,
                "error_page names a URI, the gateway's route error_page a file: write it by hand",
            ),
            "location" | "proxy_pass" | "return" | "rewrite" | "server_name" | "listen" | "alias"
            | "try_files" => {}
            "real_ip_header" if d.args.first().is_some_and(|a| a == "proxy_protocol") => {
                note(notes, d, true, "with `listen ... proxy_protocol` ([server] proxy_protocol) the PROXY source is always the client's")
            }
            _ => note(notes, d, false, why_not(&d.name)),
        }
    }
    l.limit_req = own.0.or(l.limit_req);
    l.limit_conn = own.1.or(l.limit_conn);
    l.set_header = set.or(l.set_header);
    l.add_header = add.or(l.add_header);
    l.hide_header = hide.or(l.hide_header);
    l
}

/// A `proxy_ssl_*` directive into `ssl` (the route's `upstream_sni`, `upstream_ca_file`,
/// `upstream_verify`).
fn proxy_ssl(d: &Directive, ssl: &mut ProxySsl, notes: &mut Vec<Note>) {
    match (d.name.as_str(), d.args.first().map(String::as_str)) {
        ("proxy_ssl_name", Some(n)) if !n.contains('$') => ssl.name = Some(n.to_string()),
        ("proxy_ssl_trusted_certificate", Some(f)) => ssl.trusted = Some(f.to_string()),
        ("proxy_ssl_verify", Some(v)) => ssl.verify = Some(v == "on"),
        ("proxy_ssl_server_name", Some(_)) => {
            note(notes, d, true, "the gateway always sends SNI (the upstream's name, or upstream_sni)")
        }
        (
            "proxy_ssl_protocols"
            | "proxy_ssl_ciphers"
            | "proxy_ssl_session_reuse"
            | "proxy_ssl_verify_depth",
            _,
        ) => note(notes, d, true, "the gateway's TLS client settles TLS 1.2/1.3 with rustls' defaults"),
        _ => note(
            notes,
            d,
            false,
            "not built: proxy_ssl_name, proxy_ssl_trusted_certificate and proxy_ssl_verify are",
        ),
    }
}

/// A `gzip*` directive into `g` (the compression keys of [`crate::conf::compression`]).
fn gzip(d: &Directive, g: &mut Gzip, notes: &mut Vec<Note>) {
    let first = d.args.first().map(String::as_str);
    match (d.name.as_str(), first) {
        ("gzip", Some(on)) => {
            g.on = Some(on == "on");
            if on == "on" {
                note(notes, d, true, "the gateway also says `Vary: Accept-Encoding` (gzip_vary on) and compresses answers to proxied requests (gzip_proxied any)");
            }
        }
        ("gzip_comp_level", Some(n)) => match n.parse::<i64>() {
            Ok(n) if (1..=9).contains(&n) => g.level = Some(n),
            _ => note(notes, d, false, "a level from 1 to 9 was expected"),
        },
        ("gzip_types", Some(_)) => g.types = Some(d.args.iter().map(|t| t.to_ascii_lowercase()).collect()),
        ("gzip_min_length", Some(n)) => match bytes(n) {
            Some(b) => g.min_length = Some(b),
            None => note(notes, d, false, "a size as Nginx writes it (20, 1k) was expected"),
        },
        ("gzip_http_version", Some("1.1")) | ("gzip_vary", Some("on")) | ("gzip_proxied", Some("any")) => {}
        ("gzip_vary", _) => note(
            notes,
            d,
            true,
            "the gateway always says `Vary: Accept-Encoding` on what it may compress (safer for caches)",
        ),
        ("gzip_proxied", _) => note(
            notes,
            d,
            true,
            "the gateway compresses answers to proxied requests (with `Via`) too: gzip_proxied any",
        ),
        _ => note(notes, d, false, why_not(&d.name)),
    }
}

/// A limit directive of a level: a zone (read at `http` already), the level's own `limit_req`
/// and `limit_conn` (`own`: the first of each; one per route), a status.
fn limit(
    d: &Directive,
    l: &mut Inherited,
    own: &mut (Option<Option<String>>, Option<Option<String>>),
    notes: &mut Vec<Note>,
) {
    let (slot, kind) = match d.name.as_str() {
        "limit_req" => (&mut own.0, "limit_req"),
        "limit_conn" => (&mut own.1, "limit_conn"),
        "limit_req_status" => return l.limit_req_status = limits::status(d, notes).or(l.limit_req_status),
        "limit_conn_status" => return l.limit_conn_status = limits::status(d, notes).or(l.limit_conn_status),
        _ => return,
    };
    if slot.is_some() {
        return note(notes, d, false, &format!("one {kind} per route: the level's first is mapped"));
    }
    *slot = Some(match kind {
        "limit_req" => limits::limit_req(d, &l.zones, notes),
        _ => limits::limit_conn(d, &l.zones, notes),
    });
}

/// Whether a header directive's value maps (its variables are the gateway's); noted if not. The
/// directive still counts as setting its level's list (Nginx's inheritance).
fn header_value(d: &Directive, notes: &mut Vec<Note>) -> bool {
    if d.args[0].eq_ignore_ascii_case("x-forwarded-for") || d.args[0].eq_ignore_ascii_case("x-real-ip") {
        note(
            notes,
            d,
            true,
            "the gateway sets X-Forwarded-For and X-Real-IP itself ([server] trusted_proxies)",
        );
        return false;
    }
    match crate::template::Template::parse(&d.args[1]) {
        Ok(_) => true,
        Err(e) => {
            note(notes, d, false, &e);
            false
        }
    }
}

/// `root`, `index`, `default_type` at any level (a variable in them is not mapped).
fn files_setting(d: &Directive, l: &mut Inherited, notes: &mut Vec<Note>) {
    if d.args.is_empty() || d.args.iter().any(|a| a.contains('$')) {
        return note(notes, d, false, "a value with variables is not mapped");
    }
    match d.name.as_str() {
        "root" => {
            if !d.args[0].starts_with('/') {
                note(
                    notes,
                    d,
                    true,
                    "a relative root is from the gateway's server file's folder (Nginx's: its prefix)",
                );
            }
            l.root = Some(d.args[0].clone());
        }
        "index" => l.index = Some(d.args.clone()),
        _ => l.default_type = Some(d.args[0].clone()),
    }
}

/// Why a directive with no counterpart is not mapped.
fn why_not(name: &str) -> &'static str {
    match name {
        "autoindex" => "a folder's listing is not built (a folder without index answers 403)",
        "expires" => "a files route sends no Expires or Cache-Control of its own (add_header can)",
        "if_modified_since" | "etag" | "max_ranges" | "disable_symlinks" | "open_file_cache" => {
            "a files route answers as Nginx's defaults (exact If-Modified-Since, ETag on, one range; \
             symlinks out of its folder refused): see docs/nginx-migration.md"
        }
        "limit_req_log_level" | "limit_conn_log_level" => {
            "a limited request is counted in seckill_gateway_route_limited_total and its access line's code"
        }
        "limit_req_dry_run" | "limit_conn_dry_run" => "dry runs of the limits are not built",
        "ssl_certificate" | "ssl_certificate_key" | "ssl_protocols" | "ssl_ciphers" => {
            "TLS is the gateway's [tls] section: write it by hand"
        }
        "access_log" => "the gateway writes one access log, [access_log], from http's `access_log`: a server's or location's own is not mapped",
        "log_format" => "log_format is read in http only (as Nginx)",
        "if" | "set" | "map" => "conditions and variables are not built",
        "proxy_buffering" | "proxy_buffer_size" | "proxy_buffers" | "proxy_request_buffering" => {
            "the gateway streams bodies without buffering them"
        }
        "proxy_http_version" => "the gateway speaks HTTP/1.1 to upstreams",
        "real_ip_header" | "set_real_ip_from" | "real_ip_recursive" => {
            "trusted proxies are [server] trusted_proxies (X-Forwarded-For)"
        }
        _ => "no counterpart in the gateway",
    }
}

fn timeout_field(name: &str) -> &'static str {
    match name {
        "proxy_connect_timeout" => "connect_timeout_ms",
        "proxy_read_timeout" => "read_timeout_ms",
        _ => "send_timeout_ms",
    }
}

/// A `server`: its names and listen, its level's settings, and a route per location.
fn server(
    d: &Directive,
    http: &Inherited,
    upstreams: &BTreeMap<String, Upstream>,
    routes: &mut Vec<Route>,
    listen: &mut Option<String>,
    notes: &mut Vec<Note>,
) {
    let body = d.block.as_deref().unwrap_or_default();
    let mut hosts = Vec::new();
    let mut default_server = false;
    for s in body {
        match s.name.as_str() {
            "server_name" => {
                hosts.extend(s.args.iter().filter(|h| !matches!(h.as_str(), "_" | "\"\"" | "")).cloned())
            }
            "listen" => default_server |= the_listen(s, listen, notes),
            "try_files" | "alias" if body.iter().any(|l| l.name == "location") => {
                note(notes, s, false, "a server-level try_files is not mapped: write it in the locations")
            }
            "rewrite" | "return" if body.iter().any(|l| l.name == "location") => note(
                notes,
                s,
                false,
                "a server-level rewrite or return runs before the locations: not mapped",
            ),
            _ => {}
        }
    }
    let level = level(body, http.clone(), &["server_name", "listen"], notes);
    let base = Route { hosts, default_server, inherited: level, ..Default::default() };
    let locations: Vec<&Directive> = body.iter().filter(|l| l.name == "location").collect();
    if locations.is_empty() {
        return lone_server(d, body, base, routes, notes);
    }
    for l in locations {
        location(l, &base, upstreams, routes, notes);
    }
}

/// A server without locations: a route at / when it answers (`return`) or serves files (a
/// `root`), but the redirect of plain HTTP to https://, which is [tls] redirect_listen's.
fn lone_server(
    d: &Directive,
    body: &[Directive],
    base: Route,
    routes: &mut Vec<Route>,
    notes: &mut Vec<Note>,
) {
    // A server that only answers (`return`) is a route of its own at /, but the redirect of
    // plain HTTP to https://, which is [tls] redirect_listen's.
    if let Some(r) = body.iter().find(|l| l.name == "return") {
        if r.args.len() == 2
            && ["301", "302", "307", "308"].contains(&r.args[0].as_str())
            && r.args[1].starts_with("https://")
        {
            return note(notes, r, true, "plain HTTP redirected to https:// is [tls] redirect_listen's (a 308 to the same host and path)");
        }
        let mut route = Route { path: "/".into(), name: format!("server-{}", d.at.line), ..base };
        route.answer = answer(r, notes);
        if route.answer.is_some() {
            push(route, r, routes, notes);
        }
    } else if base.inherited.root.is_some() {
        // Files from the server's root for every path, as Nginx's location-less server.
        let all =
            Directive { name: "location".into(), args: vec!["/".into()], block: None, at: d.at.clone() };
        let mut route = Route { path: "/".into(), name: format!("server-{}", d.at.line), ..base };
        files_location(&all, body, &mut route, notes);
        if route.files.is_some() {
            push(route, d, routes, notes);
        }
    }
}

/// `listen`: the gateway has one listener; the first address is its `[server] listen`, the
/// others are noted. Whether it is `default_server`.
fn the_listen(s: &Directive, listen: &mut Option<String>, notes: &mut Vec<Note>) -> bool {
    let addr = s.args.first().cloned().unwrap_or_default();
    let addr = if addr.parse::<u16>().is_ok() { format!("0.0.0.0:{addr}") } else { addr };
    let mut tls = false;
    let ssl = s.args.iter().any(|a| a == "ssl");
    for flag in &s.args[1..] {
        match flag.as_str() {
            "default_server" | "default" => {}
            "proxy_protocol" if ssl => note(
                notes,
                s,
                true,
                "[tls] proxy_protocol = true (in the [tls] section written by hand): the header comes before TLS, its source is the client's address",
            ),
            "proxy_protocol" => note(
                notes,
                s,
                true,
                "[server] proxy_protocol = true: the PROXY header's source is the client's address, as with `real_ip_header proxy_protocol` (the socket's peer is the balancer)",
            ),
            "ssl" | "http2" => {
                tls = true;
                note(notes, s, false, "TLS and HTTP/2 are the gateway's [tls] section (listen, certificates): write it by hand; the routes serve both listeners")
            }
            other => note(notes, s, false, &format!("listen's `{other}` has no counterpart")),
        }
    }
    let proxied = s.args.iter().any(|a| a == "proxy_protocol");
    let addr = if proxied { format!("{addr} proxy_protocol") } else { addr };
    match listen {
        _ if tls => {}
        None => *listen = Some(addr),
        Some(first) if *first == addr => {}
        Some(first) => note(
            notes,
            s,
            true,
            &format!("one listener for all: {first} (this one's routes are served there)"),
        ),
    }
    s.args.iter().any(|a| a == "default_server" || a == "default")
}

/// A `location` into a route (nested locations and named ones are noted).
fn location(
    l: &Directive,
    base: &Route,
    upstreams: &BTreeMap<String, Upstream>,
    routes: &mut Vec<Route>,
    notes: &mut Vec<Note>,
) {
    let path = l.args.join(" ");
    if l.args.first().is_some_and(|a| a.starts_with('@')) {
        return note(notes, l, false, "named locations are not built");
    }
    let body = l.block.as_deref().unwrap_or_default();
    for inner in body.iter().filter(|d| d.name == "location") {
        note(notes, inner, false, "nested locations are not built");
    }
    let inherited = level(body, base.inherited.clone(), &["location"], notes);
    let mut route = Route {
        name: format!("{}-{}", slug(&path), l.at.line),
        hosts: base.hosts.clone(),
        default_server: base.default_server,
        path,
        inherited,
        ..Default::default()
    };
    route.rewrites = rewrites(body, notes);
    if let Some(r) = body.iter().find(|d| d.name == "return") {
        route.answer = answer(r, notes);
    } else if let Some(p) = body.iter().find(|d| d.name == "proxy_pass") {
        proxy_pass(p, &l.args, upstreams, &mut route, notes);
    }
    if route.answer.is_none() && route.upstreams.is_empty() && !body.iter().any(|d| d.name == "proxy_pass") {
        files_location(l, body, &mut route, notes);
    }
    if route.answer.is_none()
        && route.upstreams.is_empty()
        && route.files.is_none()
        && !route.rewrites.is_empty()
    {
        note(notes, l, true, "rewrites only: a request none of them takes away is answered 404 (Nginx's default root, `html` under its prefix, is not mapped)");
    } else if route.answer.is_none() && route.upstreams.is_empty() && route.files.is_none() {
        return note(notes, l, false, "neither proxied, answered nor served from a folder here (Nginx's default root, `html` under its prefix, is not mapped): no route");
    }
    push(route, l, routes, notes);
}

/// A location without `proxy_pass` or `return` serves files: its `alias`, else the `root` it
/// sets or inherits; its `try_files` (candidates `$uri...` or `/path`, then a path or `=CODE`).
fn files_location(l: &Directive, body: &[Directive], route: &mut Route, notes: &mut Vec<Note>) {
    let regex_or_exact = matches!(l.args.first().map(String::as_str), Some("=" | "~" | "~*"));
    if let Some(a) = body.iter().find(|d| d.name == "alias") {
        if regex_or_exact || a.args.len() != 1 || a.args[0].contains('$') {
            return note(notes, a, false, "alias is mapped on a prefix location, without variables");
        }
        route.files = Some(FilesFrom::Alias(a.args[0].clone()));
    } else if let Some(root) = &route.inherited.root {
        route.files = Some(FilesFrom::Root(root.clone()));
    } else {
        return; // noted by the caller: no route
    }
    let Some(t) = body.iter().find(|d| d.name == "try_files") else { return };
    let plain = |a: &str| {
        let rest = a.strip_prefix("$uri").unwrap_or(a);
        (rest.len() < a.len() || a.starts_with('/'))
            && !rest.contains('$')
            && !rest.contains('?')
            && !rest.split('/').any(|s| s == ".." || s == ".")
    };
    let none = String::new();
    let (last, candidates) = t.args.split_last().unwrap_or((&none, &[]));
    let last_ok = last
        .strip_prefix('=')
        .map_or(plain(last), |c| c.parse::<u16>().is_ok_and(|c| (200..600).contains(&c)));
    if candidates.is_empty() || !candidates.iter().all(|a| plain(a)) || !last_ok {
        route.files = None;
        return note(notes, t, false, "try_files is mapped with `$uri`, `$uri/` and paths, then a path or =CODE (no named location, query or other variable)");
    }
    let prefix = l.args.last().map(String::as_str).unwrap_or("/");
    if !last.starts_with('=') && (regex_or_exact || !last.starts_with(prefix)) {
        note(
            notes,
            t,
            true,
            "the last resort is served from this route's folder (Nginx searches the locations again for it)",
        );
    }
    route.try_files = Some(t.args.clone());
}

/// Adds `route` unless an earlier one has a host of its and its path (Nginx told their servers
/// apart by port; the gateway's routes serve every listener): then noted.
fn push(route: Route, d: &Directive, routes: &mut Vec<Route>, notes: &mut Vec<Note>) {
    let hosts = |r: &Route| -> Vec<String> {
        if r.hosts.is_empty() {
            vec![String::new()]
        } else {
            r.hosts.clone()
        }
    };
    let clash =
        routes.iter().find(|r| r.path == route.path && hosts(r).iter().any(|h| hosts(&route).contains(h)));
    match clash {
        Some(r) => note(
            notes,
            d,
            false,
            &format!(
                "route {} has a host of its and its path (one set of routes for every listener)",
                r.name
            ),
        ),
        None => routes.push(route),
    }
}

/// `proxy_pass http://NAME|IP:PORT[/uri]`.
fn proxy_pass(
    p: &Directive,
    loc: &[String],
    upstreams: &BTreeMap<String, Upstream>,
    route: &mut Route,
    notes: &mut Vec<Note>,
) {
    let target = p.args.first().map(String::as_str).unwrap_or_default();
    let (tls, rest) = match (target.strip_prefix("http://"), target.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (None, Some(rest)) => (true, rest),
        _ => {
            return note(
                notes,
                p,
                false,
                "only http:// and https:// upstreams are built (not unix: or variables)",
            )
        }
    };
    route.tls = tls;
    let (host, uri) = rest.find('/').map_or((rest, None), |i| (&rest[..i], Some(&rest[i..])));
    match upstreams.get(host) {
        Some(up) => {
            route.upstreams = up.servers.clone();
            route.balance = up.balance.clone();
        }
        None if host.starts_with('$') => {
            return note(notes, p, false, "an upstream in a variable is not built")
        }
        None if tls && !host.contains(':') => route.upstreams = vec![format!("{host}:443")],
        None => match server_line(p, host, &[], notes) {
            Some(line) => route.upstreams = vec![line],
            None => return,
        },
    }
    if let Some(uri) = uri {
        match loc {
            [_] | [_, _] if loc[0] != "=" && !loc[0].starts_with('~') => {
                route.replace_prefix = Some(uri.to_string())
            }
            _ => note(notes, p, false, "a URI in proxy_pass replaces a prefix location's path only"),
        }
    }
}

/// `return CODE [URL|TEXT]` / `return URL`.
fn answer(r: &Directive, notes: &mut Vec<Note>) -> Option<String> {
    let text = r.args.join(" ");
    match crate::template::Template::parse(&text) {
        Ok(_) => Some(text),
        Err(e) => {
            note(notes, r, false, &e);
            None
        }
    }
}

/// A location's `rewrite`s in order; those after its `return` never run (noted).
fn rewrites(body: &[Directive], notes: &mut Vec<Note>) -> Vec<(String, String, &'static str)> {
    let mut out = Vec::new();
    let mut answered = false;
    for d in body.iter().filter(|d| matches!(d.name.as_str(), "rewrite" | "return")) {
        match (d.name.as_str(), answered) {
            ("return", _) => answered = true,
            (_, true) => note(notes, d, false, "after the location's `return`: never runs"),
            _ => out.extend(rewrite(d, notes)),
        }
    }
    out
}

/// `rewrite REGEX REPLACEMENT [last|break|redirect|permanent]`.
fn rewrite(r: &Directive, notes: &mut Vec<Note>) -> Option<(String, String, &'static str)> {
    let flag = match (r.args.len(), r.args.get(2).map(String::as_str)) {
        (2, _) => "none",
        (3, Some("last")) => "last",
        (3, Some("break")) => "break",
        (3, Some("redirect")) => "redirect",
        (3, Some("permanent")) => "permanent",
        _ => {
            note(
                notes,
                r,
                false,
                "rewrite takes a regex, a replacement and a flag (last, break, redirect, permanent)",
            );
            return None;
        }
    };
    let to = &r.args[1];
    if !["/", "http://", "https://", "$scheme"].iter().any(|p| to.starts_with(p)) {
        note(notes, r, false, "the replacement must be a path (/...) or a URL");
        return None;
    }
    if let Err(e) = crate::template::Template::parse(to) {
        note(notes, r, false, &e);
        return None;
    }
    Some((r.args[0].clone(), to.clone(), flag))
}

fn slug(path: &str) -> String {
    let s: String = path.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() {
        "root".into()
    } else {
        s.chars().take(40).collect()
    }
}

/// The conf file.
fn render(listen: Option<&str>, zones: &[Zone], routes: &[Route]) -> String {
    let mut out = String::from(
        "# Imported from nginx.conf by `gateway import-nginx` (its notes on stderr).\n\n[server]\n",
    );
    let (addr, proxied) = match listen.unwrap_or("0.0.0.0:80").split_once(' ') {
        Some((addr, _)) => (addr, true),
        None => (listen.unwrap_or("0.0.0.0:80"), false),
    };
    let _ = writeln!(out, "listen = {}", q(addr));
    if proxied {
        out.push_str("proxy_protocol = true\n");
    }
    limits::render(&mut out, zones);
    for r in routes {
        route(&mut out, r);
    }
    out
}

fn route(out: &mut String, r: &Route) {
    let _ = write!(out, "\n[[route]]\nname = {}\n", q(&r.name));
    if !r.hosts.is_empty() {
        let hosts: Vec<String> = r.hosts.iter().map(|h| q(h)).collect();
        let _ = writeln!(out, "hosts = [{}]", hosts.join(", "));
        if r.default_server {
            out.push_str("default_server = true\n");
        }
    }
    let _ = writeln!(out, "path = {}", q(&r.path));
    if let Some(a) = &r.answer {
        let _ = writeln!(out, "return = {}", q(a));
    } else if let Some(from) = &r.files {
        files(out, from, r);
    } else if !r.upstreams.is_empty() {
        let ups: Vec<String> = r.upstreams.iter().map(|u| q(u)).collect();
        let _ = writeln!(out, "upstreams = [{}]", ups.join(", "));
        if let Some(b) = &r.balance {
            let _ = writeln!(out, "balance = {}", q(b));
        }
        if r.tls {
            upstream_tls(out, &r.inherited.ssl);
        }
    }
    if let Some(p) = &r.replace_prefix {
        let _ = writeln!(out, "replace_prefix = {}", q(p));
    }
    let rewrites: Vec<String> = r
        .rewrites
        .iter()
        .map(|(regex, to, flag)| {
            format!("{{ regex = {}, replacement = {}, flag = {} }}", q(regex), q(to), q(flag))
        })
        .collect();
    match rewrites.as_slice() {
        [] => {}
        [one] => {
            let _ = writeln!(out, "rewrite = {one}");
        }
        all => {
            let _ = writeln!(out, "rewrite = [\n  {},\n]", all.join(",\n  "));
        }
    }
    inherited(out, &r.inherited);
}

/// What a route inherits from its levels (`server`, `location`), written out: the timeouts, the
/// body's bound, compression, the limits and their statuses, the headers set, added and hidden.
fn inherited(out: &mut String, i: &Inherited) {
    for (field, ms) in &i.timeouts {
        let _ = writeln!(out, "{field} = {ms}");
    }
    if let Some(b) = i.max_body {
        let _ = writeln!(out, "client_max_body_size = {b}");
    }
    compression(out, &i.gzip);
    for (field, table) in [("limit_req", &i.limit_req), ("limit_conn", &i.limit_conn)] {
        if let Some(Some(t)) = table {
            let _ = writeln!(out, "{field} = {t}");
        }
    }
    for (field, status) in
        [("limit_req_status", i.limit_req_status), ("limit_conn_status", i.limit_conn_status)]
    {
        if let Some(s) = status {
            let _ = writeln!(out, "{field} = {s}");
        }
    }
    table(out, "proxy_set_header", i.set_header.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str())));
    let (always, not): (Vec<_>, Vec<_>) = i.add_header.iter().flatten().partition(|h| h.2);
    table(out, "add_header", not.iter().map(|h| (h.0.as_str(), h.1.as_str())));
    table(out, "add_header_always", always.iter().map(|h| (h.0.as_str(), h.1.as_str())));
    if let Some(hide) = &i.hide_header {
        let hide: Vec<String> = hide.iter().map(|h| q(h)).collect();
        let _ = writeln!(out, "proxy_hide_header = [{}]", hide.join(", "));
    }
}

/// The keys of `proxy_pass https://`: Nginx checks no certificate unless `proxy_ssl_verify on`,
/// and so does the imported route (written out, `upstream_verify = false`: set a CA and turn it
/// on).
fn upstream_tls(out: &mut String, ssl: &ProxySsl) {
    out.push_str("upstream_tls = true\n");
    if let Some(n) = &ssl.name {
        let _ = writeln!(out, "upstream_sni = {}", q(n));
    }
    if let Some(f) = &ssl.trusted {
        let _ = writeln!(out, "upstream_ca_file = {}", q(f));
    }
    if ssl.verify != Some(true) {
        out.push_str("upstream_verify = false\n");
    }
}

/// The compression keys for `gzip on` (Nginx's defaults written out: level 1, `text/html`, 20
/// bytes; gzip alone, Nginx's only algorithm without extra modules).
fn compression(out: &mut String, g: &Gzip) {
    if g.on != Some(true) {
        return;
    }
    let _ = writeln!(out, "compression_level = {}", g.level.unwrap_or(1));
    let types: Vec<String> = g.types.iter().flatten().filter(|t| *t != "text/html").map(|t| q(t)).collect();
    let _ = writeln!(out, "compression_types = [{}]", types.join(", "));
    if let Some(n) = g.min_length {
        let _ = writeln!(out, "compression_min_length = {n}");
    }
    out.push_str("compression_algorithms = [\"gzip\"]\n");
}

/// A files route's keys (Nginx's `default_type` is `text/plain` when no level sets it).
fn files(out: &mut String, from: &FilesFrom, r: &Route) {
    let list = |l: &[String]| l.iter().map(|a| q(a)).collect::<Vec<_>>().join(", ");
    match from {
        FilesFrom::Root(p) => writeln!(out, "root = {}", q(p)),
        FilesFrom::Alias(p) => writeln!(out, "alias = {}", q(p)),
    }
    .unwrap_or_default();
    if let Some(index) = &r.inherited.index {
        let _ = writeln!(out, "index = [{}]", list(index));
    }
    if let Some(t) = &r.try_files {
        let _ = writeln!(out, "try_files = [{}]", list(t));
    }
    let _ =
        writeln!(out, "default_type = {}", q(r.inherited.default_type.as_deref().unwrap_or("text/plain")));
}

/// `field = { "Name" = "value", ... }` when there is any.
fn table<'a>(out: &mut String, field: &str, pairs: impl Iterator<Item = (&'a str, &'a str)>) {
    let pairs: Vec<String> = pairs.map(|(k, v)| format!("{} = {}", q(k), q(v))).collect();
    if !pairs.is_empty() {
        let _ = writeln!(out, "{field} = {{ {} }}", pairs.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn shop() -> super::Import {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/nginx/shop.conf");
        crate::nginx::import_file(&file).expect("the shop's nginx.conf reads")
    }

    /// The notes as `file:line: directive: what` (file names without their folder).
    fn notes(i: &super::Import) -> Vec<String> {
        i.notes
            .iter()
            .map(|n| {
                let file = n.at.file.file_name().unwrap().to_string_lossy().to_string();
                let what = if n.mapped { "differently" } else { "not mapped" };
                format!("{file}:{}: {}: {what}", n.at.line, n.directive)
            })
            .collect()
    }

    #[test]
    fn the_shop_conf_becomes_a_proxy_only_conf_the_gateway_loads() {
        let i = shop();
        // The static location's root is the shop's machine's: a folder that is there, here.
        let toml = i.toml.replace("/srv/shop/static", &std::env::temp_dir().display().to_string());
        let conf = crate::conf::parse_server(Path::new("imported.toml"), &toml)
            .unwrap_or_else(|e| panic!("{e}\n{}", i.toml));
        // The locations proxied, answered, served or rewritten: /, = /healthz, ^~ /api/, the
        // static files, /old/, /legacy/ (its `last` rewrite), /search (the redirect to https is
        // [tls]'s).
        assert_eq!(i.toml.matches("[[route]]").count(), 7, "{}", i.toml);
        assert!(format!("{conf:?}").contains("shop_app") || i.toml.contains("127.0.0.1:9001"));
        for want in [
            "listen = \"0.0.0.0:80\"",
            "return = \"200 ok\"",
            "path = \"^~ /api/\"\nupstreams = [\"127.0.0.1:9100 weight=2\"]\nreplace_prefix = \"/v2/\"",
            "upstreams = [\"127.0.0.1:9000\", \"127.0.0.1:9001 max_fails=3 fail_timeout=30s\"]",
            "read_timeout_ms = 5000",
            "client_max_body_size = 1048576",
            "client_max_body_size = 8388608",
            "compression_level = 5\ncompression_types = [\"text/css\", \"application/json\", \"application/javascript\"]\ncompression_algorithms = [\"gzip\"]",
            "proxy_set_header = { \"X-Api\" = \"1\" }",
            "proxy_set_header = { \"Host\" = \"$host\", \"X-Forwarded-Proto\" = \"$scheme\" }",
            "add_header_always = { \"X-Frame-Options\" = \"SAMEORIGIN\" }",
            "rewrite = { regex = \"^/old/(.*)$\", replacement = \"/new/$1\", flag = \"break\" }",
            "path = \"/legacy/\"\nrewrite = { regex = \"^/legacy/(.*)$\", replacement = \"/$1\", flag = \"last\" }",
            "proxy_hide_header = [\"X-Powered-By\"]",
            "hosts = [\"shop.example.com\", \"*.shop.example.com\"]\ndefault_server = true",
            "[[limit_req_zone]]\nname = \"search\"\nkey = \"$binary_remote_addr\"\nrate = \"10r/s\"\nmax_keys = 163840",
            "limit_req = { zone = \"search\", burst = 20, nodelay = true }",
            "path = \"~* \\\\.(css|js|png)$\"\nroot = \"/srv/shop/static\"\ndefault_type = \"application/octet-stream\"",
        ] {
            assert!(i.toml.contains(want), "{want:?} missing from:\n{}", i.toml);
        }
    }

    #[test]
    fn every_directive_not_mapped_is_noted_at_its_place() {
        let got = notes(&shop());
        for want in [
            "shop.conf:3: user: not mapped",
            "shop.conf:6: events: not mapped",
            "mime.types:1: types: differently",
            "shop.conf:16: gzip: differently",
            "shop.conf:33: return: differently",
            "shop-https.conf:2: listen: not mapped",
            "shop-https.conf:4: ssl_certificate: not mapped",
            "shop-https.conf:8: proxy_set_header: differently",
            "shop-https.conf:30: expires: not mapped",
            "shop-https.conf:38: location: differently",
            "shop-https.conf:44: if: not mapped",
            "shop-https.conf:49: error_page: not mapped",
            "shop-https.conf:50: access_log: not mapped",
        ] {
            assert!(got.contains(&want.to_string()), "{want:?} not in {got:#?}");
        }
        // Nothing else: every note is one of those (the upstream servers' weight, max_fails
        // and fail_timeout map).
        assert_eq!(got.len(), 17, "{got:#?}");
        assert!(!got.iter().any(|n| n.contains("default_type") || n.contains(": root:")), "{got:#?}");
    }

    /// Imports `http` (an http block's body) written to a file of its own.
    fn import_http(http: &str) -> super::Import {
        let dir = std::env::temp_dir().join(format!("import-{}-{}", std::process::id(), http.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nginx.conf");
        std::fs::write(&file, format!("http {{\n{http}\n}}\n")).unwrap();
        let out = crate::nginx::import_file(&file).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    #[test]
    fn a_listener_with_the_proxy_protocol() {
        let i = import_http(
            "server { listen 8080 proxy_protocol; set_real_ip_from 10.0.0.0/8; real_ip_header proxy_protocol;
               location / { return 200 ok; } }",
        );
        assert!(i.toml.contains("listen = \"0.0.0.0:8080\"\nproxy_protocol = true\n"), "{}", i.toml);
        crate::conf::parse_server(std::path::Path::new("imported.toml"), &i.toml).expect("it loads");
        let notes: Vec<String> = i.notes.iter().map(|n| format!("{}: {}", n.directive, n.mapped)).collect();
        assert!(
            notes.contains(&"listen: true".to_string())
                && notes.contains(&"real_ip_header: true".to_string()),
            "{notes:?}"
        );
        // On a TLS listener: [tls] proxy_protocol, not the plain listener's.
        let i = import_http("server { listen 443 ssl proxy_protocol; location / { return 200 ok; } }");
        assert!(!i.toml.contains("proxy_protocol = true"), "{}", i.toml);
        assert!(i.notes.iter().any(|n| n.why.starts_with("[tls] proxy_protocol = true")), "{:?}", i.notes);
    }

    #[test]
    fn rewrites_in_order_with_their_flags() {
        let i = import_http(
            "server { listen 8080; server_name r.test;\n\
             location /a/ { rewrite ^/a/(.*)$ /b/$1; rewrite ^/b/(.*)$ /c/$1 last; rewrite ^/x https://$host/ permanent; }\n\
             location /t/ { rewrite ^/t/(.*)$ /u/$1; return 200 \"$uri\"; rewrite ^ /never; }\n\
             location /bad/ { rewrite ^ relative; rewrite a b c d; proxy_pass http://127.0.0.1:9; }\n}",
        );
        let want = "rewrite = [\n  { regex = \"^/a/(.*)$\", replacement = \"/b/$1\", flag = \"none\" },\n  \
                    { regex = \"^/b/(.*)$\", replacement = \"/c/$1\", flag = \"last\" },\n  \
                    { regex = \"^/x\", replacement = \"https://$host/\", flag = \"permanent\" },\n]";
        assert!(i.toml.contains(want), "{}", i.toml);
        assert!(i.toml.contains("return = \"200 $uri\"\nrewrite = { regex = \"^/t/(.*)$\", replacement = \"/u/$1\", flag = \"none\" }"), "{}", i.toml);
        let n: Vec<String> =
            i.notes.iter().map(|n| format!("{}:{} {}", n.at.line, n.directive, n.why)).collect();
        assert!(n.iter().any(|n| n.starts_with("3:location") && n.contains("rewrites only")), "{n:#?}");
        assert!(n.iter().any(|n| n.starts_with("4:") && n.contains("never runs")), "{n:#?}");
        assert!(n.iter().any(|n| n.starts_with("5:") && n.contains("a path (/...) or a URL")), "{n:#?}");
        assert!(
            n.iter().any(|n| n.starts_with("5:") && n.contains("a regex, a replacement and a flag")),
            "{n:#?}"
        );
        crate::conf::parse_server(std::path::Path::new("imported.toml"), &i.toml).expect("it loads");
    }

    #[test]
    fn upstream_blocks_names_balancing_and_https() {
        let i = import_http(
            "upstream app { least_conn; server app.internal weight=2 max_fails=2 fail_timeout=5s; server 10.0.0.2:8080 backup; }
             upstream hashed { hash $cookie_sid; server 10.0.0.3:80; }
             server { listen 80; server_name shop.test;
               location / { proxy_pass http://app; }
               location /h/ { proxy_pass http://hashed; }
               location /s/ { proxy_pass https://secure.internal; proxy_ssl_name secure.internal;
                 proxy_ssl_trusted_certificate ca.pem; proxy_ssl_verify on; }
               location /u/ { proxy_pass https://10.0.0.9:8443; }
             }",
        );
        let conf = crate::conf::parse_server(
            std::path::Path::new("imported.toml"),
            &i.toml.replace("ca.pem", "/dev/null"),
        );
        assert!(conf.is_err(), "the CA file is read at load: /dev/null holds none");
        for want in [
            "upstreams = [\"app.internal:80 weight=2 max_fails=2 fail_timeout=5s\"]\nbalance = \"least_conn\"",
            "upstreams = [\"10.0.0.3:80\"]\nbalance = \"hash $cookie_sid\"",
            "upstreams = [\"secure.internal:443\"]\nupstream_tls = true\nupstream_sni = \"secure.internal\"\nupstream_ca_file = \"ca.pem\"\n",
            "upstreams = [\"10.0.0.9:8443\"]\nupstream_tls = true\nupstream_verify = false",
        ] {
            assert!(i.toml.contains(want), "{want:?} missing from:\n{}", i.toml);
        }
        let notes: Vec<String> = i.notes.iter().map(|n| format!("{}: {}", n.directive, n.mapped)).collect();
        assert!(notes.contains(&"server: false".to_string()), "backup is noted: {notes:?}");
        assert!(notes.contains(&"hash: true".to_string()), "hash without consistent: {notes:?}");
    }

    /// Imports an nginx.conf's text (written to a file of its own).
    fn import_text(name: &str, text: &str) -> super::Import {
        let file = std::env::temp_dir().join(format!("gateway-import-{name}-{}.conf", std::process::id()));
        std::fs::write(&file, text).unwrap();
        crate::nginx::import_file(&file).unwrap()
    }

    #[test]
    fn root_alias_index_and_try_files_map_as_nginx_inherits_them() {
        let i = import_text(
            "files",
            "http {\n default_type application/octet-stream;\n index home.html index.html;\n\
             server {\n listen 8080;\n server_name shop.test;\n root /srv/www;\n\
             location / { try_files $uri $uri/ /index.html; }\n\
             location /assets/ { alias /srv/assets/; index a.html; }\n\
             location /strict/ { root /srv/strict; try_files $uri =404; }\n\
             location /api/ { proxy_pass http://127.0.0.1:9000; }\n\
             location ~ \\.(png)$ { alias /srv/img/; }\n\
             location /php/ { try_files $uri @php; }\n\
             }\n server {\n listen 8080;\n server_name bare.test;\n root www;\n }\n}\n",
        );
        let t = &i.toml;
        for want in [
            "path = \"/\"\nroot = \"/srv/www\"\nindex = [\"home.html\", \"index.html\"]\n\
             try_files = [\"$uri\", \"$uri/\", \"/index.html\"]\ndefault_type = \"application/octet-stream\"",
            "path = \"/assets/\"\nalias = \"/srv/assets/\"\nindex = [\"a.html\"]",
            "path = \"/strict/\"\nroot = \"/srv/strict\"\nindex = [\"home.html\", \"index.html\"]\n\
             try_files = [\"$uri\", \"=404\"]",
            "path = \"/api/\"\nupstreams = [\"127.0.0.1:9000\"]",
            "hosts = [\"bare.test\"]\npath = \"/\"\nroot = \"www\"",
        ] {
            assert!(t.contains(want), "{want:?} missing from:\n{t}");
        }
        assert_eq!(t.matches("[[route]]").count(), 5, "{t}");
        let got = notes(&i);
        // The regex alias and the named fallback: no route (the directive and its location
        // noted); the relative root: from the server file's folder.
        let got: Vec<&str> = got.iter().map(|n| n.split_once(':').unwrap().1).collect();
        assert_eq!(
            got,
            [
                "12: alias: not mapped",
                "12: location: not mapped",
                "13: try_files: not mapped",
                "13: location: not mapped",
                "18: root: differently"
            ]
        );
        // Without default_type anywhere, Nginx's own: text/plain.
        let plain = import_text("plain", "http { server { listen 80; root /srv; } }\n");
        assert!(plain.toml.contains("default_type = \"text/plain\""), "{}", plain.toml);
    }
}
