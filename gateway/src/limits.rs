//! The front door's limits as pure decisions: what a request head, its header fields and its
//! body size are allowed to be, and which answer a request past a limit gets.
//!
//! The I/O that applies them lives in [`crate::frontdoor`] (the HTTP/1 head, read under a
//! deadline before Pingora parses it) and in the proxy's filters (body size, HTTP/2 fields).

use std::time::Duration;

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use pingora_http::RequestHeader;
use plugins::issue::RESULT_TOKEN_HEADER;
use protocol::codes::Code;
use protocol::signing::{DEVICE_HEADER, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};

/// The limits of the front door (`[limits]` of the server file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line and header fields), in bytes; past it: 431.
    pub max_header_bytes: usize,
    /// Most header fields in one request; past it: 431.
    pub max_headers: usize,
    /// Largest request body, in bytes, for routes without their own `client_max_body_size`
    /// and for campaign paths; past it: 413.
    pub client_max_body_size: u64,
    /// Time a client has to send its whole request head once it started; past it: 408.
    pub client_header_timeout: Duration,
    /// Longest wait between two reads of a request body; past it: 408.
    pub client_body_timeout: Duration,
    /// How long an idle keep-alive connection is kept open (closed silently, like Nginx).
    pub keepalive_timeout: Duration,
    /// Requests served on one connection before it is closed (at least 1).
    pub keepalive_requests: u32,
    /// An upgraded connection (WebSocket) is closed after this long without a byte either way,
    /// in place of the route's read timeout and the body timeout.
    pub upgrade_idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_header_bytes: 32 * 1024,
            max_headers: 100,
            client_max_body_size: 1024 * 1024,
            client_header_timeout: Duration::from_secs(10),
            client_body_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            keepalive_requests: 1000,
            upgrade_idle_timeout: Duration::from_secs(300),
        }
    }
}

/// Why a request is refused at the front door: the answer's code and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The answer code (its HTTP status comes with it).
    pub code: Code,
    /// What is wrong, for the client.
    pub message: &'static str,
}

impl Refusal {
    const fn new(code: Code, message: &'static str) -> Self {
        Self { code, message }
    }
}

/// The refusal of a head that is not complete within `max_header_bytes`.
pub const HEAD_TOO_LARGE: Refusal = Refusal::new(Code::HeadersTooLarge, "the request head is too large");
/// The refusal of a head not received within the header timeout.
pub const HEAD_TIMEOUT: Refusal =
    Refusal::new(Code::RequestTimeout, "the request head was not received in time");
/// The refusal of a body not received within the body timeout.
pub const BODY_TIMEOUT: Refusal =
    Refusal::new(Code::RequestTimeout, "the request body was not received in time");
/// The refusal of a body past the route's limit.
pub const BODY_TOO_LARGE: Refusal =
    Refusal::new(Code::BodyTooLarge, "the request body is larger than this route allows");

/// Fields every request may carry at most once, with the refusal of a second one: two values
/// would make the request mean two things (which host, which body length). Nginx refuses a
/// second `Host` the same way.
const ONCE_EVERYWHERE: [(&str, Refusal); 2] = [
    ("host", Refusal::new(Code::BadRequest, "two Host headers: the request is ambiguous")),
    (
        "content-length",
        Refusal::new(Code::BadRequest, "two Content-Length headers: the request is ambiguous"),
    ),
];

/// Fields the sale reads (the login or campaign token, the device, the request signature),
/// which a request to the gateway's own paths may carry at most once: with two values the
/// checks would read one and a later reader perhaps the other.
const ONCE_FOR_THE_SALE: [(&str, Refusal); 6] = [
    ("authorization", Refusal::new(Code::BadRequest, "two Authorization headers: the request is ambiguous")),
    (DEVICE_HEADER, Refusal::new(Code::BadRequest, "two X-Device-Id headers: the request is ambiguous")),
    (TIMESTAMP_HEADER, Refusal::new(Code::BadRequest, "two X-Timestamp headers: the request is ambiguous")),
    (NONCE_HEADER, Refusal::new(Code::BadRequest, "two X-Nonce headers: the request is ambiguous")),
    (SIGNATURE_HEADER, Refusal::new(Code::BadRequest, "two X-Signature headers: the request is ambiguous")),
    (
        RESULT_TOKEN_HEADER,
        Refusal::new(Code::BadRequest, "two X-Result-Token headers: the request is ambiguous"),
    ),
];

