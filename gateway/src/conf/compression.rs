//! A route's response compression, with Nginx's `gzip` module's meaning: `compression_level`
//! (`gzip on` + `gzip_comp_level`), `compression_types` (`gzip_types`), `compression_min_length`
//! (`gzip_min_length`) and `compression_algorithms` (gzip alone is Nginx's; brotli and zstd are
//! Pingora's too). [`Compression::applies`] is Nginx's rule for one answer; Pingora's
//! `ResponseCompression` module does the encoding.

use pingora_http::{RequestHeader, ResponseHeader};
use protocol::conf::ConfError;

use super::{Checker, RawRoute, S};

/// Highest compression level (brotli's; gzip caps at 9 and zstd reads it as is).
pub const MAX_COMPRESSION_LEVEL: i64 = 11;
/// `compression_min_length`'s default: Nginx's `gzip_min_length` (20 bytes).
pub const DEFAULT_MIN_LENGTH: u64 = 20;
/// The algorithms, in Pingora's names and order (`Accept-Encoding` tokens).
pub const ALGORITHMS: [&str; 3] = ["gzip", "br", "zstd"];

/// A route's response compression; off when `level` is 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    /// 1..=11 (gzip caps at 9); 0: off.
    pub level: u32,
    /// The content types compressed (lower case, without parameters): `text/html` and these, as
    /// Nginx's `gzip_types`; `*` any (of the types Pingora's module compresses at all: never
    /// `image/png`, zips and the like). `None`: every type Pingora deems compressible (`text/*`,
    /// `application/*` but zips, `font/*`, SVG, icons).
    pub types: Option<Vec<String>>,
    /// A body shorter than this (by its `Content-Length`) is sent as it is.
    pub min_length: u64,
    /// Which of [`ALGORITHMS`] may be used (the client's `Accept-Encoding` chooses among them).
    pub algorithms: [bool; 3],
}

impl Default for Compression {
    fn default() -> Self {
        Compression { level: 0, types: None, min_length: DEFAULT_MIN_LENGTH, algorithms: [true; 3] }
    }
}

impl Compression {
    /// Whether this answer to this request is compressed, by Nginx's rule: compression on, an
    /// HTTP/1.1 (or later) request (Nginx's
    /// `gzip_http_version 1.1`), status 200, 403 or 404, no `Content-Encoding` already, a length
    /// not below `min_length` when known, and a listed type. The client's `Accept-Encoding` is
    /// Pingora's to read.
    pub fn applies(&self, req: &RequestHeader, resp: &ResponseHeader) -> bool {
        let status = resp.status.as_u16();
        self.level > 0
            && req.version >= http::Version::HTTP_11
            && matches!(status, 200 | 403 | 404)
            && resp.headers.get(http::header::CONTENT_ENCODING).is_none_or(|v| v.is_empty())
            && length(resp).is_none_or(|n| n >= self.min_length.max(DEFAULT_MIN_LENGTH))
            && self.type_listed(resp)
    }

    /// Listed (`text/html` always), and a type Pingora's module compresses at all.
    fn type_listed(&self, resp: &ResponseHeader) -> bool {
        let Some(ct) = resp.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        let listed = match &self.types {
            None => true,
            Some(types) => mime == "text/html" || types.iter().any(|t| t == "*" || *t == mime),
        };
        listed && pingora_compresses(&mime)
    }
}

/// The types Pingora's `ResponseCompression` compresses (its own rule: `text/*`,
/// `application/*`, `font/*`, icons and SVG, `binary/octet-stream`; nothing with `zip` in it).
fn pingora_compresses(mime: &str) -> bool {
    let prefixes = [
        "text/",
        "application/",
        "font/",
        "image/x-icon",
        "image/svg+xml",
        "image/nd.microsoft.icon",
        "binary/octet-stream",
    ];
    !mime.contains("zip") && prefixes.iter().any(|p| mime.starts_with(p))
}

