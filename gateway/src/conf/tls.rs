//! The `[tls]` table of the server file: the HTTPS listener, HTTP/2, the redirecting plain
//! listener, and one `[[tls.cert]]` per certificate (host names, PEM files by path, relative
//! to the server file), and one `[[tls.acme]]` per certificate the gateway gets itself
//! ([`super::acme`]). The files are read and checked at load, so `--check` and a `SIGHUP`
//! reload refuse a missing file, a key that does not match its certificate, or a bad PEM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{Checker, S};
use crate::certs::{self, CertTable};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    listen: S<String>,
    #[serde(default)]
    http2: Option<S<bool>>,
    #[serde(default)]
    redirect_listen: Option<S<String>>,
    #[serde(default)]
    proxy_protocol: Option<S<bool>>,
    #[serde(default, rename = "cert")]
    certs: Option<S<Vec<RawCert>>>,
    #[serde(default)]
    acme: Vec<super::acme::RawAcme>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCert {
    hosts: S<Vec<S<String>>>,
    cert_file: S<String>,
    key_file: S<String>,
}

/// One certificate entry: the host names it serves, its PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertConf {
    /// Host names (lowercase), `*.example.com` for one label under `example.com`.
    pub hosts: Vec<String>,
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// The certificate entries and the table loaded from them.
#[derive(Debug, Clone)]
pub struct Certs {
    /// The entries, in file order (the first is the default certificate).
    pub entries: Vec<CertConf>,
    /// `None` when every certificate comes by ACME.
    table: Option<Arc<CertTable>>,
}

impl Certs {
    /// The loaded certificates, by host name (`None`: no `[[tls.cert]]`).
    pub fn table(&self) -> Option<&CertTable> {
        self.table.as_deref()
    }
}

impl PartialEq for Certs {
    fn eq(&self, other: &Self) -> bool {
        let same_table = match (&self.table, &other.table) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        self.entries == other.entries && same_table
    }
}
impl Eq for Certs {}

/// The validated `[tls]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConf {
    /// The HTTPS listener (restart to change).
    pub listen: SocketAddr,
    /// Offer HTTP/2 by ALPN (default on); HTTP/1.1 is always offered.
    pub http2: bool,
    /// A plain-HTTP listener answering every request with a 308 to HTTPS (restart to change).
    pub redirect_listen: Option<SocketAddr>,
    /// Every connection to the HTTPS listener starts with a PROXY header, before TLS (Nginx's
    /// `listen 443 ssl proxy_protocol`; restart to change).
    pub proxy_protocol: bool,
    /// Certificates (reloaded on `SIGHUP`).
    pub certs: Certs,
    /// Certificates by ACME (restart to change).
    pub acme: Vec<super::acme::AcmeConf>,
}

/// Validates the table and loads its certificates.
pub(super) fn check(c: &Checker<'_>, raw: &RawTls, base: &Path) -> Result<TlsConf, ConfError> {
    let listen = c.addr(&raw.listen, "tls.listen")?;
    let redirect_listen =
        raw.redirect_listen.as_ref().map(|a| c.addr(a, "tls.redirect_listen")).transpose()?;
    let none: &[RawCert] = &[];
    let raw_certs = raw.certs.as_ref().map_or(none, |c| c.get_ref().as_slice());
    if raw_certs.is_empty() && raw.acme.is_empty() {
        let span = raw.certs.as_ref().map_or(raw.listen.span(), |c| c.span());
        let msg = "must list at least one certificate ([[tls.cert]], or [[tls.acme]])";
        return Err(c.err(span, "tls.cert", msg));
    }
    let (mut entries, mut loaded) = (Vec::new(), Vec::new());
    for (i, cert) in raw_certs.iter().enumerate() {
        let field = |name: &str| format!("tls.cert[{i}].{name}");
        if cert.hosts.get_ref().is_empty() {
            return Err(c.err(cert.hosts.span(), &field("hosts"), "must list at least one host name"));
        }
        let mut hosts = Vec::new();
        for h in cert.hosts.get_ref() {
            if !super::matching::host_ok(h.get_ref()) {
                return Err(c.err(
                    h.span(),
                    &field("hosts"),
                    format!("{:?} is not a host name", h.get_ref()),
                ));
            }
            hosts.push(h.get_ref().to_ascii_lowercase());
        }
        let (cert_file, key_file) = (base.join(cert.cert_file.get_ref()), base.join(cert.key_file.get_ref()));
        let pair = certs::load_pair(&cert_file, &key_file)
            .map_err(|e| c.err(cert.cert_file.span(), &field("cert_file"), e))?;
        loaded.push((hosts.clone(), pair));
        entries.push(CertConf { hosts, cert_file, key_file });
    }
    let static_hosts: Vec<String> = entries.iter().flat_map(|e: &CertConf| e.hosts.clone()).collect();
    let acme = super::acme::check(c, &raw.acme, base, &static_hosts)?;
    Ok(TlsConf {
        listen,
        http2: raw.http2.as_ref().is_none_or(|b| *b.get_ref()),
        redirect_listen,
        proxy_protocol: raw.proxy_protocol.as_ref().is_some_and(|b| *b.get_ref()),
        certs: Certs { entries, table: CertTable::new(loaded).map(Arc::new) },
        acme,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, GOOD};

    #[test]
    fn a_bad_tls_table_is_refused_with_line_and_field() {
        let with = |lines: &str| format!("{GOOD}\n[tls]\nlisten = \"127.0.0.1:8443\"\n{lines}\n");
        let line = GOOD.lines().count() + 4;
        expect_err(&with("cert = []"), line, "tls.cert", "at least one");
        let cert = |hosts: &str| {
            format!("[[tls.cert]]\nhosts = {hosts}\ncert_file = \"nope.pem\"\nkey_file = \"nope.key\"")
        };
        expect_err(&with(&cert("[\"a b\"]")), line + 1, "tls.cert[0].hosts", "not a host name");
        expect_err(&with(&cert("[\"shop.example\"]")), line + 2, "tls.cert[0].cert_file", "cannot read");
        expect_err(&with("proxy_protocol = \"yes\""), line, "proxy_protocol", "invalid type");
    }
}