/// The refusal of the first field of `once` that `headers` carries more than once.
fn check_once(headers: &http::HeaderMap, once: &[(&str, Refusal)]) -> Result<(), Refusal> {
    match once.iter().find(|(name, _)| headers.get_all(*name).iter().nth(1).is_some()) {
        Some((_, refusal)) => Err(*refusal),
        None => Ok(()),
    }
}

/// Checks a request to the gateway's own paths (`/seckill/...`): each field the sale reads at
/// most once (`ONCE_FOR_THE_SALE`).
pub fn check_sale_fields(req: &RequestHeader) -> Result<(), Refusal> {
    check_once(&req.headers, &ONCE_FOR_THE_SALE)
}

/// Where the head in `buf` ends (the index just past its blank line), if it is complete.
/// Lines may end in CRLF or a bare LF, as Pingora's parser accepts both.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    // Empty lines before the request line are ignored (RFC 9112 section 2.2).
    let mut i = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    while let Some(nl) = buf[i..].iter().position(|&b| b == b'\n') {
        let next = i + nl + 1;
        match (buf.get(next), buf.get(next + 1)) {
            (Some(b'\n'), _) => return Some(next + 1),
            (Some(b'\r'), Some(b'\n')) => return Some(next + 2),
            _ => i = next,
        }
    }
    None
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A control character other than horizontal tab (RFC 9110 forbids them in field values).
fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// Checks a complete HTTP/1 request head (as [`head_end`] delimits it): no control characters
/// in the request line, header names that are tokens, values without control characters, no
/// obsolete line folding, at most `max_headers` fields, `Host` and `Content-Length` at most once
/// (Pingora would refuse a second `Content-Length` with a bare 400), a `Content-Length` of digits
/// only, a `Transfer-Encoding` of `chunked` only (once), and never both
/// `Content-Length` and `Transfer-Encoding` (request smuggling: Nginx refuses it with 400 as
/// well).
pub fn check_head(head: &[u8], max_headers: usize) -> Result<(), Refusal> {
    let bad = |m| Err(Refusal::new(Code::BadRequest, m));
    let start = head.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(head.len());
    let mut lines = head[start..].split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().unwrap_or_default();
    if request_line.iter().any(|&b| is_ctl(b)) {
        return bad("control character in the request line");
    }
    let (mut fields, mut content_length, mut transfer_encoding) = (0usize, false, false);
    let mut seen = [0usize; ONCE_EVERYWHERE.len()];
    for line in lines.filter(|l| !l.is_empty()) {
        if line[0] == b' ' || line[0] == b'\t' {
            return bad("obsolete line folding in a header field");
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return bad("a header line without a colon");
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return bad("invalid character in a header name");
        }
        if value.iter().any(|&b| is_ctl(b)) {
            return bad("control character in a header value");
        }
        for (count, (once, refusal)) in seen.iter_mut().zip(&ONCE_EVERYWHERE) {
            if name.eq_ignore_ascii_case(once.as_bytes()) {
                *count += 1;
                if *count > 1 {
                    return Err(*refusal);
                }
            }
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            content_length = true;
            // One decimal length: a list (`5, 5`) or a sign is refused rather than reconciled.
            let v = value.trim_ascii();
            if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
                return bad("Content-Length must be one decimal number");
            }
        }
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The only coding the gateway reads is chunked, once (a second line would make a list).
            if transfer_encoding || !value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return bad("unsupported Transfer-Encoding: only chunked is read");
            }
            transfer_encoding = true;
        }
        fields += 1;
        if fields > max_headers {
            return Err(Refusal::new(Code::HeadersTooLarge, "too many header fields"));
        }
    }
    if content_length && transfer_encoding {
        return bad("both Content-Length and Transfer-Encoding (request smuggling)");
    }
    Ok(())
}

/// Whether `buf`, a complete head and whatever was read with it, holds bytes past this request:
/// the next request, pipelined (its `Content-Length` body, if any, set aside). Those bytes are
/// the proxy's prefix and would be lost when the connection is reused, so the caller answers
/// this request with `Connection: close` (RFC 9112 section 9.3.2) and the next one is never run.
/// A chunked body's end is not known here: `false`.
pub fn pipelined(buf: &[u8]) -> bool {
    let Some(end) = head_end(buf) else { return false };
    if end == buf.len() {
        return false; // nothing read past the head: the usual case, without reading its fields
    }
    let mut body = 0usize;
    for line in buf[..end].split(|&b| b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return false;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            body = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()).unwrap_or(usize::MAX);
        }
    }
    buf.len() - end > body
}