fn length(resp: &ResponseHeader) -> Option<u64> {
    resp.headers.get(http::header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// The compression keys of route `prefix` (`route[i]`).
pub(super) fn check(c: &Checker<'_>, prefix: &str, r: &RawRoute) -> Result<Compression, ConfError> {
    let f = |name: &str| format!("{prefix}.{name}");
    let mut out = Compression::default();
    if let Some(v) = &r.compression_level {
        out.level = c.int(v, &f("compression_level"), 0, MAX_COMPRESSION_LEVEL)? as u32;
    }
    if let Some(v) = &r.compression_min_length {
        out.min_length = c.int(v, &f("compression_min_length"), 0, 1 << 40)? as u64;
    }
    if let Some(list) = &r.compression_types {
        out.types = Some(types(c, list, &f("compression_types"))?);
    }
    if let Some(list) = &r.compression_algorithms {
        out.algorithms = algorithms(c, list, &f("compression_algorithms"))?;
    }
    Ok(out)
}

/// `["text/css", "application/json"]`: MIME types (`type/subtype`) or `*`.
fn types(c: &Checker<'_>, list: &S<Vec<S<String>>>, field: &str) -> Result<Vec<String>, ConfError> {
    let mut out = Vec::new();
    for t in list.get_ref() {
        let v = t.get_ref().trim().to_ascii_lowercase();
        let ok = v == "*"
            || v.split_once('/').is_some_and(|(a, b)| {
                let token = |s: &str| {
                    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b'/' && b != b';')
                };
                token(a) && token(b)
            });
        if !ok {
            return Err(c.err(t.span(), field, format!("`{v}` is not a MIME type (`text/css`) or `*`")));
        }
        out.push(v);
    }
    Ok(out)
}

/// `["gzip"]`, `["gzip", "br", "zstd"]`: at least one, each known once.
fn algorithms(c: &Checker<'_>, list: &S<Vec<S<String>>>, field: &str) -> Result<[bool; 3], ConfError> {
    let mut out = [false; 3];
    if list.get_ref().is_empty() {
        return Err(c.err(
            list.span(),
            field,
            "must list at least one of gzip, br, zstd (or set compression_level = 0)",
        ));
    }
    for a in list.get_ref() {
        let Some(i) = ALGORITHMS.iter().position(|k| k == a.get_ref()) else {
            return Err(c.err(a.span(), field, format!("`{}`: one of gzip, br, zstd", a.get_ref())));
        };
        out[i] = true;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, parse, GOOD};
    use super::*;

    fn conf(extra: &str) -> Compression {
        let text = GOOD.replace("path_prefix = \"/\"", &format!("path_prefix = \"/\"\n{extra}"));
        parse(&text).unwrap().routes[0].compression.clone()
    }

    fn with(extra: &str) -> String {
        GOOD.replace("path_prefix = \"/\"", &format!("path_prefix = \"/\"\n{extra}"))
    }

    #[test]
    fn keys_have_nginx_defaults_and_bounds() {
        assert_eq!(conf(""), Compression::default(), "off by default");
        let c = conf("compression_level = 6\ncompression_types = [\"Text/CSS\", \"*\"]\ncompression_min_length = 1000\ncompression_algorithms = [\"gzip\"]");
        assert_eq!(c.level, 6);
        assert_eq!(c.types, Some(vec!["text/css".to_string(), "*".to_string()]));
        assert_eq!((c.min_length, c.algorithms), (1000, [true, false, false]));
        expect_err(&with("compression_level = 12"), 17, "route[0].compression_level", "between 0 and 11");
        expect_err(&with("compression_min_length = -1"), 17, "route[0].compression_min_length", "between 0");
        expect_err(
            &with("compression_types = [\"css\"]"),
            17,
            "route[0].compression_types",
            "not a MIME type",
        );
        expect_err(
            &with("compression_algorithms = [\"deflate\"]"),
            17,
            "route[0].compression_algorithms",
            "one of gzip",
        );
        expect_err(
            &with("compression_algorithms = []"),
            17,
            "route[0].compression_algorithms",
            "at least one",
        );
    }

    fn req(method: &str, version: http::Version) -> RequestHeader {
        let mut r = RequestHeader::build(method, b"/", None).unwrap();
        r.set_version(version);
        r
    }

    fn resp(status: u16, headers: &[(&str, &str)]) -> ResponseHeader {
        let mut r = ResponseHeader::build(status, None).unwrap();
        for (k, v) in headers {
            r.insert_header(k.to_string(), *v).unwrap();
        }
        r
    }

    #[test]
    fn an_answer_is_compressed_by_nginx_rule() {
        let on = Compression { level: 1, types: Some(vec!["text/css".into()]), ..Compression::default() };
        let get = req("GET", http::Version::HTTP_11);
        let html =
            |n: &str| resp(200, &[("content-type", "text/html; charset=utf-8"), ("content-length", n)]);
        assert!(on.applies(&get, &html("20")), "text/html is always listed");
        assert!(on.applies(&get, &resp(404, &[("content-type", "text/css")])), "404 too, no length");
        assert!(!on.applies(&get, &html("19")), "below gzip_min_length");
        assert!(!on.applies(&get, &resp(200, &[("content-type", "application/json")])), "not listed");
        assert!(!on.applies(&get, &resp(500, &[("content-type", "text/html")])), "200, 403, 404 only");
        assert!(!on.applies(&get, &resp(200, &[("content-type", "text/html"), ("content-encoding", "br")])));
        assert!(!on.applies(&get, &resp(200, &[])), "no type, not listed");
        assert!(on.applies(&req("HEAD", http::Version::HTTP_11), &html("100")), "HEAD says what GET sends");
        assert!(!on.applies(&req("GET", http::Version::HTTP_10), &html("100")), "gzip_http_version 1.1");
        let any = Compression { types: Some(vec!["*".into()]), ..on.clone() };
        assert!(any.applies(&get, &resp(200, &[("content-type", "image/svg+xml")])));
        assert!(
            !any.applies(&get, &resp(200, &[("content-type", "image/png")])),
            "Pingora's module never does"
        );
        assert!(!any.applies(&get, &resp(200, &[("content-type", "application/zip")])));
        let pingoras = Compression { types: None, ..on.clone() };
        assert!(pingoras.applies(&get, &resp(200, &[("content-type", "application/json")])));
        let low = Compression { min_length: 5, ..on.clone() };
        assert!(!low.applies(&get, &html("10")), "Pingora's floor is 20 bytes");
        assert!(!Compression::default().applies(&get, &html("100")), "off");
    }
}
