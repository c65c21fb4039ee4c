//! The path a shop route is matched on, as Nginx's: percent-decoded, slashes merged, `.` and
//! `..` resolved (`/%61dmin//x/../` is `/admin/`), so a route fencing a path off cannot be
//! walked around by spelling it differently. The request goes upstream as it came, unless its
//! route rewrites it: then the new path is percent-encoded again ([`encode_path`]).

use std::borrow::Cow;

/// The normalized path, or why the path is refused (answered 400, as Nginx does): a bad
/// `%` escape, an escaped NUL, or `..` above `/`. Bytes that are not UTF-8 once decoded become
/// U+FFFD.
pub fn normalize(path: &str) -> Result<Cow<'_, str>, &'static str> {
    if !path.starts_with('/') || !(path.contains('%') || path.contains("//") || path.contains("/.")) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode(path)?;
    let decoded = String::from_utf8_lossy(&decoded);
    let mut segments: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                segments.pop().ok_or("the path goes above /")?;
            }
            s => segments.push(s),
        }
    }
    let last = decoded.rsplit('/').next().unwrap_or("");
    let mut out = String::with_capacity(decoded.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if segments.is_empty() || matches!(last, "" | "." | "..") {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

fn decode(path: &str) -> Result<Vec<u8>, &'static str> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(0) => return Err("an escaped NUL in the path"),
            Some(b) => out.push(b),
            None => return Err("a bad percent-escape in the path"),
        }
        i += 3;
    }
    Ok(out)
}

/// A rewritten path (and query) made a valid request target again: in the path, every byte
/// but the unreserved ones, sub-delimiters, `:`, `@` and `/` is percent-encoded (a `%` too: the
/// path was decoded); in the query (after the first `?`), only what a URI cannot hold (space,
/// controls, non-ASCII, `"<>\^`{|}#`).
pub fn encode_path(uri: &str) -> String {
    let (path, query) = match uri.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (uri, None),
    };
    let mut out = String::with_capacity(uri.len());
    let path_ok = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
    push_encoded(&mut out, path, path_ok);
    if let Some(q) = query {
        out.push('?');
        push_encoded(&mut out, q, |b| b.is_ascii_graphic() && !b"\"<>\\^`{|}#".contains(&b));
    }
    out
}

fn push_encoded(out: &mut String, text: &str, keep: impl Fn(u8) -> bool) {
    for &b in text.as_bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The name of a `Host` field as sent, without its port and trailing dot (not lowercased).
pub fn host_name(http_host: &str) -> &str {
    let name = match http_host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(http_host, |(a, _)| a),
        None => http_host.rsplit_once(':').map_or(http_host, |(n, _)| n),
    };
    name.trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_matched_as_nginx_normalizes_them() {
        let n = |p| normalize(p).map(|c| c.into_owned());
        assert!(matches!(normalize("/a/b.html"), Ok(Cow::Borrowed(_))), "the usual path costs nothing");
        assert_eq!(n("/%61dmin/x").unwrap(), "/admin/x");
        assert_eq!(n("//admin///x//").unwrap(), "/admin/x/");
        assert_eq!(n("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(n("/a/b/..").unwrap(), "/a/");
        assert_eq!(n("/a/%2e%2e/admin").unwrap(), "/admin");
        assert_eq!(n("/.").unwrap(), "/");
        assert_eq!(n("/a%20b%2Fc").unwrap(), "/a b/c");
        assert_eq!(n("/a%2").unwrap_err(), "a bad percent-escape in the path");
        assert_eq!(n("/a%zz").unwrap_err(), "a bad percent-escape in the path");
        assert_eq!(n("/a%00").unwrap_err(), "an escaped NUL in the path");
        assert_eq!(n("/../etc").unwrap_err(), "the path goes above /");
        assert_eq!(n("*").unwrap(), "*");
    }

    #[test]
    fn a_rewritten_path_is_encoded_again() {
        assert_eq!(encode_path("/a b/100%/é?q=a b&x=%41"), "/a%20b/100%25/%C3%A9?q=a%20b&x=%41");
        assert_eq!(encode_path("/v2/12/user"), "/v2/12/user");
    }
}
