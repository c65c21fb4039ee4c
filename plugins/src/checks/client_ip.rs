//! Who the client is, network-wise: the socket's peer, or, when that peer is a proxy the conf
//! trusts (a load balancer in front of the gateway), the address that proxy reported in
//! `X-Forwarded-For`. Like Nginx's `set_real_ip_from` with `real_ip_recursive on`: walk the list
//! from the right, skipping trusted hops; the first untrusted address is the client. Every
//! `X-Forwarded-For` line counts, read as one list joined in order (as the realip module does). A client
//! cannot choose its own address by sending the header: from an untrusted peer it is ignored.
//!
//! The same rules build the headers sent upstream (shop routes and the order writer alike):
//! `X-Forwarded-For` (the trusted chain plus the peer), `X-Real-IP` (the client) and
//! `X-Forwarded-Proto`.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

/// `X-Forwarded-For`: the client address behind a trusted proxy.
pub const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The networks whose `X-Forwarded-For` is believed. Empty: nobody's (the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Trusts `nets`.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self(nets)
    }

    /// Whether `ip` is one of the trusted proxies.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        let ip = canonical(*ip);
        self.0.iter().any(|net| net.contains(&ip))
    }
}

/// An IPv4 address that came in as IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The `X-Forwarded-For` lines of a request, in the order received. A proxy may add its own
/// line rather than extend the last one (HAProxy's `option forwardfor` does): the lines are one
/// list, read as if joined with commas, as Nginx's realip module reads them.
pub fn forwarded_lines(headers: &HeaderMap) -> impl DoubleEndedIterator<Item = &[u8]> {
    headers.get_all(X_FORWARDED_FOR).into_iter().map(|v| v.as_bytes())
}

/// The client's address: `peer`, or, while the hop at hand is trusted, the next address to the
/// left in the `X-Forwarded-For` list (every line, see [`forwarded_lines`]). Stops at an entry
/// that is not an IP address (a trusted hop passed garbage on: the hop itself is the best we
/// know). `None` when the peer is unknown (a Unix socket).
pub fn client_ip<'a>(
    peer: Option<IpAddr>,
    lines: impl DoubleEndedIterator<Item = &'a [u8]>,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let mut client = canonical(peer?);
    for line in lines.rev() {
        let Ok(line) = std::str::from_utf8(line) else {
            break;
        };
        // Empty entries (a blank line, `a, , b`) are skipped, as Nginx skips them.
        for entry in line.rsplit(',').map(str::trim).filter(|e| !e.is_empty()) {
            if !trusted.contains(&client) {
                return Some(client);
            }
            match entry.parse::<IpAddr>() {
                Ok(ip) => client = canonical(ip),
                Err(_) => return Some(client),
            }
        }
    }
    Some(client)
}

