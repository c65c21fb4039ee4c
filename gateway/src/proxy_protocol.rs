//! The PROXY protocol (HAProxy's, versions 1 and 2) on the plain listener (`[server]
//! proxy_protocol = true`, Nginx's `listen ... proxy_protocol` with `real_ip_header
//! proxy_protocol`) and on the HTTPS one (`[tls] proxy_protocol = true`, `listen 443 ssl
//! proxy_protocol`): every connection starts with the header a load balancer writes, and its
//! source address is the client's for the whole connection (the socket's peer is the balancer).
//! A connection without a valid header is closed, as Nginx closes it ("broken header").
//!
//! On the plain listener the address travels with the connection's task ([`CLIENT`]): the
//! front door reads the header and serves the connection's requests within [`CLIENT`]'s scope,
//! and [`crate::frontdoor::peer_ip`] reads it there. On the HTTPS listener the header comes
//! before TLS: [`BeforeTls`] reads it in Pingora's pre-TLS hook and puts the source in the
//! connection's socket digest, where the same function finds it as the peer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt};

tokio::task_local! {
    /// The source address the connection's PROXY header gave (`None`: `LOCAL` or `UNKNOWN`,
    /// the socket's peer stands).
    pub static CLIENT: Option<SocketAddr>;
}

/// The source address of the connection being served, when its PROXY header gave one.
pub fn source() -> Option<IpAddr> {
    CLIENT.try_with(|c| c.map(|a| a.ip())).ok().flatten()
}

/// Reads the PROXY header of a connection to the HTTPS listener before its TLS handshake
/// (`[tls] proxy_protocol`, Pingora's pre-TLS hook): its source becomes the socket's peer in the
/// connection's digest, which every request of the connection reads as its client. A
/// connection without a valid header within `timeout` is closed before any TLS byte is sent.
#[derive(Debug)]
pub struct BeforeTls {
    /// How long the header may take (the front door's `client_header_timeout`).
    pub timeout: std::time::Duration,
}

#[async_trait::async_trait]
impl pingora_core::listeners::PreTlsProcess for BeforeTls {
    async fn process(
        &self,
        stream: &mut pingora_core::protocols::l4::stream::Stream,
    ) -> pingora_core::Result<()> {
        use pingora_core::protocols::{GetSocketDigest, SocketDigest};
        use pingora_core::{Error, ErrorType};
        let source = match tokio::time::timeout(self.timeout, read(stream)).await {
            Ok(Ok(source)) => source,
            Ok(Err(why)) => return Err(Error::explain(ErrorType::ReadError, why)),
            Err(_) => return Err(Error::explain(ErrorType::ReadTimedout, "no PROXY header in time")),
        };
        if let Some(source) = source {
            let digest = SocketDigest::from_raw_fd(std::os::fd::AsRawFd::as_raw_fd(stream));
            let _ = digest.peer_addr.set(Some(pingora_core::protocols::l4::socket::SocketAddr::Inet(source)));
            stream.set_socket_digest(digest);
        }
        Ok(())
    }
}

/// Version 2's first 12 bytes.
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Version 1's longest line, CRLF included (the spec's 107 bytes).
const V1_MAX: usize = 107;

/// Reads a PROXY header (version 1 or 2) off the start of `stream`, exactly (nothing past it is
/// read): the source address, or `None` for `LOCAL`/`UNKNOWN`; `Err` on anything else.
pub async fn read<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Option<SocketAddr>, &'static str> {
    let mut first = [0u8; 1];
    stream.read_exact(&mut first).await.map_err(|_| "closed before a PROXY header")?;
    match first[0] {
        b'P' => {
            let mut line = vec![b'P'];
            while !line.ends_with(b"\r\n") {
                if line.len() >= V1_MAX {
                    return Err("a PROXY v1 line longer than 107 bytes");
                }
                let mut b = [0u8; 1];
                stream.read_exact(&mut b).await.map_err(|_| "closed within a PROXY header")?;
                line.push(b[0]);
            }
            parse_v1(&line)
        }
        b'\r' => {
            let mut head = [0u8; 16];
            head[0] = b'\r';
            stream.read_exact(&mut head[1..]).await.map_err(|_| "closed within a PROXY header")?;
            let len = u16::from_be_bytes([head[14], head[15]]) as usize;
            let mut body = vec![0u8; len];
            stream.read_exact(&mut body).await.map_err(|_| "closed within a PROXY header")?;
            parse_v2(&head, &body)
        }
        _ => Err("no PROXY header"),
    }
}

/// `PROXY TCP4 192.0.2.1 192.0.2.2 56324 443\r\n` (or `TCP6`, or `UNKNOWN ...`).
pub fn parse_v1(line: &[u8]) -> Result<Option<SocketAddr>, &'static str> {
    let text = std::str::from_utf8(line).map_err(|_| "a PROXY v1 line that is not text")?;
    let text = text.strip_suffix("\r\n").ok_or("a PROXY v1 line without its CRLF")?;
    let mut words = text.split(' ');
    if words.next() != Some("PROXY") {
        return Err("a PROXY v1 line without PROXY");
    }
    let family = words.next().ok_or("a PROXY v1 line without a family")?;
    if family == "UNKNOWN" {
        return Ok(None);
    }
    let (src, _dst, sport, _dport) =
        match (words.next(), words.next(), words.next(), words.next(), words.next()) {
            (Some(a), Some(b), Some(c), Some(d), None) => (a, b, c, d),
            _ => return Err("a PROXY v1 line without its four fields"),
        };
    let ip: IpAddr = match family {
        "TCP4" => src.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| "a bad TCP4 source")?,
        "TCP6" => src.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| "a bad TCP6 source")?,
        _ => return Err("a PROXY v1 family other than TCP4, TCP6, UNKNOWN"),
    };
    let port = sport.parse::<u16>().map_err(|_| "a bad source port")?;
    Ok(Some(SocketAddr::new(ip, port)))
}

