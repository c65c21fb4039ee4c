//! A pool's addresses and balancing, as Nginx's `upstream` block writes them: each `upstreams`
//! entry is a `server` line (`ADDR [weight=N] [max_fails=N] [fail_timeout=TIME]`, the address an
//! IP or a name, with its port), and `balance` is the block's method (round robin by default,
//! `least_conn`, `ip_hash`, `hash $remote_addr`, `hash $http_NAME`, `hash $cookie_NAME`).

use std::sync::Arc;
use std::time::Duration;

use protocol::conf::ConfError;

use super::{Checker, RawRoute, S};

/// HTTPS to a pool's addresses (Nginx's `proxy_pass https://` with `proxy_ssl_server_name on`,
/// `proxy_ssl_name`, `proxy_ssl_trusted_certificate` and `proxy_ssl_verify`).
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// The name sent as SNI and checked against the certificate (default: the first address's
    /// name; none for an IP).
    pub sni: String,
    /// The certificates (DER) that may sign the upstream's; `None`: the system's roots.
    pub ca: Option<Arc<Vec<Vec<u8>>>>,
    /// Whether the certificate is checked (default true; Nginx's default is off).
    pub verify: bool,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ca = self.ca.as_ref().map(|c| c.len());
        f.debug_struct("UpstreamTls")
            .field("sni", &self.sni)
            .field("ca_certificates", &ca)
            .field("verify", &self.verify)
            .finish()
    }
}

/// A route's `upstream_tls`, `upstream_sni`, `upstream_ca_file` (relative to the server file,
/// read at load) and `upstream_verify`; `None` without `upstream_tls = true`.
pub(super) fn tls(
    c: &Checker<'_>,
    prefix: &str,
    r: &RawRoute,
    servers: &[Server],
) -> Result<Option<UpstreamTls>, ConfError> {
    let f = |name: &str| format!("{prefix}.{name}");
    if !r.upstream_tls.as_ref().is_some_and(|t| *t.get_ref()) {
        let stray = [
            ("upstream_sni", r.upstream_sni.as_ref().map(|v| v.span())),
            ("upstream_ca_file", r.upstream_ca_file.as_ref().map(|v| v.span())),
            ("upstream_verify", r.upstream_verify.as_ref().map(|v| v.span())),
        ];
        if let Some((name, Some(span))) = stray.into_iter().find(|(_, s)| s.is_some()) {
            return Err(c.err(span, &f(name), "needs `upstream_tls = true`"));
        }
        return Ok(None);
    }
    let first = servers.first().map(|s| s.host.clone()).unwrap_or_default();
    let sni = match &r.upstream_sni {
        Some(v)
            if v.get_ref().is_empty()
                || v.get_ref().contains(|ch: char| ch.is_whitespace() || ch == '/' || ch == ':') =>
        {
            return Err(c.err(v.span(), &f("upstream_sni"), "a host name"))
        }
        Some(v) => v.get_ref().to_ascii_lowercase(),
        None if first.parse::<std::net::IpAddr>().is_ok() => String::new(),
        None => first,
    };
    let ca = match &r.upstream_ca_file {
        Some(v) => Some(Arc::new(
            ca_file(&c.base().join(v.get_ref()))
                .map_err(|why| c.err(v.span(), &f("upstream_ca_file"), why))?,
        )),
        None => None,
    };
    Ok(Some(UpstreamTls { sni, ca, verify: r.upstream_verify.as_ref().is_none_or(|v| *v.get_ref()) }))
}

/// The PEM certificates of `path`, as DER: at least one.
fn ca_file(path: &std::path::Path) -> Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::pem::PemObject;
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    for der in &certs {
        x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("{}: a certificate that does not parse: {e}", path.display()))?;
    }
    Ok(certs)
}

/// One address of a pool (Nginx's `server` line in an `upstream` block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// An IP address or a DNS name (resolved when the pool is built, and again every
    /// `resolve_interval_ms`; every address it has is a server of the same weight).
    pub host: String,
    /// The port.
    pub port: u16,
    /// Its share of the requests against the others' (Nginx's `weight`, default 1).
    pub weight: usize,
    /// Failed connections within `fail_timeout` that set it aside for `fail_timeout` (Nginx's
    /// `max_fails`, default 1; 0: never set aside). A pool of one address never sets it aside.
    pub max_fails: u32,
    /// Nginx's `fail_timeout` (default 10 s).
    pub fail_timeout: Duration,
}

