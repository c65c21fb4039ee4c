//! A shop route's files (`root`/`alias`, `index`, `try_files`), answered as Nginx's static,
//! index and try_files modules answer them: the path → a file under the route's folder
//! ([`find`]), then its answer with `Content-Type` (Nginx's `mime.types`), `Last-Modified`,
//! Nginx's `ETag` (`"<mtime hex>-<size hex>"`), the conditional requests (304, 412) and byte
//! ranges (206, one or `multipart/byteranges`; 416) ([`serve`]), streamed from the file in
//! chunks.
//!
//! What is found where, as Nginx (the path is the normalized one, `crate::uri::normalize`:
//! decoded, `..` resolved, above `/` refused with 400; so `%2F` is a `/`, as in Nginx):
//! - a method other than GET, HEAD or POST: 405; POST finds as GET, and a file found answers 405;
//! - `try_files` first: each candidate that exists (a folder for one ending in `/`, else not a
//!   folder) is the path; else the last entry: `=CODE`, or a path served in their place (Nginx
//!   searches the locations again for it; the gateway serves it from the same route's folder);
//! - a path ending in `/`: the first `index` file there, else 403 (a folder without index), or
//!   404 without the folder;
//! - a folder without its trailing slash: 301 to the path with it (and the query);
//! - missing: 404; not readable: 403; not a regular file: 404.
//!
//! Out of the folder: no path leaves it by its text (segments only, no `.`/`..`), and a file
//! whose real path (symlinks resolved) is outside the folder answers 403, as Nginx's
//! `disable_symlinks on` (Nginx's default follows them anywhere). Symlinks inside are followed.

mod mime;
mod range;

use std::io::SeekFrom;
use std::net::IpAddr;
use std::path::PathBuf;

use bytes::BytesMut;
use http::{HeaderValue, Method};
use pingora_core::{Error, ErrorType, Result};
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::conf::{Files, RouteConf};
use crate::shop;
use crate::template::Vars;

pub use range::{etag, Part, Validators};

/// Chunk size of a file's body.
const CHUNK: usize = 64 << 10;

/// What a path on a files route is.
#[derive(Debug)]
pub enum Found {
    /// A regular file, open, its validators, and the path it was found by (its extension gives
    /// the type).
    File(tokio::fs::File, Validators, String),
    /// A folder asked without its trailing slash: a 301 to this.
    Redirect(String),
    /// An answer without a file (403, 404, 405, a `try_files` `=CODE`).
    Status(u16),
}

/// GET, HEAD and POST read (POST up to a file: 405, as Nginx's static module).
fn readable(m: &Method) -> bool {
    m == Method::GET || m == Method::HEAD || m == Method::POST
}

/// What `uri` (normalized) with query `args` is on `files` for `method`.
pub async fn find(files: &Files, uri: &str, args: &str, method: &Method) -> Found {
    let uri = match tried(files, uri).await {
        Ok(uri) => uri,
        Err(status) => return Found::Status(status),
    };
    if !readable(method) {
        return Found::Status(405);
    }
    if uri.ends_with('/') {
        return index(files, &uri, method).await;
    }
    file(files, &uri, args, method).await
}

/// `try_files`: the first candidate there, or the last resort (`Err(CODE)` for `=CODE`).
async fn tried(files: &Files, uri: &str) -> std::result::Result<String, u16> {
    let Some((last, candidates)) = files.try_files.split_last() else { return Ok(uri.to_string()) };
    for c in candidates {
        // A candidate ending in `/` is a folder's, and found, the path is without that `/`
        // (Nginx's: the static module then answers a folder's 301, or the index of `$uri/`).
        let (c, folder) = c.strip_suffix('/').map_or((c.as_str(), false), |c| (c, true));
        let candidate = match c.replacen("$uri", uri, 1) {
            c if c.is_empty() => "/".to_string(),
            c => c,
        };
        let Some(path) = map(files, &candidate) else { continue };
        let is_dir = tokio::fs::metadata(&path).await.map(|m| m.is_dir());
        if is_dir.is_ok_and(|d| d == folder) {
            return Ok(candidate);
        }
    }
    match last.strip_prefix('=') {
        Some(code) => Err(code.parse().unwrap_or(404)),
        None => Ok(last.replacen("$uri", uri, 1)),
    }
}

