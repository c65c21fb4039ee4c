//! `[[limit_req_zone]]`, `[[limit_conn_zone]]` and a route's `limit_req`, `limit_conn`,
//! `limit_req_status`, `limit_conn_status`: Nginx's per-location request-rate and connection
//! limits ([`crate::route_limits`]), checked at load.

use std::collections::HashMap;

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{Checker, RawRoute, RouteConf, S};

/// What a zone counts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// The client's address (`$remote_addr`, `$binary_remote_addr`): the peer, or what a
    /// trusted proxy says (`[server] trusted_proxies`).
    RemoteAddr,
    /// A request header's value (`$http_x_api_key`); a request without it is not limited.
    Header(http::HeaderName),
    /// The route's first host name (`$server_name`); a route without host is not limited.
    ServerName,
}

/// A `[[limit_req_zone]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqZoneConf {
    /// Its name, for routes.
    pub name: String,
    /// What it counts by.
    pub key: LimitKey,
    /// Milli-requests per second, Nginx's integer (`5r/s` → 5000, `1r/m` → 16).
    pub rate: u64,
    /// Keys kept at most (the least recent forgotten past it).
    pub max_keys: usize,
}

/// A `[[limit_conn_zone]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnZoneConf {
    /// Its name, for routes.
    pub name: String,
    /// What it counts by.
    pub key: LimitKey,
    /// Keys with requests in flight at most (a new one past it is rejected).
    pub max_keys: usize,
}

/// A route's `limit_req`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitReq {
    /// The zone's index in `ServerConf::limit_req_zones`.
    pub zone: usize,
    /// Requests past the rate allowed, in milli-requests (`burst * 1000`).
    pub burst: u64,
    /// Requests of the burst passed at once, in milli-requests (`nodelay`: `u64::MAX`).
    pub delay: u64,
    /// The answer's status when rejected (Nginx's default 503).
    pub status: u16,
}

/// A route's `limit_conn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConn {
    /// The zone's index in `ServerConf::limit_conn_zones`.
    pub zone: usize,
    /// Requests of one key in flight at most.
    pub max: u32,
    /// The answer's status when rejected (Nginx's default 503).
    pub status: u16,
}

