//! Who the client is, network-wise: the socket's peer, or, when that peer is a proxy the conf
//! trusts (a load balancer in front of the gateway), the address that proxy reported in
//! `X-Forwarded-For`. Like Nginx's `set_real_ip_from` with `real_ip_recursive on`: walk the list
//! from the right, skipping trusted hops; the first untrusted address is the client. A client
//! cannot choose its own address by sending the header: from an untrusted peer it is ignored.
//!
//! The same rules build the headers sent upstream (shop routes and the order writer alike):
//! `X-Forwarded-For` (the trusted chain plus the peer), `X-Real-IP` (the client) and
//! `X-Forwarded-Proto`.

use std::net::IpAddr;

use ipnet::IpNet;

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

/// The client's address: `peer`, or, while the hop at hand is trusted, the next address to the
/// left in `x_forwarded_for`. Stops at an entry that is not an IP address (a trusted hop passed
/// garbage on: the hop itself is the best we know). `None` when the peer is unknown (a Unix
/// socket).
pub fn client_ip(
    peer: Option<IpAddr>,
    x_forwarded_for: Option<&[u8]>,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let mut client = canonical(peer?);
    let Some(list) = x_forwarded_for.and_then(|v| std::str::from_utf8(v).ok()) else {
        return Some(client);
    };
    for entry in list.rsplit(',') {
        if !trusted.contains(&client) {
            break;
        }
        match entry.trim().parse::<IpAddr>() {
            Ok(ip) => client = canonical(ip),
            Err(_) => break,
        }
    }
    Some(client)
}

/// The `X-Forwarded-For` value to send upstream: the incoming chain when the peer is trusted
/// (a client's own copy is dropped), then the peer.
pub fn forwarded_for(peer: IpAddr, x_forwarded_for: Option<&[u8]>, trusted: &TrustedProxies) -> String {
    let peer = canonical(peer);
    let chain = x_forwarded_for
        .filter(|_| trusted.contains(&peer))
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
        .filter(|s| !s.is_empty());
    match chain {
        Some(chain) => format!("{chain}, {peer}"),
        None => peer.to_string(),
    }
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

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let xff = Some(&b"203.0.113.9"[..]);
        assert_eq!(client_ip(Some(ip("198.51.100.4")), xff, &lb()), Some(ip("198.51.100.4")));
        assert_eq!(client_ip(Some(ip("10.1.2.3")), xff, &TrustedProxies::default()), Some(ip("10.1.2.3")));
        assert_eq!(forwarded_for(ip("198.51.100.4"), xff, &lb()), "198.51.100.4");
        assert_eq!(client_ip(None, xff, &lb()), None);
    }

    #[test]
    fn trusted_hops_are_walked_from_the_right() {
        // A client spoofing 1.1.1.1, then the real client, then two load balancers.
        let xff = Some(&b"1.1.1.1, 203.0.113.9, 10.0.0.7"[..]);
        assert_eq!(client_ip(Some(ip("10.0.0.1")), xff, &lb()), Some(ip("203.0.113.9")));
        assert_eq!(forwarded_for(ip("10.0.0.1"), xff, &lb()), "1.1.1.1, 203.0.113.9, 10.0.0.7, 10.0.0.1");
        // Every hop trusted: the leftmost address is all we know.
        assert_eq!(client_ip(Some(ip("10.0.0.1")), Some(b"10.9.9.9"), &lb()), Some(ip("10.9.9.9")));
        // No header from a trusted peer: the peer itself.
        assert_eq!(client_ip(Some(ip("10.0.0.1")), None, &lb()), Some(ip("10.0.0.1")));
        assert_eq!(forwarded_for(ip("10.0.0.1"), None, &lb()), "10.0.0.1");
    }

    #[test]
    fn garbage_stops_the_walk_and_v4_mapped_peers_match_v4_nets() {
        assert_eq!(client_ip(Some(ip("10.0.0.1")), Some(b"unknown, 10.0.0.9"), &lb()), Some(ip("10.0.0.9")));
        assert_eq!(client_ip(Some(ip("10.0.0.1")), Some(b"\xff\xfe"), &lb()), Some(ip("10.0.0.1")));
        assert_eq!(
            client_ip(Some(ip("::ffff:10.0.0.1")), Some(b"203.0.113.9"), &lb()),
            Some(ip("203.0.113.9"))
        );
        assert_eq!(
            client_ip(Some(ip("2001:db8::1")), Some(b"2001:db8:1::5, 2a00::1"), &lb()),
            Some(ip("2a00::1"))
        );
    }
}