/// A path ending in `/`: its first index file, else 403 (the folder is there) or 404.
async fn index(files: &Files, uri: &str, method: &Method) -> Found {
    let Some(dir) = map(files, uri) else { return Found::Status(404) };
    for name in &files.index {
        match tokio::fs::metadata(dir.join(name)).await {
            Ok(_) => return file(files, &format!("{uri}{name}"), "", method).await,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Found::Status(status_of(&e)),
        }
    }
    match tokio::fs::metadata(&dir).await {
        Ok(m) if m.is_dir() => Found::Status(403),
        Ok(_) => Found::Status(404),
        Err(e) => Found::Status(status_of(&e)),
    }
}

/// A path not ending in `/`: the file, a 301 for a folder, or the error.
async fn file(files: &Files, uri: &str, args: &str, method: &Method) -> Found {
    let Some(path) = map(files, uri) else { return Found::Status(404) };
    let opened = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => return Found::Status(status_of(&e)),
    };
    let inside = tokio::fs::canonicalize(&path).await.is_ok_and(|real| real.starts_with(&files.dir));
    let meta = match opened.metadata().await {
        Ok(m) if !inside => return Found::Status(if m.is_file() || m.is_dir() { 403 } else { 404 }),
        Ok(m) => m,
        Err(e) => return Found::Status(status_of(&e)),
    };
    if meta.is_dir() {
        let query = if args.is_empty() { String::new() } else { format!("?{args}") };
        return Found::Redirect(format!("{uri}/{query}"));
    }
    match (meta.is_file(), method == Method::POST) {
        (false, _) => Found::Status(404),
        (true, true) => Found::Status(405),
        (true, false) => Found::File(opened, Validators::of(&meta), uri.to_string()),
    }
}

/// Nginx's status for a file it could not open: missing (or a file where a folder was
/// expected, or a name too long) 404; not allowed or a symlink loop 403; else 500.
fn status_of(e: &std::io::Error) -> u16 {
    use std::io::ErrorKind::*;
    // ELOOP (a symlink loop): its kind is not stable yet; 40 on Linux.
    const ELOOP: i32 = 40;
    match e.kind() {
        NotFound | NotADirectory | InvalidFilename => 404,
        PermissionDenied => 403,
        _ if e.raw_os_error() == Some(ELOOP) => 403,
        _ => 500,
    }
}

/// The file path of `uri` on `files`: the folder, then the path (for `alias`, what follows
/// the route's prefix), segment by segment; `None` for a path that is not in the folder (a
/// `.` or `..` segment, a fallback outside an alias's prefix).
fn map(files: &Files, uri: &str) -> Option<PathBuf> {
    let rest = match &files.alias_of {
        None => uri,
        Some(prefix) => {
            let rest = uri.strip_prefix(prefix.as_str())?;
            // `alias` on `/static` (no slash): `/staticx` is not in the folder (Nginx's would
            // be its sibling `<folder>x`).
            if !prefix.ends_with('/') && !rest.is_empty() && !rest.starts_with('/') {
                return None;
            }
            rest
        }
    };
    let mut path = files.dir.clone();
    for seg in rest.split('/').filter(|s| !s.is_empty()) {
        if seg == "." || seg == ".." || seg.contains('\0') {
            return None;
        }
        path.push(seg);
    }
    if rest.ends_with('/') {
        path.push("");
    }
    Some(path)
}