/// The `X-Forwarded-For` value to send upstream: the incoming list (every line, joined) when the
/// peer is trusted (a client's own copy is dropped), then the peer.
pub fn forwarded_for<'a>(
    peer: IpAddr,
    lines: impl Iterator<Item = &'a [u8]>,
    trusted: &TrustedProxies,
) -> String {
    let peer = canonical(peer);
    let mut out = String::new();
    if trusted.contains(&peer) {
        for line in lines.filter_map(|v| std::str::from_utf8(v).ok()).map(str::trim).filter(|s| !s.is_empty())
        {
            out.push_str(line);
            out.push_str(", ");
        }
    }
    out.push_str(&peer.to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn lb() -> TrustedProxies {
        TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap(), "2001:db8::/32".parse().unwrap()])
    }

    /// `X-Forwarded-For` lines as a request carries them.
    fn xff<'a>(lines: &'a [&'a [u8]]) -> impl DoubleEndedIterator<Item = &'a [u8]> + 'a {
        lines.iter().copied()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let claim: &[&[u8]] = &[b"203.0.113.9"];
        assert_eq!(client_ip(Some(ip("198.51.100.4")), xff(claim), &lb()), Some(ip("198.51.100.4")));
        assert_eq!(
            client_ip(Some(ip("10.1.2.3")), xff(claim), &TrustedProxies::default()),
            Some(ip("10.1.2.3"))
        );
        assert_eq!(forwarded_for(ip("198.51.100.4"), xff(claim), &lb()), "198.51.100.4");
        assert_eq!(client_ip(None, xff(claim), &lb()), None);
    }

    #[test]
    fn trusted_hops_are_walked_from_the_right() {
        // A client spoofing 1.1.1.1, then the real client, then two load balancers.
        let chain: &[&[u8]] = &[b"1.1.1.1, 203.0.113.9, 10.0.0.7"];
        assert_eq!(client_ip(Some(ip("10.0.0.1")), xff(chain), &lb()), Some(ip("203.0.113.9")));
        assert_eq!(
            forwarded_for(ip("10.0.0.1"), xff(chain), &lb()),
            "1.1.1.1, 203.0.113.9, 10.0.0.7, 10.0.0.1"
        );
        // Every hop trusted: the leftmost address is all we know.
        assert_eq!(client_ip(Some(ip("10.0.0.1")), xff(&[b"10.9.9.9"]), &lb()), Some(ip("10.9.9.9")));
        // No header from a trusted peer: the peer itself.
        assert_eq!(client_ip(Some(ip("10.0.0.1")), xff(&[]), &lb()), Some(ip("10.0.0.1")));
        assert_eq!(forwarded_for(ip("10.0.0.1"), xff(&[]), &lb()), "10.0.0.1");
    }

    #[test]
    fn every_line_counts_as_one_list() {
        // A client's forged line, then the line its trusted proxy added (HAProxy's
        // `option forwardfor`): the proxy's line names the client, not the forged one.
        let lines: &[&[u8]] = &[b"1.1.1.1", b"203.0.113.9"];
        assert_eq!(client_ip(Some(ip("10.0.0.1")), xff(lines), &lb()), Some(ip("203.0.113.9")));
        assert_eq!(forwarded_for(ip("10.0.0.1"), xff(lines), &lb()), "1.1.1.1, 203.0.113.9, 10.0.0.1");
        // Trusted hops span lines: the walk goes on into the line before.
        let lines: &[&[u8]] = &[b"1.1.1.1, 203.0.113.9", b"10.0.0.7", b" "];
        assert_eq!(client_ip(Some(ip("10.0.0.1")), xff(lines), &lb()), Some(ip("203.0.113.9")));
        assert_eq!(
            forwarded_for(ip("10.0.0.1"), xff(lines), &lb()),
            "1.1.1.1, 203.0.113.9, 10.0.0.7, 10.0.0.1"
        );
        // Read from a request's headers, in order.
        let mut headers = HeaderMap::new();
        headers.append(X_FORWARDED_FOR, "1.1.1.1".parse().unwrap());
        headers.append(X_FORWARDED_FOR, "203.0.113.9".parse().unwrap());
        assert_eq!(
            client_ip(Some(ip("10.0.0.1")), forwarded_lines(&headers), &lb()),
            Some(ip("203.0.113.9"))
        );
    }

    #[test]
    fn garbage_stops_the_walk_and_v4_mapped_peers_match_v4_nets() {
        assert_eq!(
            client_ip(Some(ip("10.0.0.1")), xff(&[b"unknown, 10.0.0.9"]), &lb()),
            Some(ip("10.0.0.9"))
        );
        assert_eq!(client_ip(Some(ip("10.0.0.1")), xff(&[b"\xff\xfe"]), &lb()), Some(ip("10.0.0.1")));
        assert_eq!(
            client_ip(Some(ip("::ffff:10.0.0.1")), xff(&[b"203.0.113.9"]), &lb()),
            Some(ip("203.0.113.9"))
        );
        assert_eq!(
            client_ip(Some(ip("2001:db8::1")), xff(&[b"2001:db8:1::5, 2a00::1"]), &lb()),
            Some(ip("2a00::1"))
        );
    }
}
