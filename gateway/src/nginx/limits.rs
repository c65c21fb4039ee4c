//! `limit_req_zone`, `limit_req`, `limit_req_status`, `limit_conn_zone`, `limit_conn` and
//! `limit_conn_status` → the gateway's `[[limit_req_zone]]`, `[[limit_conn_zone]]` and a route's
//! `limit_req`, `limit_conn`, `limit_req_status`, `limit_conn_status` (same meaning).

use std::fmt::Write;

use super::note::{note, q, Note};
use super::parse::Directive;

/// A zone that maps.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Zone {
    /// `limit_req_zone` or `limit_conn_zone`.
    pub kind: &'static str,
    pub name: String,
    pub key: String,
    /// `limit_req_zone`'s.
    pub rate: Option<String>,
    pub max_keys: i64,
}

/// Nginx's 64-byte states: 16,384 of them a megabyte.
const STATE_BYTES: i64 = 64;

/// A zone directive (`limit_req_zone KEY zone=NAME:SIZE rate=R`, `limit_conn_zone KEY
/// zone=NAME:SIZE`); noted and `None` when its key or a parameter does not map.
pub(super) fn zone(d: &Directive, notes: &mut Vec<Note>) -> Option<Zone> {
    let kind = if d.name == "limit_req_zone" { "limit_req_zone" } else { "limit_conn_zone" };
    let key = d.args.first().cloned().unwrap_or_default();
    let keyed = matches!(key.as_str(), "$binary_remote_addr" | "$remote_addr" | "$server_name")
        || key.strip_prefix("$http_").is_some_and(|h| !h.is_empty());
    if !keyed {
        note(
            notes,
            d,
            false,
            &format!("the key {key:?}: the gateway's zones count by $binary_remote_addr, $remote_addr, $http_<name> or $server_name"),
        );
        return None;
    }
    let (mut name, mut size, mut rate) = (None, None, None);
    for a in &d.args[1..] {
        match a.split_once('=') {
            Some(("zone", z)) => {
                let (n, s) = z.split_once(':').unwrap_or((z, ""));
                name = Some(n.to_string());
                size = super::note::bytes(s);
            }
            Some(("rate", r)) => rate = Some(r.to_string()),
            _ => note(notes, d, false, &format!("`{a}` has no counterpart (left out)")),
        }
    }
    let (Some(name), Some(size)) = (name, size) else {
        note(notes, d, false, "zone=NAME:SIZE was expected");
        return None;
    };
    if kind == "limit_req_zone" && rate.is_none() {
        note(notes, d, false, "rate=Nr/s or rate=Nr/m was expected");
        return None;
    }
    let max_keys = (size / STATE_BYTES).clamp(1, 16_777_216);
    Some(Zone { kind, name, key, rate, max_keys })
}

/// `limit_req zone=NAME [burst=N] [nodelay | delay=N]` → the route's inline table; noted and
/// `None` when its zone is not one that maps.
pub(super) fn limit_req(d: &Directive, zones: &[Zone], notes: &mut Vec<Note>) -> Option<String> {
    let mut fields = Vec::new();
    for a in &d.args {
        match a.split_once('=') {
            Some(("zone", z)) => fields.insert(0, format!("zone = {}", q(z))),
            Some(("burst", n)) if n.parse::<u32>().is_ok() => fields.push(format!("burst = {n}")),
            Some(("delay", n)) if n.parse::<u32>().is_ok() => fields.push(format!("delay = {n}")),
            None if a == "nodelay" => fields.push("nodelay = true".into()),
            _ => {
                note(notes, d, false, &format!("`{a}` is not a limit_req parameter the gateway reads"));
                return None;
            }
        }
    }
    known(d, "zone=", zones, "limit_req_zone", notes)?;
    Some(format!("{{ {} }}", fields.join(", ")))
}

/// `limit_conn NAME N` → the route's inline table.
pub(super) fn limit_conn(d: &Directive, zones: &[Zone], notes: &mut Vec<Note>) -> Option<String> {
    let [zone, max] = d.args.as_slice() else {
        note(notes, d, false, "limit_conn takes a zone and a number");
        return None;
    };
    if max.parse::<u32>().is_err() {
        note(notes, d, false, "limit_conn's number is not one");
        return None;
    }
    known(d, "", zones, "limit_conn_zone", notes)?;
    Some(format!("{{ zone = {}, max = {max} }}", q(zone)))
}

/// Whether the zone `d` names (its argument after `prefix`) is one of `kind` that maps.
fn known(d: &Directive, prefix: &str, zones: &[Zone], kind: &str, notes: &mut Vec<Note>) -> Option<()> {
    let name = d.args.iter().find_map(|a| a.strip_prefix(prefix)).unwrap_or_default();
    if zones.iter().any(|z| z.kind == kind && z.name == name) {
        return Some(());
    }
    note(notes, d, false, &format!("its zone {name:?} is not a {kind} that maps (see its note)"));
    None
}

/// `limit_req_status` / `limit_conn_status` (400..599).
pub(super) fn status(d: &Directive, notes: &mut Vec<Note>) -> Option<u16> {
    match d.args.first().and_then(|s| s.parse::<u16>().ok()).filter(|s| (400..=599).contains(s)) {
        Some(s) => Some(s),
        None => {
            note(notes, d, false, "a status from 400 to 599 was expected");
            None
        }
    }
}

