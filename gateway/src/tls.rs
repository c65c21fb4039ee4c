//! TLS termination with Pingora's rustls support: certificates per host name (SNI), HTTP/2 by
//! ALPN, and the plain-HTTP listener that redirects to HTTPS.
//!
//! Pingora's rustls listener takes one certificate, or a rustls certificate resolver: the
//! gateway's resolver ([`SniResolver`]) picks the certificate from the table of the conf that is
//! active now, so a `SIGHUP` that reloads the conf also reloads the certificates (a bad
//! certificate file refuses the whole reload and the old ones stay). A client without SNI, or
//! with a name no entry lists, gets the first entry's certificate (Nginx's default server).
//! Certificates by ACME (`crate::acme`) are looked up first, by exact name, in a table of their
//! own that changes as they are issued and renewed; without any `[[tls.cert]]`, the first ACME
//! entry's certificate is the default.

use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora_core::apps::http_app::ServeHttp;
use pingora_core::listeners::tls::TlsSettings;
use pingora_core::protocols::http::ServerSession;
use pingora_rustls::sign::CertifiedKey;
use pingora_rustls::{ClientHello, ResolvesServerCert};

use crate::reload::SharedState;

/// The rustls resolver: the active conf's table, looked up per handshake.
#[derive(Debug)]
pub struct SniResolver {
    shared: Arc<SharedState>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name();
        if let Some(pair) = self.shared.acme.pick(sni) {
            return Some(pair);
        }
        let active = self.shared.active();
        let tls = active.server.tls.as_ref()?;
        match tls.certs.table() {
            Some(table) => Some(table.pick(sni)),
            None => self.shared.acme.default_cert(),
        }
    }
}

/// The TLS settings of the HTTPS listener: the SNI resolver, and `h2` then `http/1.1` by ALPN
/// when `http2` is on (else HTTP/1.1 only).
pub fn settings(shared: Arc<SharedState>, http2: bool) -> pingora_core::Result<TlsSettings> {
    pingora_rustls::install_default_crypto_provider();
    let mut settings = TlsSettings::intermediate("", "")?;
    settings.set_cert_resolver(Arc::new(SniResolver { shared }));
    if http2 {
        settings.enable_h2();
    }
    Ok(settings)
}

/// The plain-HTTP listener that sends every request to HTTPS (308, so a POST stays a POST),
/// but answers ACME's HTTP-01 challenges itself.
pub struct Redirect {
    /// The HTTPS listener's port (left out of the location when it is 443).
    pub https_port: u16,
    /// The challenges being answered.
    pub acme: Arc<crate::acme::Live>,
}

/// The answer to an ACME HTTP-01 request: the key authorization, as text.
pub fn challenge_answer(key_auth: String) -> Response<Vec<u8>> {
    Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .header(http::header::CONTENT_LENGTH, key_auth.len())
        .body(key_auth.into_bytes())
        .unwrap_or_default()
}

/// Where a plain-HTTP request is sent: `https://host[:port]/path?query`; `None` when the
/// host is missing or not a plain host name (no location is built from it).
pub fn https_location(host: Option<&str>, path_and_query: &str, https_port: u16) -> Option<String> {
    let host = host?;
    let name = match host.rsplit_once(':') {
        Some((name, port))
            if (name.ends_with(']') || !name.contains(':')) && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            name
        }
        _ => host,
    };
    let ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
    if !ok || !path_and_query.starts_with('/') {
        return None;
    }
    let port = if https_port == 443 { String::new() } else { format!(":{https_port}") };
    Some(format!("https://{name}{port}{path_and_query}"))
}

#[async_trait]
impl ServeHttp for Redirect {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        if let Some(key_auth) = self.acme.challenge(req.uri.path()) {
            return challenge_answer(key_auth);
        }
        let host = req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).or(req.uri.host());
        let path = req.uri.path_and_query().map_or("/", |p| p.as_str());
        let built = match https_location(host, path, self.https_port) {
            Some(location) => Response::builder().status(308).header(http::header::LOCATION, location),
            None => Response::builder().status(400),
        };
        built
            .header(http::header::CONTENT_LENGTH, 0)
            .header(http::header::CONNECTION, "close")
            .body(Vec::new())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_location_keeps_host_path_and_query_and_refuses_odd_hosts() {
        let loc = |h, p, port| https_location(h, p, port);
        assert_eq!(loc(Some("shop.example"), "/a?b=1", 443).as_deref(), Some("https://shop.example/a?b=1"));
        assert_eq!(loc(Some("shop.example:8080"), "/", 8443).as_deref(), Some("https://shop.example:8443/"));
        assert_eq!(loc(Some("[::1]:80"), "/", 443).as_deref(), Some("https://[::1]/"));
        assert_eq!(loc(None, "/", 443), None);
        assert_eq!(loc(Some("evil.example/x"), "/", 443), None);
        assert_eq!(loc(Some("a@b"), "/", 443), None);
        assert_eq!(loc(Some("shop"), "*", 443), None);
    }
}