/// Answers the request on the files route `route` (`uri`: the normalized path when it differs
/// from the path as sent). A body is read and dropped first, as Nginx discards it.
pub async fn serve(
    session: &mut Session,
    route: &RouteConf,
    at: shop::At<'_>,
    client: Option<IpAddr>,
    request_id: &str,
) -> Result<bool> {
    let Some(files) = &route.files else {
        return Err(Error::explain(ErrorType::InternalError, "the route serves no files"));
    };
    crate::frontdoor::drain(session).await;
    let req = session.req_header();
    let path = at.path.unwrap_or(req.uri.path()).to_string();
    let (args, method) = (at.args.unwrap_or(req.uri.query().unwrap_or("")).to_string(), req.method.clone());
    let found = find(files, &path, &args, &method).await;
    let head = method == Method::HEAD;
    let (header, body) = {
        let vars = shop::vars(session, route, at, client, request_id);
        answer(route, files, &vars, session.req_header(), found)?
    };
    let mut header = header;
    // Compressed by the route's rule as any answer (Nginx's gzip: 200, 403, 404; never a 206).
    crate::frontdoor::compression_of_answer(session, route, &mut header);
    let end = head || matches!(&body, Body::None) || matches!(&body, Body::File(_, p) if p.is_empty());
    session.write_response_header(Box::new(header), end).await?;
    match body {
        _ if end => {}
        Body::File(file, pieces) => stream(session, file, pieces).await?,
        Body::Page(page) => session.write_response_body(Some(page.into()), true).await?,
        Body::None => {}
    }
    Ok(true)
}

/// What follows an answer's head.
enum Body {
    /// Nothing (a 304).
    None,
    /// The gateway's page of the status.
    Page(String),
    /// The file's parts, and the text between them (a multipart answer's).
    File(tokio::fs::File, Vec<Piece>),
}

/// A part of a file answer's body.
#[derive(Debug)]
enum Piece {
    /// Text of its own (a part's head, the last boundary).
    Text(String),
    /// The file's bytes `start..end`.
    Span(u64, u64),
}

/// The head of the answer, and its body.
type Answer = (ResponseHeader, Body);

/// The answer to what was found.
fn answer(
    route: &RouteConf,
    files: &Files,
    vars: &Vars<'_>,
    req: &pingora_http::RequestHeader,
    found: Found,
) -> Result<Answer> {
    let (mut header, body) = match found {
        Found::Status(status) => page(status, None)?,
        Found::Redirect(to) => {
            let (mut h, body) = page(301, None)?;
            let to =
                HeaderValue::from_str(&to).or_else(|_| HeaderValue::from_str(&crate::uri::encode_path(&to)));
            let to = to.map_err(|e| Error::because(ErrorType::InternalError, "the folder's location", e))?;
            h.insert_header(http::header::LOCATION, to)?;
            (h, body)
        }
        Found::File(file, v, uri) => {
            let kind = mime::by_extension(&uri).unwrap_or(files.default_type.as_str());
            match range::decide(&req.headers, &v) {
                Part::NotModified => (validated(304, &v, None)?, Body::None),
                Part::Failed => page(412, None)?,
                Part::Unsatisfiable => page(416, Some(format!("bytes */{}", v.len)))?,
                Part::Whole => {
                    let mut h = validated(200, &v, Some(kind))?;
                    h.insert_header(http::header::CONTENT_LENGTH, v.len)?;
                    h.insert_header(http::header::ACCEPT_RANGES, "bytes")?;
                    (h, Body::File(file, span(0, v.len)))
                }
                Part::Range(start, end) => {
                    let mut h = validated(206, &v, Some(kind))?;
                    h.insert_header(http::header::CONTENT_LENGTH, end - start)?;
                    h.insert_header(
                        http::header::CONTENT_RANGE,
                        format!("bytes {start}-{}/{}", end - 1, v.len),
                    )?;
                    (h, Body::File(file, span(start, end)))
                }
                Part::Ranges(ranges) => {
                    let (kind, pieces, len) = multipart(kind, &ranges, v.len);
                    let mut h = validated(206, &v, Some(&kind))?;
                    h.insert_header(http::header::CONTENT_LENGTH, len)?;
                    (h, Body::File(file, pieces))
                }
            }
        }
    };
    shop::response_headers(route, vars, &mut header)?;
    Ok((header, body))
}

