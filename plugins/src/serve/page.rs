//! The buyer's page (`web/` in the repository), served at `GET /seckill/{campaign}/`: four static
//! files compiled into the binary, the same bytes for every campaign and every buyer (the page
//! reads the campaign from its address and its facts from `/seckill/{campaign}/info`), so a CDN
//! may cache them. Each file is gzipped once, at start ([`warm`]), never per request; an answer
//! carries a strong `ETag` (one per encoding), `Cache-Control` fit for a shared cache and
//! `Vary: Accept-Encoding`, and a matching `If-None-Match` gets `304`.
//!
//! [`decide`] is the pure decision (which bytes, which status); `reply::page` makes the answer of it.

use std::io::Write;
use std::sync::LazyLock;

use ring::digest;

/// How long a browser or a CDN may keep a file before asking again (with its `ETag`).
pub const CACHE_CONTROL: &str = "public, max-age=60, stale-while-revalidate=300";

/// One file of the page.
#[derive(Debug, PartialEq, Eq)]
pub struct Asset {
    /// Its name under `/seckill/{campaign}/` (`""`: the page itself).
    pub name: &'static str,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The file as it is in `web/`.
    pub plain: &'static [u8],
    /// The same, gzipped.
    pub gzip: Vec<u8>,
    /// `ETag` of the plain bytes.
    pub etag: String,
    /// `ETag` of the gzipped bytes.
    pub etag_gzip: String,
}

/// The page's files: (name, content type, bytes).
const FILES: [(&str, &str, &[u8]); 4] = [
    ("", "text/html; charset=utf-8", include_bytes!("../../web/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../../web/app.js")),
    ("pow.js", "text/javascript; charset=utf-8", include_bytes!("../../web/pow.js")),
    ("page.css", "text/css; charset=utf-8", include_bytes!("../../web/page.css")),
];

static PAGE: LazyLock<Vec<Asset>> = LazyLock::new(|| FILES.iter().map(|&(n, t, b)| asset(n, t, b)).collect());

fn asset(name: &'static str, content_type: &'static str, plain: &'static [u8]) -> Asset {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing to a Vec cannot fail.
    let gzip = gz.write_all(plain).and_then(|()| gz.finish()).unwrap_or_default();
    let tag = hex(&digest::digest(&digest::SHA256, plain).as_ref()[..12]);
    Asset { name, content_type, plain, gzip, etag: format!("\"{tag}\""), etag_gzip: format!("\"{tag}-gz\"") }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compresses every file now (the sale calls it at start), so no request pays for it.
pub fn warm() {
    LazyLock::force(&PAGE);
}

/// Whether `name` is one of the page's files (`""`: the page).
pub fn is_asset(name: &str) -> bool {
    FILES.iter().any(|f| f.0 == name)
}

/// The file called `name`.
pub fn find(name: &str) -> Option<&'static Asset> {
    PAGE.iter().find(|a| a.name == name)
}

/// What to answer for one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served<'a> {
    /// 200, or 304 when the client's copy is current.
    pub status: u16,
    /// The body (empty for 304 and HEAD).
    pub body: &'a [u8],
    /// `Content-Length`: the body's, or for HEAD the one a GET would have.
    pub length: usize,
    /// `ETag`.
    pub etag: &'a str,
    /// Whether the body is gzipped (`Content-Encoding: gzip`).
    pub gzip: bool,
}

/// Decides the answer for `asset` from the request's method (`head`: a HEAD request),
/// `Accept-Encoding` and `If-None-Match`.
pub fn decide<'a>(
    asset: &'a Asset,
    head: bool,
    accept_encoding: Option<&str>,
    if_none_match: Option<&str>,
) -> Served<'a> {
    let gzip = accept_encoding.is_some_and(accepts_gzip);
    let (bytes, etag) = if gzip {
        (asset.gzip.as_slice(), asset.etag_gzip.as_str())
    } else {
        (asset.plain, asset.etag.as_str())
    };
    if if_none_match.is_some_and(|v| etag_matches(v, etag)) {
        return Served { status: 304, body: &[], length: 0, etag, gzip };
    }
    Served { status: 200, body: if head { &[] } else { bytes }, length: bytes.len(), etag, gzip }
}

/// Whether an `Accept-Encoding` value accepts gzip (`gzip`, `x-gzip` or `*`, with a q above 0).
fn accepts_gzip(value: &str) -> bool {
    value.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
            .map(|q| q.parse::<f32>().unwrap_or(0.0))
            .next()
            .unwrap_or(1.0);
        matches!(coding.as_str(), "gzip" | "x-gzip" | "*") && q > 0.0
    })
}

/// Whether an `If-None-Match` value names `etag` (or is `*`); weak tags compare by value.
fn etag_matches(value: &str, etag: &str) -> bool {
    value.split(',').map(str::trim).any(|v| v == "*" || v.strip_prefix("W/").unwrap_or(v) == etag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn every_file_is_there_and_gunzips_to_itself() {
        for (name, _, bytes) in FILES {
            let a = find(name).unwrap();
            assert!(is_asset(name));
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(a.gzip.as_slice()).read_to_end(&mut out).unwrap();
            assert_eq!(out, bytes, "{name}");
            assert!(a.gzip.len() < a.plain.len(), "{name}: gzip should be smaller");
            assert_ne!(a.etag, a.etag_gzip);
        }
        assert!(!is_asset("order") && !is_asset("info") && !is_asset("../Cargo.toml"));
    }

    #[test]
    fn gzip_only_when_accepted() {
        let a = find("app.js").unwrap();
        let plain = decide(a, false, None, None);
        assert_eq!((plain.status, plain.gzip, plain.body.len()), (200, false, a.plain.len()));
        for yes in ["gzip", "br, gzip;q=0.5", "deflate, x-gzip", "*", "GZIP"] {
            assert!(decide(a, false, Some(yes), None).gzip, "{yes}");
        }
        for no in ["br", "identity", "gzip;q=0", "gzip; q=0.0, br", ""] {
            assert!(!decide(a, false, Some(no), None).gzip, "{no}");
        }
        let zipped = decide(a, false, Some("gzip"), None);
        assert_eq!((zipped.body, zipped.etag), (a.gzip.as_slice(), a.etag_gzip.as_str()));
    }

    #[test]
    fn a_current_copy_gets_304_and_head_gets_no_body() {
        let a = find("").unwrap();
        let tag = a.etag_gzip.clone();
        assert_eq!(decide(a, false, Some("gzip"), Some(&tag)).status, 304);
        assert_eq!(decide(a, false, Some("gzip"), Some(&format!("W/{tag}"))).status, 304);
        assert_eq!(decide(a, false, Some("gzip"), Some("\"old\", *")).status, 304);
        // The plain copy's tag does not validate the gzipped answer.
        assert_eq!(decide(a, false, Some("gzip"), Some(&a.etag)).status, 200);
        let head = decide(a, true, None, None);
        assert_eq!((head.status, head.body.len(), head.length), (200, 0, a.plain.len()));
    }
}
