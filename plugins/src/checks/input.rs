//! The plain inputs of an order request: the device id and the quantity. The buyer is never
//! taken from a header: it is the verified campaign token's user (`crate::issue::token`).

use std::borrow::Cow;

use protocol::codes::Code;

use crate::denial::Denial;

/// Header naming the device (the device rate limit; the campaign token is bound to it).
pub const DEVICE_HEADER: &str = protocol::signing::DEVICE_HEADER;
/// Longest accepted device id.
pub const MAX_ID_LEN: usize = crate::issue::auth::MAX_USER_LEN;

fn bad(message: impl Into<Cow<'static, str>>) -> Denial {
    Denial::new(Code::BadRequest, message)
}

fn safe(b: u8) -> bool {
    crate::issue::auth::id_byte(b)
}

/// The device id from the raw `x-device-id` header, if present and well-formed (1 to 128 of
/// `A-Z a-z 0-9 _ - . : @`); a malformed one is refused.
pub fn device_id(header: Option<&[u8]>) -> Result<Option<&str>, Denial> {
    match header {
        None => Ok(None),
        Some(raw) if raw.is_empty() || raw.len() > MAX_ID_LEN || !raw.iter().all(|&b| safe(b)) => {
            Err(bad("header x-device-id must be 1 to 128 characters of A-Z a-z 0-9 _ - . : @"))
        }
        Some(raw) => Ok(std::str::from_utf8(raw).ok()),
    }
}

/// The quantity from the query string (`qty=N`, default 1): an integer of at least 1, in
/// plain decimal digits (no sign, no leading zero: `qty=+1` and `qty=01` are refused, so one
/// quantity has one spelling). Whether it fits the campaign's per-user limit is decided by the
/// reservation script.
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
            Ok(n) if n >= 1 && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0') => Ok(n),
            _ => Err(bad("query parameter qty must be an integer of at least 1, in digits without a sign or leading zero")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(qty(None).unwrap(), 1);
        assert_eq!(qty(Some("a=b")).unwrap(), 1);
        assert_eq!(qty(Some("a=b&qty=3")).unwrap(), 3);
        assert_eq!(qty(Some("qty=10")).unwrap(), 10);
        for q in [
            "qty=0",
            "qty=-1",
            "qty=abc",
            "qty=",
            "qty=1.5",
            "qty=1&qty=2",
            "qty=99999999999999999999",
            "qty=+1",
            "qty=01",
            "qty=00",
            "qty= 1",
        ] {
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
