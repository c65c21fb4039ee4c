//! A file answer's validators and what the request's conditions and `Range` make of it, as
//! Nginx's not_modified and range filters decide: `If-Unmodified-Since` / `If-Match` (412),
//! `If-Modified-Since` (exact, Nginx's default `if_modified_since exact`) / `If-None-Match`
//! (304), then `Range` (with `If-Range`): one range 206, several a `multipart/byteranges` 206,
//! none satisfiable 416; ranges adding up past the file answer it whole (200).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// What a file is known by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validators {
    /// Its modification time, seconds since the epoch.
    pub mtime: u64,
    /// Its length.
    pub len: u64,
}

impl Validators {
    /// Of a file's metadata.
    pub fn of(meta: &std::fs::Metadata) -> Self {
        let mtime = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok());
        Self { mtime: mtime.map_or(0, |d| d.as_secs()), len: meta.len() }
    }

    /// `Last-Modified`'s time.
    pub fn modified(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.mtime)
    }

    /// Nginx's `ETag`.
    pub fn etag(&self) -> String {
        etag(self.mtime, self.len)
    }
}

/// Nginx's `ETag` of a file: `"<mtime hex>-<size hex>"`.
pub fn etag(mtime: u64, len: u64) -> String {
    format!("\"{mtime:x}-{len:x}\"")
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// 200, the whole file.
    Whole,
    /// 206, bytes `start..end` (end excluded).
    Range(u64, u64),
    /// 206, `multipart/byteranges` of these, in the order asked.
    Ranges(Vec<(u64, u64)>),
    /// 304.
    NotModified,
    /// 412.
    Failed,
    /// 416.
    Unsatisfiable,
}

fn header(headers: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    headers.get(name).map(|v| v.to_str().unwrap_or(""))
}

/// The seconds of an HTTP date (`None`: not one).
fn time(text: &str) -> Option<u64> {
    httpdate::parse_http_date(text.trim()).ok()?.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// What the request's conditions and range make of a file known by `v`.
pub fn decide(headers: &HeaderMap, v: &Validators) -> Part {
    use http::header::*;
    let etag = v.etag();
    // A date that is not one is earlier than any file (Nginx reads it as -1).
    if header(headers, IF_UNMODIFIED_SINCE).is_some_and(|t| time(t).is_none_or(|t| t < v.mtime)) {
        return Part::Failed;
    }
    if header(headers, IF_MATCH).is_some_and(|list| !matches(list, &etag, false)) {
        return Part::Failed;
    }
    let ims = header(headers, IF_MODIFIED_SINCE);
    let inm = header(headers, IF_NONE_MATCH);
    if (ims.is_some() || inm.is_some())
        && ims.is_none_or(|t| time(t) == Some(v.mtime))
        && inm.is_none_or(|list| matches(list, &etag, true))
    {
        return Part::NotModified;
    }
    let Some(range) = header(headers, RANGE) else { return Part::Whole };
    if let Some(cond) = header(headers, IF_RANGE) {
        let same = match cond.ends_with('"') && cond.len() >= 2 {
            true => cond == etag,
            false => time(cond) == Some(v.mtime),
        };
        if !same {
            return Part::Whole;
        }
    }
    ranges(range, v.len)
}

/// Whether an `If-Match` / `If-None-Match` list names `etag` (`*` does; `weak`: a `W/` tag
/// counts, for `If-None-Match`).
fn matches(list: &str, etag: &str, weak: bool) -> bool {
    if list.trim() == "*" {
        return true;
    }
    list.split(',').map(str::trim).any(|tag| {
        let tag = if weak { tag.strip_prefix("W/").unwrap_or(tag) } else { tag };
        tag == etag
    })
}

/// A `Range` header over `len` bytes, parsed as Nginx's range filter does.
pub fn ranges(value: &str, len: u64) -> Part {
    let Some(spec) = value.get(..6).filter(|b| b.eq_ignore_ascii_case("bytes=")).map(|_| &value[6..]) else {
        return Part::Whole;
    };
    if value.len() < 7 {
        return Part::Whole;
    }
    let mut found = Vec::new();
    let mut size: u64 = 0;
    for one in spec.split(',') {
        let Some((start, end)) = one_range(one, len) else { return Part::Unsatisfiable };
        if start < end {
            found.push((start, end));
            size = size.saturating_add(end - start);
        } else if start == 0 {
            return Part::Whole;
        }
    }
    match found.as_slice() {
        [] => Part::Unsatisfiable,
        _ if size > len => Part::Whole,
        [(start, end)] => Part::Range(*start, *end),
        _ => Part::Ranges(found),
    }
}

/// One `a-b`, `a-` or `-n` (spaces allowed around its parts) → `(start, end)` over `len`
/// (end excluded, cut at `len`); `None`: not a range.
fn one_range(text: &str, len: u64) -> Option<(u64, u64)> {
    let text = text.trim_matches(' ');
    let (a, b) = text.split_once('-')?;
    let (a, b) = (a.trim_matches(' '), b.trim_matches(' '));
    let num = |s: &str| -> Option<u64> {
        match !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) {
            true => s.parse::<u64>().ok().filter(|n| *n <= i64::MAX as u64),
            false => None,
        }
    };
    if a.is_empty() {
        let n = num(b)?;
        return Some((len.saturating_sub(n), len));
    }
    let start = num(a)?;
    if b.is_empty() {
        return Some((start, len));
    }
    let end = num(b)?;
    Some((start, if end >= len { len } else { end + 1 }))
}