/// The one span `start..end` of a file (none when empty).
fn span(start: u64, end: u64) -> Vec<Piece> {
    if start < end {
        vec![Piece::Span(start, end)]
    } else {
        Vec::new()
    }
}

/// The last boundary number given (Nginx's are a counter too, 20 digits).
static BOUNDARY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A `multipart/byteranges` body of `ranges` of a file of `len` bytes and type `kind`, as
/// Nginx writes it: its `Content-Type`, its pieces and its length.
fn multipart(kind: &str, ranges: &[(u64, u64)], len: u64) -> (String, Vec<Piece>, u64) {
    let boundary = format!("{:020}", BOUNDARY.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
    let mut pieces = Vec::with_capacity(ranges.len() * 2 + 1);
    let mut total = 0;
    for &(start, end) in ranges {
        let head = format!(
            "\r\n--{boundary}\r\nContent-Type: {kind}\r\nContent-Range: bytes {start}-{}/{len}\r\n\r\n",
            end - 1
        );
        total += head.len() as u64 + (end - start);
        pieces.push(Piece::Text(head));
        pieces.push(Piece::Span(start, end));
    }
    let last = format!("\r\n--{boundary}--\r\n");
    total += last.len() as u64;
    pieces.push(Piece::Text(last));
    (format!("multipart/byteranges; boundary={boundary}"), pieces, total)
}

/// A file's head: `status`, its type (not for a 304), `Last-Modified` and `ETag`.
fn validated(status: u16, v: &Validators, kind: Option<&str>) -> Result<ResponseHeader> {
    let mut h = ResponseHeader::build(status, Some(6))?;
    if let Some(kind) = kind {
        h.insert_header(http::header::CONTENT_TYPE, kind)?;
    }
    h.insert_header(http::header::LAST_MODIFIED, httpdate::fmt_http_date(v.modified()))?;
    h.insert_header(http::header::ETAG, v.etag())?;
    Ok(h)
}

/// An answer without a file: the HTML page of `status`, as Nginx's (with `Content-Range` for a
/// 416).
fn page(status: u16, content_range: Option<String>) -> Result<Answer> {
    let body = shop::page(status);
    let mut h = ResponseHeader::build(status, Some(4))?;
    h.insert_header(http::header::CONTENT_TYPE, "text/html")?;
    h.insert_header(http::header::CONTENT_LENGTH, body.len())?;
    if let Some(r) = content_range {
        h.insert_header(http::header::CONTENT_RANGE, r)?;
    }
    Ok((h, Body::Page(body)))
}

/// Sends the pieces of a file answer, the file's spans a chunk at a time (a file cut short
/// meanwhile ends the connection: the length was promised).
async fn stream(session: &mut Session, mut file: tokio::fs::File, pieces: Vec<Piece>) -> Result<()> {
    let count = pieces.len();
    for (i, piece) in pieces.into_iter().enumerate() {
        let last = i + 1 == count;
        match piece {
            Piece::Text(t) => session.write_response_body(Some(t.into()), last).await?,
            Piece::Span(start, end) => send_span(session, &mut file, start, end - start, last).await?,
        }
    }
    Ok(())
}

/// Sends `len` bytes of `file` from `start` (`last`: the body ends with them).
async fn send_span(
    session: &mut Session,
    file: &mut tokio::fs::File,
    start: u64,
    len: u64,
    last: bool,
) -> Result<()> {
    let io = |e: std::io::Error| Error::because(ErrorType::ReadError, "reading the file", e);
    file.seek(SeekFrom::Start(start)).await.map_err(io)?;
    let mut left = len;
    while left > 0 {
        let mut buf = BytesMut::with_capacity(CHUNK.min(left as usize));
        let n = file.read_buf(&mut buf).await.map_err(io)?;
        if n == 0 {
            return Err(Error::explain(ErrorType::ReadError, "the file got shorter while sent"));
        }
        let n = (n as u64).min(left);
        buf.truncate(n as usize);
        left -= n;
        session.write_response_body(Some(buf.freeze()), last && left == 0).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