/// Nginx's default status of both (429 is the usual choice; kept for parity).
pub const DEFAULT_STATUS: u16 = 503;
/// Keys of a zone by default: Nginx's `10m` at its 64-byte states (16,384 a megabyte).
pub const DEFAULT_MAX_KEYS: i64 = 10 * 16_384;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReqZone {
    name: S<String>,
    key: S<String>,
    rate: S<String>,
    #[serde(default)]
    max_keys: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConnZone {
    name: S<String>,
    key: S<String>,
    #[serde(default)]
    max_keys: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimitReq {
    zone: S<String>,
    #[serde(default)]
    burst: Option<S<i64>>,
    #[serde(default)]
    nodelay: Option<S<bool>>,
    #[serde(default)]
    delay: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimitConn {
    zone: S<String>,
    max: S<i64>,
}

fn key(c: &Checker<'_>, v: &S<String>, field: &str) -> Result<LimitKey, ConfError> {
    match v.get_ref().as_str() {
        "$remote_addr" | "$binary_remote_addr" => Ok(LimitKey::RemoteAddr),
        "$server_name" => Ok(LimitKey::ServerName),
        k => match k.strip_prefix("$http_").map(|h| http::HeaderName::try_from(h.replace('_', "-"))) {
            Some(Ok(name)) => Ok(LimitKey::Header(name)),
            _ => Err(c.err(
                v.span(),
                field,
                format!(
                    "{k:?}: the key is \"$remote_addr\" (or \"$binary_remote_addr\"), \"$http_<name>\" or \
                     \"$server_name\""
                ),
            )),
        },
    }
}

/// `5r/s`, `30r/m` → milli-requests per second as Nginx computes it (`n * 1000 / 60` per minute).
fn rate(c: &Checker<'_>, v: &S<String>, field: &str) -> Result<u64, ConfError> {
    let text = v.get_ref();
    let parsed = text
        .strip_suffix("r/s")
        .map(|n| (n, 1))
        .or_else(|| text.strip_suffix("r/m").map(|n| (n, 60)))
        .and_then(|(n, scale)| Some((n.parse::<u64>().ok()?, scale)));
    match parsed {
        Some((n, scale)) if (1..=1_000_000).contains(&n) => Ok(n * 1000 / scale),
        _ => Err(c.err(
            v.span(),
            field,
            format!("{text:?}: a rate is N r/s or N r/m, N from 1 to 1000000 (\"5r/s\", \"30r/m\")"),
        )),
    }
}

fn max_keys(c: &Checker<'_>, v: &Option<S<i64>>, field: &str) -> Result<usize, ConfError> {
    match v {
        Some(v) => c.int(v, field, 1, 16_777_216),
        None => Ok(DEFAULT_MAX_KEYS as usize),
    }
}

/// The name of a zone, not empty and not given twice.
fn name(
    c: &Checker<'_>,
    v: &S<String>,
    field: &str,
    seen: &mut HashMap<String, usize>,
    i: usize,
) -> Result<String, ConfError> {
    let n = v.get_ref().trim();
    if n.is_empty() {
        return Err(c.err(v.span(), field, "must not be empty"));
    }
    if let Some(first) = seen.insert(n.to_string(), i) {
        return Err(c.err(v.span(), field, format!("{n:?} is the name of zone [{first}] already")));
    }
    Ok(n.to_string())
}

/// The `[[limit_req_zone]]`s.
pub(super) fn req_zones(c: &Checker<'_>, raw: &[RawReqZone]) -> Result<Vec<ReqZoneConf>, ConfError> {
    let mut seen = HashMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, z) in raw.iter().enumerate() {
        let f = |n: &str| format!("limit_req_zone[{i}].{n}");
        out.push(ReqZoneConf {
            name: name(c, &z.name, &f("name"), &mut seen, i)?,
            key: key(c, &z.key, &f("key"))?,
            rate: rate(c, &z.rate, &f("rate"))?,
            max_keys: max_keys(c, &z.max_keys, &f("max_keys"))?,
        });
    }
    Ok(out)
}

/// The `[[limit_conn_zone]]`s.
pub(super) fn conn_zones(c: &Checker<'_>, raw: &[RawConnZone]) -> Result<Vec<ConnZoneConf>, ConfError> {
    let mut seen = HashMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, z) in raw.iter().enumerate() {
        let f = |n: &str| format!("limit_conn_zone[{i}].{n}");
        out.push(ConnZoneConf {
            name: name(c, &z.name, &f("name"), &mut seen, i)?,
            key: key(c, &z.key, &f("key"))?,
            max_keys: max_keys(c, &z.max_keys, &f("max_keys"))?,
        });
    }
    Ok(out)
}

/// The index of the zone a route names.
fn zone(c: &Checker<'_>, v: &S<String>, field: &str, names: &[&str], what: &str) -> Result<usize, ConfError> {
    names.iter().position(|n| n == v.get_ref()).ok_or_else(|| {
        c.err(v.span(), field, format!("no [[{what}]] named {:?} (known: {})", v.get_ref(), names.join(", ")))
    })
}

/// A status of `limit_req_status` / `limit_conn_status` (Nginx's range, 400 to 599).
fn status(c: &Checker<'_>, v: &Option<S<i64>>, field: &str) -> Result<u16, ConfError> {
    match v {
        Some(v) => Ok(c.int(v, field, 400, 599)? as u16),
        None => Ok(DEFAULT_STATUS),
    }
}

fn limit_req(c: &Checker<'_>, p: &str, r: &RawRoute, names: &[&str]) -> Result<Option<LimitReq>, ConfError> {
    let status = status(c, &r.limit_req_status, &format!("{p}.limit_req_status"))?;
    let Some(l) = &r.limit_req else { return Ok(None) };
    let f = |n: &str| format!("{p}.limit_req.{n}");
    let zone = zone(c, &l.zone, &f("zone"), names, "limit_req_zone")?;
    let burst = match &l.burst {
        Some(b) => c.int(b, &f("burst"), 0, 1_000_000)? as u64 * 1000,
        None => 0,
    };
    let delay = match (&l.nodelay, &l.delay) {
        (Some(_), Some(d)) => {
            return Err(c.err(d.span(), &f("delay"), "give `nodelay` or `delay`, not both"))
        }
        (Some(n), None) if *n.get_ref() => u64::MAX,
        (_, Some(d)) => c.int(d, &f("delay"), 0, 1_000_000)? as u64 * 1000,
        _ => 0,
    };
    Ok(Some(LimitReq { zone, burst, delay, status }))
}

fn limit_conn(
    c: &Checker<'_>,
    p: &str,
    r: &RawRoute,
    names: &[&str],
) -> Result<Option<LimitConn>, ConfError> {
    let status = status(c, &r.limit_conn_status, &format!("{p}.limit_conn_status"))?;
    let Some(l) = &r.limit_conn else { return Ok(None) };
    let zone = zone(c, &l.zone, &format!("{p}.limit_conn.zone"), names, "limit_conn_zone")?;
    let max = c.int(&l.max, &format!("{p}.limit_conn.max"), 1, 65_535)? as u32;
    Ok(Some(LimitConn { zone, max, status }))
}

/// Each route's limits, against the zones.
pub(super) fn routes(
    c: &Checker<'_>,
    raw: &[RawRoute],
    req: &[ReqZoneConf],
    conn: &[ConnZoneConf],
    routes: &mut [RouteConf],
) -> Result<(), ConfError> {
    let req_names: Vec<&str> = req.iter().map(|z| z.name.as_str()).collect();
    let conn_names: Vec<&str> = conn.iter().map(|z| z.name.as_str()).collect();
    for (i, (r, route)) in raw.iter().zip(routes.iter_mut()).enumerate() {
        let p = format!("route[{i}]");
        route.limit_req = limit_req(c, &p, r, &req_names)?;
        route.limit_conn = limit_conn(c, &p, r, &conn_names)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse_server;
    use super::*;
    use std::path::Path;

    const ZONES: &str = "[server]\nlisten = \"127.0.0.1:8080\"\n\
        [[limit_req_zone]]\nname = \"ip\"\nkey = \"$binary_remote_addr\"\nrate = \"1r/m\"\n\
        [[limit_req_zone]]\nname = \"api\"\nkey = \"$http_x_api_key\"\nrate = \"5r/s\"\nmax_keys = 100\n\
        [[limit_conn_zone]]\nname = \"c\"\nkey = \"$remote_addr\"\n";
    // Lines: 1 [server], 2 listen, 3-6 zone ip, 7-11 zone api, 12-14 conn zone c, 15 [[route]]…

    fn route(extra: &str) -> String {
        format!("{ZONES}[[route]]\nname = \"r\"\npath = \"/\"\nupstreams = [\"127.0.0.1:1\"]\n{extra}\n")
    }

    fn refused(text: &str, line: usize, field: &str, words: &str) {
        let got = parse_server(Path::new("conf/server.toml"), text);
        protocol::conf::assert_refused(got, "conf/server.toml", line, field, words);
    }

    #[test]
    fn zones_and_route_limits_read_as_nginx_means_them() {
        let text = route(
            "limit_req = { zone = \"api\", burst = 10, nodelay = true }\nlimit_req_status = 429\n\
             limit_conn = { zone = \"c\", max = 2 }",
        );
        let c = parse_server(Path::new("s.toml"), &text).unwrap();
        assert_eq!(c.limit_req_zones[0].rate, 16, "1r/m as Nginx's integer");
        assert_eq!(c.limit_req_zones[0].max_keys, 163_840, "10m of 64-byte states");
        assert_eq!(c.limit_req_zones[1].key, LimitKey::Header(http::HeaderName::from_static("x-api-key")));
        assert_eq!((c.limit_req_zones[1].rate, c.limit_req_zones[1].max_keys), (5000, 100));
        let r = &c.routes[0];
        assert_eq!(r.limit_req, Some(LimitReq { zone: 1, burst: 10_000, delay: u64::MAX, status: 429 }));
        assert_eq!(r.limit_conn, Some(LimitConn { zone: 0, max: 2, status: 503 }));
        let d =
            parse_server(Path::new("s.toml"), &route("limit_req = { zone = \"ip\", burst = 4, delay = 2 }"));
        assert_eq!(
            d.unwrap().routes[0].limit_req,
            Some(LimitReq { zone: 0, burst: 4000, delay: 2000, status: 503 })
        );
        let none = parse_server(Path::new("s.toml"), &route("")).unwrap();
        assert_eq!((none.routes[0].limit_req.clone(), none.routes[0].limit_conn.clone()), (None, None));
    }

    #[test]
    fn bad_zones_and_limits_are_refused_at_their_place() {
        refused(
            &route("limit_req = { zone = \"nope\" }"),
            19,
            "route[0].limit_req.zone",
            "no [[limit_req_zone]] named \"nope\"",
        );
        refused(
            &route("limit_conn = { zone = \"ip\", max = 1 }"),
            19,
            "route[0].limit_conn.zone",
            "known: c",
        );
        refused(
            &route("limit_conn = { zone = \"c\", max = 0 }"),
            19,
            "route[0].limit_conn.max",
            "between 1 and 65535",
        );
        refused(
            &route("limit_req = { zone = \"ip\", burst = -1 }"),
            19,
            "route[0].limit_req.burst",
            "between 0",
        );
        refused(
            &route("limit_req = { zone = \"ip\", nodelay = true, delay = 1 }"),
            19,
            "route[0].limit_req.delay",
            "not both",
        );
        refused(&route("limit_req = { zone = \"ip\", brust = 1 }"), 19, "limit_req", "unknown field `brust`");
        refused(&route("limit_req_status = 200"), 19, "route[0].limit_req_status", "between 400 and 599");
        refused(&route("limit_conn_status = 600"), 19, "route[0].limit_conn_status", "between 400 and 599");
        refused(&ZONES.replace("\"1r/m\"", "\"5r/h\""), 6, "limit_req_zone[0].rate", "N r/s or N r/m");
        refused(&ZONES.replace("\"1r/m\"", "\"0r/s\""), 6, "limit_req_zone[0].rate", "N r/s or N r/m");
        refused(
            &ZONES.replace("$http_x_api_key", "$cookie_a"),
            9,
            "limit_req_zone[1].key",
            "\"$http_<name>\"",
        );
        refused(
            &ZONES.replace("max_keys = 100", "max_keys = 0"),
            11,
            "limit_req_zone[1].max_keys",
            "between 1",
        );
        refused(&ZONES.replace("\"api\"", "\"ip\""), 8, "limit_req_zone[1].name", "zone [0] already");
    }
}
