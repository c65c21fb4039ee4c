//! A campaign's global limits (`[[global_limit]]`): counted in Redis for every rule at once,
//! in the order's own `reserve.lua` call ([`protocol::scripts::ReserveCall::limits`]), so the
//! limits hold across every gateway process of the sale at no call of their own: one Redis call
//! per batch of orders for the limits and the reservations. They are decided after the
//! signature and eligibility checks: only signed requests of eligible buyers reach Redis, so a
//! flood of forged requests cannot spend Redis on limits either. Within the call each order's
//! rules are checked before its nonce is spent, in arrival order.
//!
//! Timeouts keep the meaning they had with a call of their own, bounded by the campaign's
//! `[limits] global_timeout_ms`: when a rule is `on_error = "closed"`, an order whose call has
//! not answered within that bound is given up then (undone like any reservation without an
//! answer) and refused with `SERVICE_DEGRADED`; when every rule is `open`, the order waits for
//! its call as long as the reservation may ([`GlobalCheck::bound`]), so a slow Redis never
//! refuses it for its limits.

use std::net::IpAddr;
use std::time::Duration;

use protocol::campaign::Campaign;
use protocol::codes::Code;
use protocol::global_limit::{bucket_max, window_at, GlobalLimit, LimitBy, OnError};
use protocol::keys::Bucket;
use protocol::scripts::LimitRule;

use crate::denial::Denial;

/// The device value of requests without a device id (one shared bucket, as in
/// [`crate::checks::rate_limit`]).
const NO_DEVICE: &str = "(no device)";

/// Who a request is, for the rules' counters.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The client's address, when known.
    pub ip: Option<IpAddr>,
    /// The device id, when sent.
    pub device: Option<&'a str>,
    /// The verified token's user.
    pub user: &'a str,
}

/// An order's global limits, decided once for the request: the rules' counters and bounds in
/// its home bucket, and how long a closed rule lets its call go unanswered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalCheck {
    /// The rules, in the campaign's order, for the order's home bucket ([`limit_rules`]).
    pub rules: Vec<LimitRule>,
    /// Each rule's `by`, for the answer past it.
    pub by: Vec<&'static str>,
    /// With a rule `on_error = "closed"`: `global_timeout_ms`, past which an unanswered call
    /// refuses the order; `None` when every rule is open (or there are none).
    pub closed_within: Option<Duration>,
    /// `global_timeout_ms`, when there are rules.
    pub bound: Option<Duration>,
}

impl GlobalCheck {
    /// The check of `campaign`'s rules for `who` reserving in `home` at `now_ms`.
    pub fn new(campaign: &Campaign, home: &Bucket, who: Subject<'_>, now_ms: u64) -> Self {
        let rules = &campaign.global_limits;
        if rules.is_empty() {
            return Self::default();
        }
        let bound = Duration::from_millis(u64::from(campaign.limits.global_timeout_ms));
        Self {
            rules: limit_rules(home, rules, who, now_ms),
            by: rules.iter().map(|r| r.by.as_str()).collect(),
            closed_within: rules.iter().any(|r| r.on_error == OnError::Closed).then_some(bound),
            bound: Some(bound),
        }
    }

    /// The answer past rule `rule` (an index of [`GlobalCheck::rules`]), `retry_after_ms` before
    /// its window ends.
    pub fn over(&self, rule: usize, retry_after_ms: u64) -> Denial {
        over(self.by.get(rule).copied().unwrap_or("rule"), retry_after_ms)
    }

    /// Whether an order whose reservation took `took` waited past the limits' bound as only an
    /// open rule lets it (under a call of their own, it would have gone on unchecked).
    pub fn waited_open(&self, took: Duration) -> bool {
        self.closed_within.is_none() && self.bound.is_some_and(|b| took > b)
    }
}

/// The counters and bounds of each rule for one request reserving in `home` (pure: keys from
/// the bucket, the subject and the time; a rule's max is the bucket's, [`bucket_max`]).
pub fn limit_rules(home: &Bucket, rules: &[GlobalLimit], who: Subject<'_>, now_ms: u64) -> Vec<LimitRule> {
    let ip = who.ip.map(|ip| ip.to_string());
    rules
        .iter()
        .map(|r| {
            let value = match r.by {
                LimitBy::Ip => ip.as_deref().unwrap_or("(no address)"),
                LimitBy::Device => who.device.unwrap_or(NO_DEVICE),
                LimitBy::User => who.user,
                LimitBy::Campaign => "*",
            };
            let window_ms = u64::from(r.window_secs) * 1000;
            let (window, into_ms) = window_at(now_ms, window_ms);
            LimitRule {
                current: home.keys.global_limit(r.by.as_str(), value, window),
                previous: home.keys.global_limit(r.by.as_str(), value, window.saturating_sub(1)),
                max: bucket_max(r, home.index, home.count),
                window_ms,
                into_ms,
            }
        })
        .collect()
}

