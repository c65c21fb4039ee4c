//! The `[limits]` table of the server file: the front door's limits and timeouts
//! ([`crate::limits::Limits`]), every one with a default.

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{Checker, S};
use crate::limits::Limits;

/// Pingora's HTTP/1 parser stops at 256 fields (a bare 400): the limit stays below.
pub const MAX_HEADERS_CAP: i64 = 256;
/// Pingora's HTTP/1 parser stops at 1 MiB of head.
pub const MAX_HEADER_BYTES_CAP: i64 = 1024 * 1024 - 1;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_header_bytes: Option<S<i64>>,
    max_headers: Option<S<i64>>,
    client_max_body_size: Option<S<i64>>,
    client_header_timeout_ms: Option<S<i64>>,
    client_body_timeout_ms: Option<S<i64>>,
    keepalive_timeout_ms: Option<S<i64>>,
    keepalive_requests: Option<S<i64>>,
    upgrade_idle_timeout_ms: Option<S<i64>>,
}

/// The largest `client_max_body_size` accepted (1 GiB).
pub(super) const MAX_BODY_CAP: i64 = 1 << 30;

/// Validates the table; an absent value keeps its default.
pub(super) fn check(c: &Checker<'_>, raw: &RawLimits) -> Result<Limits, ConfError> {
    let d = Limits::default();
    let int = |v: &Option<S<i64>>, field: &str, min: i64, max: i64, default: usize| match v {
        Some(v) => c.int(v, field, min, max),
        None => Ok(default),
    };
    let ms = |v: &Option<S<i64>>, field: &str, min: i64, max: i64, default| match v {
        Some(v) => c.ms(v, field, min, max),
        None => Ok(default),
    };
    Ok(Limits {
        max_header_bytes: int(
            &raw.max_header_bytes,
            "limits.max_header_bytes",
            1024,
            MAX_HEADER_BYTES_CAP,
            d.max_header_bytes,
        )?,
        max_headers: int(&raw.max_headers, "limits.max_headers", 8, MAX_HEADERS_CAP, d.max_headers)?,
        client_max_body_size: int(
            &raw.client_max_body_size,
            "limits.client_max_body_size",
            0,
            MAX_BODY_CAP,
            d.client_max_body_size as usize,
        )? as u64,
        client_header_timeout: ms(
            &raw.client_header_timeout_ms,
            "limits.client_header_timeout_ms",
            100,
            300_000,
            d.client_header_timeout,
        )?,
        client_body_timeout: ms(
            &raw.client_body_timeout_ms,
            "limits.client_body_timeout_ms",
            100,
            300_000,
            d.client_body_timeout,
        )?,
        keepalive_timeout: ms(
            &raw.keepalive_timeout_ms,
            "limits.keepalive_timeout_ms",
            1000,
            3_600_000,
            d.keepalive_timeout,
        )?,
        keepalive_requests: int(
            &raw.keepalive_requests,
            "limits.keepalive_requests",
            1,
            1_000_000,
            d.keepalive_requests as usize,
        )? as u32,
        upgrade_idle_timeout: ms(
            &raw.upgrade_idle_timeout_ms,
            "limits.upgrade_idle_timeout_ms",
            1000,
            86_400_000,
            d.upgrade_idle_timeout,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, parse, GOOD};
    use crate::limits::Limits;
    use std::time::Duration;

    #[test]
    fn limits_have_defaults_and_bounds() {
        assert_eq!(parse(GOOD).unwrap().limits, Limits::default());
        let with = |lines: &str| format!("{GOOD}\n[limits]\n{lines}\n");
        let l = parse(&with("max_header_bytes = 8192\nkeepalive_requests = 1\nclient_body_timeout_ms = 500"))
            .unwrap()
            .limits;
        assert_eq!((l.max_header_bytes, l.keepalive_requests), (8192, 1));
        assert_eq!(l.client_body_timeout, Duration::from_millis(500));
        assert_eq!(l.max_headers, Limits::default().max_headers);
        let line = GOOD.lines().count() + 3;
        expect_err(&with("max_headers = 300"), line, "limits.max_headers", "between 8 and 256");
        expect_err(&with("max_header_bytes = 10"), line, "limits.max_header_bytes", "between 1024");
        expect_err(&with("client_max_body_size = -1"), line, "limits.client_max_body_size", "between 0");
        expect_err(&with("keepalive_requests = 0"), line, "limits.keepalive_requests", "between 1");
        expect_err(&with("client_header_timeout_ms = 5"), line, "limits.client_header_timeout_ms", "(ms)");
        expect_err(&with("max_body = 1"), line, "max_body", "unknown field");
    }
}