impl Server {
    /// `host:port` (`[v6]:port`), as a name to resolve.
    pub fn authority(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// How a pool picks the address of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Balance {
    /// Weighted round robin over the addresses in service (Nginx's default).
    #[default]
    RoundRobin,
    /// The address with the fewest requests in flight for its weight (`least_conn`).
    LeastConn,
    /// Consistent hashing (ketama) of a key: the same key goes to the same address while it is
    /// in service (`hash KEY consistent`; `ip_hash` is the client's address).
    Hash(HashKey),
}

/// What a hashing pool hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client's address (`[server] trusted_proxies` decide it): `$remote_addr`, `ip_hash`.
    ClientIp,
    /// A request header's value (`$http_x_user`: `x-user`); none: an empty key.
    Header(String),
    /// A cookie's value (`$cookie_sid`: `sid`); none: an empty key.
    Cookie(String),
}

/// The `upstreams` entries of `field`: at least one.
pub(super) fn servers(
    c: &Checker<'_>,
    list: &S<Vec<S<String>>>,
    field: &str,
) -> Result<Vec<Server>, ConfError> {
    if list.get_ref().is_empty() {
        return Err(c.err(list.span(), field, "must list at least one address"));
    }
    list.get_ref().iter().map(|e| server(e.get_ref()).map_err(|why| c.err(e.span(), field, why))).collect()
}

/// One entry: `ADDR[:PORT] [weight=N] [max_fails=N] [fail_timeout=TIME]`.
fn server(entry: &str) -> Result<Server, String> {
    let mut words = entry.split_whitespace();
    let addr = words.next().ok_or("an empty address")?;
    let (host, port) = host_port(addr)?;
    let mut s = Server { host, port, weight: 1, max_fails: 1, fail_timeout: Duration::from_secs(10) };
    for w in words {
        let (k, v) =
            w.split_once('=').ok_or_else(|| format!("`{w}`: weight=N, max_fails=N or fail_timeout=TIME"))?;
        let int = |max: u64| v.parse::<u64>().ok().filter(|n| *n <= max).ok_or(format!("`{w}`: 0 to {max}"));
        match k {
            "weight" => s.weight = int(1000)?.max(1) as usize,
            "max_fails" => s.max_fails = int(1000)? as u32,
            "fail_timeout" => {
                s.fail_timeout = time(v).ok_or(format!("`{w}`: a time as Nginx writes it (10s, 1m)"))?
            }
            _ => {
                return Err(format!(
                    "`{k}`: weight, max_fails or fail_timeout (backup, down, slow_start are not built)"
                ))
            }
        }
    }
    Ok(s)
}