/// The answer when the rule counting by `by` is over its max, for `retry_after_ms`.
fn over(by: &str, retry_after_ms: u64) -> Denial {
    let secs = retry_after_ms.div_ceil(1000).clamp(1, 3600) as u32;
    Denial::new(Code::RateLimited, format!("too many requests by this {by} across the sale; retry later"))
        .retry_after(secs)
}

/// The answer when a closed rule's bound passed without the call's answer (and its undo left
/// nothing reserved).
pub fn unchecked() -> Denial {
    Denial::new(
        Code::ServiceDegraded,
        "the global limits could not be checked; nothing was reserved, try again",
    )
    .retry_after(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(by: LimitBy, on_error: OnError) -> GlobalLimit {
        GlobalLimit { by, max: 5, window_secs: 10, on_error }
    }

    fn campaign(rules: &[GlobalLimit]) -> Campaign {
        let text = "id = \"c\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\n\
                    starts_at = 2026-12-01T10:00:00Z\nends_at = 2026-12-01T11:00:00Z\n";
        let mut c = Campaign::parse(std::path::Path::new("c.toml"), text).unwrap();
        c.global_limits = rules.to_vec();
        c
    }

    #[test]
    fn each_rule_counts_its_own_value_in_its_window() {
        let rules = [
            rule(LimitBy::User, OnError::Open),
            rule(LimitBy::Ip, OnError::Open),
            rule(LimitBy::Device, OnError::Open),
            rule(LimitBy::Campaign, OnError::Open),
        ];
        let who = Subject { ip: Some("10.0.0.7".parse().unwrap()), device: None, user: "u1" };
        let calls = limit_rules(&Bucket::nth("c", 0, 1), &rules, who, 123_456);
        assert_eq!(calls[0].current, "sk:{c}:limit:user:u1:12");
        assert_eq!(calls[0].previous, "sk:{c}:limit:user:u1:11");
        assert_eq!(calls[1].current, "sk:{c}:limit:ip:10.0.0.7:12");
        assert_eq!(calls[2].current, "sk:{c}:limit:device:(no device):12", "no device: one shared bucket");
        assert_eq!(calls[3].current, "sk:{c}:limit:campaign:*:12");
        assert_eq!((calls[0].max, calls[0].window_ms, calls[0].into_ms), (5, 10_000, 3_456));
    }

    #[test]
    fn with_buckets_the_counters_share_the_home_buckets_slot_and_split_all_but_the_user_rule() {
        let rules = [rule(LimitBy::User, OnError::Open), rule(LimitBy::Campaign, OnError::Open)];
        let who = Subject { ip: None, device: None, user: "u1" };
        let home = Bucket::nth("c", 1, 3);
        let calls = limit_rules(&home, &rules, who, 0);
        for call in &calls {
            let tag = home.keys.stock.split(':').nth(1).unwrap();
            assert!(call.current.contains(tag) && call.previous.contains(tag), "{call:?} in {tag}");
        }
        assert_eq!((calls[0].max, calls[1].max), (5, 2), "5 over 3 buckets: 2, 2, 1");
    }

    #[test]
    fn a_closed_rule_bounds_the_wait_and_open_ones_let_the_call_run() {
        let who = Subject { ip: None, device: None, user: "u1" };
        let home = Bucket::nth("c", 0, 1);
        let open = GlobalCheck::new(&campaign(&[rule(LimitBy::User, OnError::Open)]), &home, who, 0);
        assert_eq!(open.closed_within, None);
        let bound = open.bound.unwrap();
        assert!(open.waited_open(bound * 2) && !open.waited_open(bound));
        let mixed = [rule(LimitBy::User, OnError::Open), rule(LimitBy::Ip, OnError::Closed)];
        let closed = GlobalCheck::new(&campaign(&mixed), &home, who, 0);
        assert_eq!(closed.closed_within, Some(bound));
        assert!(!closed.waited_open(bound * 2), "a closed rule never waits past its bound");
        assert_eq!(GlobalCheck::new(&campaign(&[]), &home, who, 0), GlobalCheck::default(), "no rules");
        let d = unchecked();
        assert_eq!((d.code, d.retry_after_secs), (Code::ServiceDegraded, Some(1)));
        assert_eq!(closed.over(1, 2_300).retry_after_secs, Some(3));
        assert!(closed.over(1, 0).message.contains("ip"));
    }

    #[test]
    fn over_says_which_rule_and_when_to_come_back() {
        let d = over("user", 2_300);
        assert_eq!((d.code, d.retry_after_secs), (Code::RateLimited, Some(3)));
        assert!(d.message.contains("user"), "{}", d.message);
        assert_eq!(over("ip", 0).retry_after_secs, Some(1), "never 0");
    }
}
