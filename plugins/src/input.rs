//! The two inputs of an order request: the buyer and the quantity.
//!
//! For now the buyer comes from the `x-user-id` header; the captcha JWT will carry it later.

use std::borrow::Cow;

use protocol::codes::Code;

use crate::Denial;

/// Header naming the buyer.
pub const USER_HEADER: &str = "x-user-id";
/// Header naming the device (used by the device rate limit).
pub const DEVICE_HEADER: &str = "x-device-id";
/// Longest accepted user id.
pub const MAX_USER_LEN: usize = 128;

fn bad(message: impl Into<Cow<'static, str>>) -> Denial {
    Denial::new(Code::BadRequest, message)
}

/// Whether `b` may appear in a user or device id: `A-Z a-z 0-9 _ - . : @`.
fn safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'@')
}

/// The user id from the raw `x-user-id` header value: 1 to 128 characters of
/// `A-Z a-z 0-9 _ - . : @`.
pub fn user_id(header: Option<&[u8]>) -> Result<&str, Denial> {
    let raw = header.ok_or_else(|| bad("header x-user-id is required"))?;
    if raw.is_empty() || raw.len() > MAX_USER_LEN {
        return Err(bad("header x-user-id must be 1 to 128 characters"));
    }
    if !raw.iter().all(|&b| safe(b)) {
        return Err(bad("header x-user-id may only hold A-Z a-z 0-9 _ - . : @"));
    }
    // All bytes are ASCII, checked above.
    std::str::from_utf8(raw).map_err(|_| bad("header x-user-id is not text"))
}

/// The device id from the raw `x-device-id` header, if present and well-formed (same charset
/// and length as a user id); a malformed one is refused.
pub fn device_id(header: Option<&[u8]>) -> Result<Option<&str>, Denial> {
    match header {
        None => Ok(None),
        Some(raw) if raw.is_empty() || raw.len() > MAX_USER_LEN || !raw.iter().all(|&b| safe(b)) => {
            Err(bad("header x-device-id must be 1 to 128 characters of A-Z a-z 0-9 _ - . : @"))
        }
        Some(raw) => Ok(std::str::from_utf8(raw).ok()),
    }
}

/// The quantity from the query string (`qty=N`, default 1): an integer of at least 1.
/// Whether it fits the campaign's per-user limit is decided by the reservation script.
pub fn qty(query: Option<&str>) -> Result<i64, Denial> {
    let Some(query) = query else { return Ok(1) };
    let mut found = None;
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("qty=") {
            if found.is_some() {
                return Err(bad("query parameter qty is given twice"));
            }
            found = Some(v);
        }
    }
    match found {
        None => Ok(1),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(bad("query parameter qty must be an integer of at least 1")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids() {
        assert_eq!(user_id(Some(b"u-1@shop.example:7")).unwrap(), "u-1@shop.example:7");
        for bad_value in [&b""[..], b"has space", b"semi;colon", "é".as_bytes(), &[b'a'; 129][..]] {
            let err = user_id(Some(bad_value)).unwrap_err();
            assert_eq!(err.code, Code::BadRequest, "{bad_value:?}");
            assert!(err.message.contains("x-user-id"));
        }
        assert!(user_id(None).unwrap_err().message.contains("required"));
        assert!(user_id(Some(&[b'a'; 128])).is_ok());
    }

    #[test]
    fn quantities() {
        assert_eq!(qty(None).unwrap(), 1);
        assert_eq!(qty(Some("a=b")).unwrap(), 1);
        assert_eq!(qty(Some("a=b&qty=3")).unwrap(), 3);
        for q in ["qty=0", "qty=-1", "qty=abc", "qty=", "qty=1.5", "qty=1&qty=2", "qty=99999999999999999999"]
        {
            assert_eq!(qty(Some(q)).unwrap_err().code, Code::BadRequest, "{q}");
        }
    }

    #[test]
    fn device_ids() {
        assert_eq!(device_id(None).unwrap(), None);
        assert_eq!(device_id(Some(b"dev-1")).unwrap(), Some("dev-1"));
        assert!(device_id(Some(b"a b")).is_err());
    }
}