/// `127.0.0.1:80`, `[::1]:80`, `shop.internal:8080`: a port is required (Nginx's default 80
/// is not assumed: a pool's port is always written).
fn host_port(addr: &str) -> Result<(String, u16), String> {
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return Ok((sa.ip().to_string(), sa.port()));
    }
    let (host, port) =
        addr.rsplit_once(':').ok_or_else(|| format!("{addr:?}: HOST:PORT (an IP or a name, and a port)"))?;
    let port = port.parse::<u16>().map_err(|_| format!("{addr:?}: the port is a number up to 65535"))?;
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !name_ok {
        return Err(format!("{addr:?}: {host:?} is neither an IP address nor a DNS name"));
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// An Nginx time: `10`, `10s`, `500ms`, `1m`, `1h`.
fn time(v: &str) -> Option<Duration> {
    nginx_ms(v).map(|ms| Duration::from_millis(ms as u64))
}

/// An Nginx time (`60`, `60s`, `500ms`, `1m`, `1h`) in milliseconds; `None` for another unit or
/// a number too large. The one reading of Nginx's times: `gateway import-nginx` reads them too.
pub(crate) fn nginx_ms(v: &str) -> Option<i64> {
    let (n, unit) = v.find(|ch: char| !ch.is_ascii_digit()).map_or((v, ""), |i| v.split_at(i));
    let n: i64 = n.parse().ok()?;
    let per = match unit {
        "ms" => 1,
        "" | "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(per)
}

/// `balance`: `round_robin` (default), `least_conn`, `ip_hash`, `hash $remote_addr`,
/// `hash $http_NAME`, `hash $cookie_NAME` (Nginx's `consistent` is implied: ketama).
pub(super) fn balance(c: &Checker<'_>, v: Option<&S<String>>, field: &str) -> Result<Balance, ConfError> {
    let Some(v) = v else { return Ok(Balance::RoundRobin) };
    let text = v.get_ref().trim();
    let key = text.strip_prefix("hash").map(|k| k.trim().trim_end_matches(" consistent").trim());
    let parsed = match (text, key) {
        ("round_robin", _) => Some(Balance::RoundRobin),
        ("least_conn", _) => Some(Balance::LeastConn),
        ("ip_hash", _) => Some(Balance::Hash(HashKey::ClientIp)),
        (_, Some("$remote_addr" | "$binary_remote_addr")) => Some(Balance::Hash(HashKey::ClientIp)),
        (_, Some(k)) => hash_key(k).map(Balance::Hash),
        _ => None,
    };
    parsed.ok_or_else(|| {
        c.err(
            v.span(),
            field,
            format!("{text:?}: round_robin, least_conn, ip_hash, or hash $remote_addr / $http_NAME / $cookie_NAME"),
        )
    })
}

fn hash_key(k: &str) -> Option<HashKey> {
    let valid =
        |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if let Some(h) = k.strip_prefix("$http_").filter(|n| valid(n)) {
        return Some(HashKey::Header(h.replace('_', "-").to_ascii_lowercase()));
    }
    k.strip_prefix("$cookie_").filter(|n| valid(n)).map(|n| HashKey::Cookie(n.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lines_as_nginx_writes_them() {
        let s = server("10.0.0.1:80 weight=3 max_fails=2 fail_timeout=30s").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.weight, s.max_fails), ("10.0.0.1", 80, 3, 2));
        assert_eq!(s.fail_timeout, Duration::from_secs(30));
        let s = server("Shop-App.internal:8080").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.weight, s.max_fails), ("shop-app.internal", 8080, 1, 1));
        assert_eq!(s.fail_timeout, Duration::from_secs(10), "Nginx's defaults");
        assert_eq!(server("[::1]:81").unwrap().authority(), "[::1]:81");
        assert!(server("shop.internal").unwrap_err().contains("HOST:PORT"));
        assert!(server("bad_name:80").unwrap_err().contains("neither"));
        assert!(server("1.2.3.4:99999").unwrap_err().contains("port"));
        assert!(server("1.2.3.4:80 backup").unwrap_err().contains("weight=N"));
        assert!(server("1.2.3.4:80 slow_start=1").unwrap_err().contains("not built"));
        assert!(server("1.2.3.4:80 weight=x").unwrap_err().contains("0 to 1000"));
        assert!(server("1.2.3.4:80 fail_timeout=1d").unwrap_err().contains("a time"));
    }

    #[test]
    fn nginx_times() {
        assert_eq!(nginx_ms("60"), Some(60_000));
        assert_eq!(nginx_ms("500ms"), Some(500));
        assert_eq!(nginx_ms("2m"), Some(120_000));
        assert_eq!(nginx_ms("1d"), None);
        assert_eq!(nginx_ms("9999999999999999h"), None, "too large: refused, not wrapped");
        assert_eq!(time("1h"), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn balance_methods() {
        let text = "k = \"x\"";
        let c = Checker::new(std::path::Path::new("t.toml"), text);
        let b = |v: &str| balance(&c, Some(&S::new(4..7, v.to_string())), "route[0].balance");
        assert_eq!(b("least_conn").unwrap(), Balance::LeastConn);
        assert_eq!(b("ip_hash").unwrap(), Balance::Hash(HashKey::ClientIp));
        assert_eq!(b("hash $remote_addr consistent").unwrap(), Balance::Hash(HashKey::ClientIp));
        assert_eq!(b("hash $http_x_user").unwrap(), Balance::Hash(HashKey::Header("x-user".into())));
        assert_eq!(b("hash $cookie_sid").unwrap(), Balance::Hash(HashKey::Cookie("sid".into())));
        assert!(b("hash $request_uri").unwrap_err().to_string().contains("round_robin, least_conn"));
        assert!(b("random").is_err());
        assert_eq!(balance(&c, None, "f").unwrap(), Balance::RoundRobin);
    }
}
