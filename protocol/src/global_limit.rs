//! A campaign's global limits: `[[global_limit]]` rules counted in Redis, so that they hold across
//! every gateway process of the sale (the `[limits]` rates are per process). Each rule counts
//! one dimension (address, device, account or the whole campaign) over a sliding window
//! (the current fixed window plus the previous one weighted by how much of it still overlaps),
//! and says what happens when Redis does not answer in time: let the request go on (`open`) or
//! refuse it (`closed`). The rules are counted in the order's own `reserve.lua` call, before its
//! nonce is spent: one Redis call per batch of orders for the limits and the reservations.
//!
//! Every key of one script call shares one hash tag (one Cluster slot), so a rule's counters
//! live in the order's home bucket ([`bucket_max`]): a rule by `user` counts there with its
//! whole `max` (a buyer only ever reserves in their home bucket, so the count is the same as one
//! counter for the campaign); a rule by `ip`, `device` or `campaign` counts in each bucket with
//! the bucket's share of its `max` (the shares sum to `max`, so the rule is never exceeded
//! across the sale, but the traffic of one address that spreads over buckets unevenly meets
//! its bucket's share first). With buckets, such a rule's `max` is at least the bucket count.
//!
//! ```toml
//! [[global_limit]]
//! by = "user"            # "ip" | "device" | "user" | "campaign"
//! max = 10               # requests in any window_secs, across every gateway
//! window_secs = 10
//! on_error = "open"      # Redis slow or down: "open" lets the request on, "closed" refuses it
//! ```

use serde::Deserialize;
use toml::Spanned;

use crate::conf::{Checker, ConfError};

/// What a rule counts requests by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitBy {
    /// The client's address (as `[server] trusted_proxies` resolves it).
    Ip,
    /// The `X-Device-Id` (a request without one counts in one shared "no device" bucket).
    Device,
    /// The verified campaign token's user.
    User,
    /// Every order request of the campaign.
    Campaign,
}

impl LimitBy {
    /// The rule's name in keys, logs and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitBy::Ip => "ip",
            LimitBy::Device => "device",
            LimitBy::User => "user",
            LimitBy::Campaign => "campaign",
        }
    }
}

/// What a rule does when Redis does not answer within the campaign's
/// `[limits] global_timeout_ms` (or fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The request goes on as if the rule had passed (availability first; the per-process
    /// `[limits]` still apply).
    Open,
    /// The request is refused with `SERVICE_DEGRADED` (503, `Retry-After`).
    Closed,
}

/// One validated `[[global_limit]]` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalLimit {
    /// What it counts by.
    pub by: LimitBy,
    /// Requests allowed in any window of `window_secs`, across every gateway (1..=1,000,000).
    pub max: u32,
    /// The sliding window's length in seconds (1..=3,600).
    pub window_secs: u32,
    /// What happens when Redis does not answer in time.
    pub on_error: OnError,
}

/// `[[global_limit]]` as written (spans kept for errors).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGlobalLimit {
    by: Spanned<LimitBy>,
    max: Spanned<i64>,
    window_secs: Spanned<i64>,
    on_error: OnError,
}

impl RawGlobalLimit {
    pub(crate) fn check(&self, c: &Checker<'_>) -> Result<GlobalLimit, ConfError> {
        Ok(GlobalLimit {
            by: *self.by.get_ref(),
            max: c.bounded(&self.max, "global_limit.max", 1, 1_000_000)?,
            window_secs: c.bounded(&self.window_secs, "global_limit.window_secs", 1, 3_600)?,
            on_error: self.on_error,
        })
    }

    /// Where `max` is written.
    pub(crate) fn max_span(&self) -> std::ops::Range<usize> {
        self.max.span()
    }

    /// Where `by` is written.
    pub(crate) fn by_span(&self) -> std::ops::Range<usize> {
        self.by.span()
    }
}

/// Checks a campaign's rules as a whole: at most one rule per dimension (two rules on one
/// dimension would share a counter). Returns the index of the first repeated rule.
pub(crate) fn repeated(rules: &[GlobalLimit]) -> Option<usize> {
    (1..rules.len()).find(|&i| rules[..i].iter().any(|r| r.by == rules[i].by))
}

/// What `rule` allows in bucket `index` of `count`: its whole max for a rule by user (a buyer
/// reserves in their home bucket only), else the bucket's share of it (`max / count`, the
/// remainder one each to the first buckets: the shares sum to `max`).
pub fn bucket_max(rule: &GlobalLimit, index: u32, count: u32) -> u32 {
    let count = count.max(1);
    if rule.by == LimitBy::User {
        return rule.max;
    }
    rule.max / count + u32::from(index % count < rule.max % count)
}

/// The first rule (by index) that a campaign of `buckets` buckets cannot split: a rule by ip,
/// device or campaign with fewer than one request per bucket.
pub(crate) fn unsplittable(rules: &[GlobalLimit], buckets: u32) -> Option<usize> {
    rules.iter().position(|r| r.by != LimitBy::User && r.max < buckets)
}

/// The window a time falls in, for a window of `window_ms`: (its number, ms into it).
pub fn window_at(now_ms: u64, window_ms: u64) -> (u64, u64) {
    let window_ms = window_ms.max(1);
    (now_ms / window_ms, now_ms % window_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_numbered_from_the_epoch() {
        assert_eq!(window_at(25_300, 10_000), (2, 5_300));
        assert_eq!(window_at(0, 1_000), (0, 0));
        assert_eq!(window_at(7, 0), (7, 0), "a zero window never divides by zero");
    }

    #[test]
    fn a_user_rule_keeps_its_max_in_every_bucket_and_others_split_it() {
        let rule = |by, max| GlobalLimit { by, max, window_secs: 1, on_error: OnError::Open };
        assert_eq!((0..3).map(|i| bucket_max(&rule(LimitBy::User, 5), i, 3)).collect::<Vec<_>>(), [5, 5, 5]);
        let split: Vec<u32> = (0..3).map(|i| bucket_max(&rule(LimitBy::Ip, 10), i, 3)).collect();
        assert_eq!(split, [4, 3, 3]);
        assert_eq!(split.iter().sum::<u32>(), 10, "the shares sum to the max");
        assert_eq!(bucket_max(&rule(LimitBy::Campaign, 7), 0, 1), 7, "one bucket: the whole max");
        let rules = [rule(LimitBy::User, 1), rule(LimitBy::Device, 2)];
        assert_eq!(unsplittable(&rules, 2), None);
        assert_eq!(unsplittable(&rules, 3), Some(1), "2 requests cannot split over 3 buckets");
    }

    #[test]
    fn one_rule_per_dimension() {
        let rule = |by| GlobalLimit { by, max: 1, window_secs: 1, on_error: OnError::Open };
        assert_eq!(repeated(&[rule(LimitBy::User), rule(LimitBy::Ip)]), None);
        assert_eq!(repeated(&[rule(LimitBy::User), rule(LimitBy::Ip), rule(LimitBy::User)]), Some(2));
    }
}
