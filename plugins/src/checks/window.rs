//! The sale window, by server time: clients' clocks are never trusted.

use chrono::{DateTime, Utc};
use protocol::campaign::{Campaign, Window};
use protocol::codes::Code;

use crate::denial::Denial;

/// `Ok` while the campaign's window is open at `now`; `NOT_STARTED` (with a `Retry-After` of
/// the seconds left, at most an hour) or `ENDED` otherwise. `extended_ms`: the end `order-writer
/// campaign extend` set (ms since the epoch), which counts when it is later than the file's.
pub fn check(campaign: &Campaign, now: DateTime<Utc>, extended_ms: Option<i64>) -> Result<(), Denial> {
    let extended = extended_ms.and_then(DateTime::from_timestamp_millis);
    match campaign.window(now) {
        Window::Open => Ok(()),
        Window::Ended if extended.is_some_and(|end| now < end) => Ok(()),
        Window::NotStarted => {
            let secs = (campaign.starts_at.to_utc() - now).num_seconds().clamp(1, 3600) as u32;
            Err(Denial::new(Code::NotStarted, "the sale has not started").retry_after(secs))
        }
        Window::Ended => Err(Denial::new(Code::Ended, "the sale has ended")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn campaign() -> Campaign {
        let text = r#"
id = "w"
sku = "S"
stock = 1
per_user_limit = 1
price_cents = 1
starts_at = 2026-12-01T10:00:00Z
ends_at = 2026-12-01T11:00:00Z
"#;
        Campaign::parse(Path::new("w.toml"), text).unwrap()
    }

    #[test]
    fn before_during_and_after() {
        let c = campaign();
        let start = c.starts_at.to_utc();
        let early = check(&c, start - chrono::Duration::seconds(30), None).unwrap_err();
        assert_eq!(early.code, Code::NotStarted);
        assert_eq!(early.retry_after_secs, Some(30));
        assert!(check(&c, start, None).is_ok());
        let end = c.ends_at.to_utc();
        assert_eq!(check(&c, end, None).unwrap_err().code, Code::Ended);
        let later = (end + chrono::Duration::minutes(5)).timestamp_millis();
        assert!(check(&c, end, Some(later)).is_ok(), "extended");
        let past = end + chrono::Duration::minutes(5);
        assert_eq!(check(&c, past, Some(later)).unwrap_err().code, Code::Ended);
        let early_end = (end - chrono::Duration::minutes(5)).timestamp_millis();
        assert_eq!(check(&c, end, Some(early_end)).unwrap_err().code, Code::Ended, "never shortened");
    }
}
