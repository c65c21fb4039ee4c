//! A `[[route]]`'s headers, as Nginx's `proxy_set_header`, `add_header` (with and without
//! `always`) and `proxy_hide_header`: names checked and values parsed once, at load.

use std::collections::BTreeMap;

use http::{HeaderName, HeaderValue};
use protocol::conf::ConfError;
use toml::Spanned;

use super::{Checker, RawRoute};
use crate::template::Template;

/// A table of header names and values, each with its place.
pub(super) type Table = Option<BTreeMap<Spanned<String>, Spanned<String>>>;

/// A route's headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    /// Request headers set on the way upstream (`None`: removed, Nginx's empty value).
    pub set: Vec<(HeaderName, Option<Template>)>,
    /// Response headers added: (name, value, whether on every status, Nginx's `always`;
    /// otherwise on 200, 201, 204, 206, 301, 302, 303, 304, 307, 308 only).
    pub add: Vec<(HeaderName, Template, bool)>,
    /// Upstream response headers not passed to the client.
    pub hide: Vec<HeaderName>,
}

fn name(c: &Checker<'_>, k: &Spanned<String>, field: &str) -> Result<HeaderName, ConfError> {
    HeaderName::from_bytes(k.get_ref().as_bytes())
        .map_err(|_| c.err(k.span(), field, format!("{:?} is not a header name", k.get_ref())))
}

fn value(c: &Checker<'_>, v: &Spanned<String>, field: &str) -> Result<Template, ConfError> {
    HeaderValue::from_str(v.get_ref())
        .map_err(|_| c.err(v.span(), field, format!("{:?} is not a header value", v.get_ref())))?;
    Template::parse(v.get_ref()).map_err(|e| c.err(v.span(), field, e))
}

/// Checks the header fields of route `prefix` (`route[i]`).
pub(super) fn check(c: &Checker<'_>, prefix: &str, raw: &RawRoute) -> Result<Headers, ConfError> {
    let mut h = Headers::default();
    let field = |f: &str, k: &Spanned<String>| format!("{prefix}.{f}.{}", k.get_ref());
    for (k, v) in raw.proxy_set_header.iter().flatten() {
        let f = field("proxy_set_header", k);
        let value = (!v.get_ref().is_empty()).then(|| value(c, v, &f)).transpose()?;
        h.set.push((name(c, k, &f)?, value));
    }
    for (table, always, key) in
        [(&raw.add_header, false, "add_header"), (&raw.add_header_always, true, "add_header_always")]
    {
        for (k, v) in table.iter().flatten() {
            let f = field(key, k);
            h.add.push((name(c, k, &f)?, value(c, v, &f)?, always));
        }
    }
    for k in raw.proxy_hide_header.iter().flatten() {
        h.hide.push(name(c, k, &format!("{prefix}.proxy_hide_header"))?);
    }
    Ok(h)
}