/// An absolute-form request target (`GET http://admin.shop/x HTTP/1.1`) names its host itself:
/// the target's authority wins over any `Host` field, which is replaced (RFC 9112 section
/// 3.2.2), so the route chosen and the host the upstream is told are one. Given a complete head
/// that [`check_head`] passed (so at most one `Host`), returns it rewritten with its `Host` line
/// replaced by `Host: <authority>` (added after the request line when there was none), or `None`
/// when the target is not an `http`/`https` absolute form (nothing to change). A target with
/// userinfo (`http://user@host/`) is refused: which part is the host is ambiguous.
pub fn absolute_form_host(head: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
    let start = head.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(head.len());
    let line_end = head[start..].iter().position(|&b| b == b'\n').map_or(head.len(), |i| start + i + 1);
    let request_line = &head[start..line_end];
    let Some(target) = request_line.split(|&b| b == b' ').nth(1) else {
        return Ok(None);
    };
    if target.first() == Some(&b'/') {
        return Ok(None); // the origin form, as nearly every request's
    }
    let Some(scheme_end) = target.windows(3).position(|w| w == b"://") else {
        return Ok(None);
    };
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case(b"http") && !scheme.eq_ignore_ascii_case(b"https") {
        return Ok(None);
    }
    let rest = &target[scheme_end + 3..];
    let authority = &rest[..rest.iter().position(|&b| matches!(b, b'/' | b'?' | b'#')).unwrap_or(rest.len())];
    if authority.contains(&b'@') {
        return Err(Refusal::new(Code::BadRequest, "userinfo in the request target: the host is ambiguous"));
    }
    if authority.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(head.len() + authority.len() + 8);
    out.extend_from_slice(&head[..line_end]);
    out.extend_from_slice(b"Host: ");
    out.extend_from_slice(authority);
    out.extend_from_slice(b"\r\n");
    for line in head[line_end..].split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if line.contains(&b':') && name.eq_ignore_ascii_case(b"host") {
            continue;
        }
        out.extend_from_slice(line);
    }
    Ok(Some(out))
}

/// Checks a parsed request's fields against the limits: the count, and their size counted as
/// HTTP/2 does (name + value + 32 per field). HTTP/1 heads were checked whole already; this is
/// what bounds HTTP/2 requests. Also refuses a second `Host` or `Content-Length`, and
/// `Content-Length` with `Transfer-Encoding`.
pub fn check_fields(req: &RequestHeader, limits: &Limits) -> Result<(), Refusal> {
    let headers = &req.headers;
    if headers.len() > limits.max_headers {
        return Err(Refusal::new(Code::HeadersTooLarge, "too many header fields"));
    }
    let size: usize = headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 32).sum();
    let uri = req.uri.path_and_query().map_or(0, |p| p.as_str().len())
        + req.uri.authority().map_or(0, |a| a.as_str().len());
    if size + uri > limits.max_header_bytes {
        return Err(HEAD_TOO_LARGE);
    }
    check_once(headers, &ONCE_EVERYWHERE)?;
    if headers.contains_key(CONTENT_LENGTH) && headers.contains_key(TRANSFER_ENCODING) {
        return Err(Refusal::new(
            Code::BadRequest,
            "both Content-Length and Transfer-Encoding (request smuggling)",
        ));
    }
    Ok(())
}

/// Checks a declared `Content-Length` against `max` (a body without one is counted as it
/// arrives, by [`BodyCount`]).
pub fn check_content_length(req: &RequestHeader, max: u64) -> Result<(), Refusal> {
    let declared = req.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    match declared {
        Some(n) if n > max => Err(BODY_TOO_LARGE),
        _ => Ok(()),
    }
}

/// Counts the body bytes of one request against its limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BodyCount {
    /// The limit, in bytes.
    pub max: u64,
    /// Bytes seen so far.
    pub seen: u64,
}

impl BodyCount {
    /// Adds a chunk; `Err` once the body is past the limit.
    pub fn add(&mut self, chunk: usize) -> Result<(), Refusal> {
        self.seen = self.seen.saturating_add(chunk as u64);
        if self.seen > self.max {
            return Err(BODY_TOO_LARGE);
        }
        Ok(())
    }
}

/// The raw HTTP/1.1 answer of a refusal made before Pingora parsed the request (the connection
/// closes after it): the usual JSON body `{code, message, request_id}`.
pub fn raw_answer(refusal: &Refusal, request_id: &str) -> Vec<u8> {
    let body = protocol::codes::Answer { code: refusal.code, message: refusal.message, request_id }.to_json();
    let status = refusal.code.status();
    let reason = http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests;