/// Version 2: the 16-byte head (signature, version and command, family, length) and its body.
pub fn parse_v2(head: &[u8; 16], body: &[u8]) -> Result<Option<SocketAddr>, &'static str> {
    if head[..12] != V2_SIGNATURE {
        return Err("a PROXY v2 header without its signature");
    }
    if head[12] >> 4 != 2 {
        return Err("a PROXY header of another version");
    }
    match head[12] & 0x0f {
        0 => return Ok(None), // LOCAL: the balancer's own connection (a health check)
        1 => {}
        _ => return Err("a PROXY v2 command other than LOCAL or PROXY"),
    }
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    match head[13] {
        0x11 | 0x12 if body.len() >= 12 => {
            let ip = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            Ok(Some(SocketAddr::new(IpAddr::V4(ip), port(&body[8..10]))))
        }
        0x21 | 0x22 if body.len() >= 36 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&body[..16]);
            Ok(Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(octets)), port(&body[32..34]))))
        }
        0x00 => Ok(None), // UNSPEC
        0x11 | 0x12 | 0x21 | 0x22 => Err("a PROXY v2 header shorter than its addresses"),
        _ => Ok(None), // AF_UNIX and the rest: no IP to give, the socket's peer stands
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_lines() {
        let a = parse_v1(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n").unwrap();
        assert_eq!(a, Some("203.0.113.7:5555".parse().unwrap()));
        let a = parse_v1(b"PROXY TCP6 2001:db8::1 ::1 6000 443\r\n").unwrap();
        assert_eq!(a, Some("[2001:db8::1]:6000".parse().unwrap()));
        assert_eq!(parse_v1(b"PROXY UNKNOWN\r\n").unwrap(), None);
        assert_eq!(parse_v1(b"PROXY UNKNOWN ffff::1 ::1 1 2\r\n").unwrap(), None);
        for bad in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"PROXY TCP4 ::1 ::1 1 2\r\n",
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 2\r\n",
            b"GET / HTTP/1.1\r\n",
        ] {
            assert!(parse_v1(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn v2(command: u8, family: u8, body: &[u8]) -> ([u8; 16], Vec<u8>) {
        let mut head = [0u8; 16];
        head[..12].copy_from_slice(&V2_SIGNATURE);
        head[12] = 0x20 | command;
        head[13] = family;
        head[14..].copy_from_slice(&(body.len() as u16).to_be_bytes());
        (head, body.to_vec())
    }

    #[test]
    fn version_2_headers() {
        let body = [203, 0, 113, 7, 127, 0, 0, 1, 0x15, 0xb3, 0, 80];
        let (h, b) = v2(1, 0x11, &body);
        assert_eq!(parse_v2(&h, &b).unwrap(), Some("203.0.113.7:5555".parse().unwrap()));
        let mut six = vec![0u8; 36];
        six[0] = 0x20;
        six[1] = 0x01;
        six[15] = 1;
        six[32..34].copy_from_slice(&6000u16.to_be_bytes());
        let (h, b) = v2(1, 0x21, &six);
        assert_eq!(parse_v2(&h, &b).unwrap(), Some("[2001::1]:6000".parse().unwrap()));
        let (h, b) = v2(0, 0x11, &body);
        assert_eq!(parse_v2(&h, &b).unwrap(), None, "LOCAL: the socket's peer");
        let (h, b) = v2(1, 0x11, &body[..6]);
        assert!(parse_v2(&h, &b).is_err(), "too short");
        let (mut h, b) = v2(1, 0x11, &body);
        h[12] = 0x11;
        assert!(parse_v2(&h, &b).is_err(), "version 1 in a v2 head");
        h[12] = 0x21;
        h[0] = b'x';
        assert!(parse_v2(&h, &b).is_err(), "signature");
    }

    #[tokio::test]
    async fn a_header_is_read_exactly_and_the_request_after_it_stays() {
        let mut input: &[u8] = b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\nGET / HTTP/1.1\r\n";
        let a = read(&mut input).await.unwrap();
        assert_eq!(a, Some("203.0.113.7:5555".parse().unwrap()));
        assert_eq!(input, b"GET / HTTP/1.1\r\n");
        let (h, b) = v2(1, 0x11, &[203, 0, 113, 7, 127, 0, 0, 1, 0x15, 0xb3, 0, 80, 0xEE]);
        let mut bytes = h.to_vec();
        bytes.extend_from_slice(&b);
        bytes.extend_from_slice(b"GET /");
        let mut input: &[u8] = &bytes;
        assert_eq!(read(&mut input).await.unwrap(), Some("203.0.113.7:5555".parse().unwrap()));
        assert_eq!(input, b"GET /", "a TLV byte past the addresses is read as part of the header");
        let mut plain: &[u8] = b"GET / HTTP/1.1\r\n";
        assert!(read(&mut plain).await.is_err());
        let mut long: &[u8] = &[b'P'; 200];
        assert!(read(&mut long).await.is_err());
    }
}