/// The zones' tables.
pub(super) fn render(out: &mut String, zones: &[Zone]) {
    for z in zones {
        let _ = write!(out, "\n[[{}]]\nname = {}\nkey = {}\n", z.kind, q(&z.name), q(&z.key));
        if let Some(r) = &z.rate {
            let _ = writeln!(out, "rate = {}", q(r));
        }
        let _ = writeln!(out, "max_keys = {}", z.max_keys);
    }
}

#[cfg(test)]
mod tests {
    /// Imports an nginx.conf `http` body.
    fn import(http: &str) -> super::super::Import {
        let dir = std::env::temp_dir().join(format!("nginx-limits-{}-{}", std::process::id(), http.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nginx.conf");
        std::fs::write(&file, format!("http {{\n{http}\n}}\n")).unwrap();
        let i = crate::nginx::import_file(&file).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        i
    }

    fn notes(i: &super::super::Import) -> Vec<String> {
        i.notes.iter().map(|n| format!("{}: {}: {}", n.at.line, n.directive, n.why)).collect()
    }

    #[test]
    fn zones_and_limits_map_with_nginx_inheritance() {
        let i = import(
            "limit_req_zone $binary_remote_addr zone=ip:1m rate=1r/m;\n\
             limit_req_zone $http_x_api_key zone=key:64k rate=5r/s;\n\
             limit_conn_zone $remote_addr zone=c:10m;\n\
             limit_req_status 429;\n\
             server {\n listen 127.0.0.1:8080;\n server_name a.test;\n limit_req zone=ip burst=3 nodelay;\n\
              limit_conn c 2;\n\
              location /a/ { proxy_pass http://127.0.0.1:1; }\n\
              location /k/ { limit_req zone=key burst=1 delay=1; limit_conn_status 503; proxy_pass http://127.0.0.1:1; }\n\
              location /n/ { limit_req zone=key; limit_req zone=ip; proxy_pass http://127.0.0.1:1; }\n\
             }",
        );
        let conf = crate::conf::parse_server(std::path::Path::new("imported.toml"), &i.toml)
            .unwrap_or_else(|e| panic!("{e}\n{}", i.toml));
        assert_eq!(conf.limit_req_zones.len(), 2);
        for want in [
            "[[limit_req_zone]]\nname = \"ip\"\nkey = \"$binary_remote_addr\"\nrate = \"1r/m\"\nmax_keys = 16384\n",
            "[[limit_req_zone]]\nname = \"key\"\nkey = \"$http_x_api_key\"\nrate = \"5r/s\"\nmax_keys = 1024\n",
            "[[limit_conn_zone]]\nname = \"c\"\nkey = \"$remote_addr\"\nmax_keys = 163840\n",
            // /a/ inherits the server's limits and http's status.
            "path = \"/a/\"\nupstreams = [\"127.0.0.1:1\"]\nlimit_req = { zone = \"ip\", burst = 3, nodelay = true }\n\
             limit_conn = { zone = \"c\", max = 2 }\nlimit_req_status = 429\n",
            // /k/ has its own limit_req (the array replaced), the server's limit_conn.
            "limit_req = { zone = \"key\", burst = 1, delay = 1 }\nlimit_conn = { zone = \"c\", max = 2 }\n\
             limit_req_status = 429\nlimit_conn_status = 503\n",
            // /n/: the first of its two.
            "limit_req = { zone = \"key\" }\n",
        ] {
            assert!(i.toml.contains(want), "{want:?} missing from:\n{}", i.toml);
        }
        assert_eq!(notes(&i), ["13: limit_req: one limit_req per route: the level's first is mapped"]);
    }

    #[test]
    fn keys_and_parameters_that_do_not_map_are_noted() {
        let i = import(
            "limit_req_zone $cookie_sid zone=s:1m rate=1r/s;\n\
             limit_conn_zone $binary_remote_addr zone=c:1m;\n\
             limit_req_zone $remote_addr zone=ok:1m rate=1r/s sync;\n\
             limit_req_dry_run on;\n\
             server {\n listen 127.0.0.1:8080;\n\
              location /s/ { limit_req zone=s; proxy_pass http://127.0.0.1:1; }\n\
              location /c/ { limit_conn c x; limit_req_status 200; proxy_pass http://127.0.0.1:1; }\n\
             }",
        );
        let got = notes(&i);
        assert!(got[0].starts_with("2: limit_req_zone: the key \"$cookie_sid\""), "{got:#?}");
        assert!(
            got.iter().any(|n| n.starts_with("4: limit_req_zone: `sync` has no counterpart")),
            "{got:#?}"
        );
        assert!(got.iter().any(|n| n.starts_with("5: limit_req_dry_run: dry runs")), "{got:#?}");
        assert!(got
            .iter()
            .any(|n| n.starts_with("8: limit_req: its zone \"s\" is not a limit_req_zone that maps")));
        assert!(got.iter().any(|n| n == "9: limit_conn: limit_conn's number is not one"), "{got:#?}");
        assert!(got.iter().any(|n| n == "9: limit_req_status: a status from 400 to 599 was expected"));
        assert!(!i.toml.contains("limit_req =") && !i.toml.contains("limit_conn ="), "{}", i.toml);
        crate::conf::parse_server(std::path::Path::new("imported.toml"), &i.toml).unwrap();
    }
}
