//! The front-door settings of a `[[route]]`: its body limit and its response compression.

use protocol::conf::ConfError;

use super::limits::MAX_BODY_CAP;
use super::{Checker, RawRoute};

/// Highest compression level (brotli's; gzip caps at 9 and zstd reads it as is).
pub const MAX_COMPRESSION_LEVEL: i64 = 11;

/// `(client_max_body_size, compression_level)` of route `prefix` (`route[i]`).
pub(super) fn check(c: &Checker<'_>, prefix: &str, r: &RawRoute) -> Result<(Option<u64>, u32), ConfError> {
    let body = match &r.client_max_body_size {
        Some(v) => Some(c.int(v, &format!("{prefix}.client_max_body_size"), 0, MAX_BODY_CAP)? as u64),
        None => None,
    };
    let level = match &r.compression_level {
        Some(v) => c.int(v, &format!("{prefix}.compression_level"), 0, MAX_COMPRESSION_LEVEL)? as u32,
        None => 0,
    };
    Ok((body, level))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, parse, GOOD};

    #[test]
    fn route_body_limit_and_compression() {
        let c = parse(GOOD).unwrap();
        assert_eq!(
            (c.routes[0].client_max_body_size, c.routes[0].compression_level),
            (None, 0),
            "off by default"
        );
        let with =
            |extra: &str| GOOD.replace("path_prefix = \"/\"", &format!("path_prefix = \"/\"\n{extra}"));
        let c = parse(&with("client_max_body_size = 10\ncompression_level = 6")).unwrap();
        assert_eq!((c.routes[0].client_max_body_size, c.routes[0].compression_level), (Some(10), 6));
        expect_err(&with("compression_level = 12"), 17, "route[0].compression_level", "between 0 and 11");
        expect_err(&with("client_max_body_size = -5"), 17, "route[0].client_max_body_size", "between 0");
    }
}
