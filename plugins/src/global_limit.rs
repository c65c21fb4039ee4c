//! A campaign's global limits (`[[global_limit]]`): one `EVALSHA` of `lua/limit.lua` counting
//! the request in Redis for every rule at once, so the limits hold across every gateway process
//! of the sale. It runs after the signature and eligibility checks, just before the
//! reservation: only signed requests of eligible buyers cost a Redis call, so a flood of forged
//! requests cannot spend Redis on limits either.
//!
//! The call is bounded by the campaign's `[limits] global_timeout_ms`. When Redis does not
//! answer in time (or fails), each rule does what its `on_error` says: `open` lets the request
//! on (the per-process `[limits]` still hold), `closed` refuses it with `SERVICE_DEGRADED`.

use std::net::IpAddr;
use std::time::Duration;

use fred::clients::Pool;
use protocol::campaign::Campaign;
use protocol::codes::Code;
use protocol::global_limit::{window_at, GlobalLimit, LimitBy, OnError};
use protocol::keys::CampaignKeys;
use protocol::scripts::{LimitOutcome, LimitRule, Scripts};

use crate::Denial;

/// The device value of requests without a device id (one shared bucket, as in
/// [`crate::rate_limit`]).
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

/// How a passed check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// The campaign has no global limits: no Redis call.
    NoRules,
    /// Redis counted the request under every rule.
    Counted,
    /// Redis did not answer in time (or failed), and every rule is `on_error = "open"`.
    FailedOpen,
}

/// Runs the global limits over the gateway's Redis pool.
#[derive(Clone)]
pub struct GlobalLimiter {
    pool: Pool,
    scripts: Scripts,
}

impl std::fmt::Debug for GlobalLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GlobalLimiter(..)")
    }
}

impl GlobalLimiter {
    /// A limiter over `pool`, running `scripts`' `limit.lua`.
    pub fn new(pool: Pool, scripts: Scripts) -> Self {
        Self { pool, scripts }
    }

    /// Counts the request of `who` under `campaign`'s rules at `now_ms`: `Ok` when it may go
    /// on, `RATE_LIMITED` (429, `Retry-After`) past a rule's max, `SERVICE_DEGRADED` when Redis
    /// did not answer and a rule is `on_error = "closed"`.
    pub async fn check(&self, campaign: &Campaign, who: Subject<'_>, now_ms: u64) -> Result<Checked, Denial> {
        let rules = &campaign.global_limits;
        if rules.is_empty() {
            return Ok(Checked::NoRules);
        }
        let calls = limit_rules(&campaign.id, rules, who, now_ms);
        let timeout = Duration::from_millis(u64::from(campaign.limits.global_timeout_ms));
        let call = self.scripts.limit(self.pool.next_connected(), &calls);
        let failure = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(LimitOutcome::Passed)) => return Ok(Checked::Counted),
            Ok(Ok(LimitOutcome::Over { rule, retry_after_ms })) => {
                return Err(over(rules.get(rule).map_or("rule", |r| r.by.as_str()), retry_after_ms))
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("redis did not answer within {timeout:?}"),
        };
        on_failure(rules, &failure)
    }
}

/// The counters and bounds of each rule for one request (pure: keys from the campaign, the
/// subject and the time).
pub fn limit_rules(campaign: &str, rules: &[GlobalLimit], who: Subject<'_>, now_ms: u64) -> Vec<LimitRule> {
    let keys = CampaignKeys::new(campaign);
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
                current: keys.global_limit(r.by.as_str(), value, window),
                previous: keys.global_limit(r.by.as_str(), value, window.saturating_sub(1)),
                max: r.max,
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

/// What the rules say when Redis gave no answer (`failure` says why): refuse if any rule is
/// fail-closed, else let the request on.
pub fn on_failure(rules: &[GlobalLimit], failure: &str) -> Result<Checked, Denial> {
    if rules.iter().any(|r| r.on_error == OnError::Closed) {
        tracing::warn!(failure, "global limits unchecked: refusing (a rule is on_error = \"closed\")");
        return Err(Denial::new(
            Code::ServiceDegraded,
            "the global limits could not be checked; nothing was reserved, try again",
        )
        .retry_after(1));
    }
    tracing::debug!(failure, "global limits unchecked: letting the request on (every rule is open)");
    Ok(Checked::FailedOpen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(by: LimitBy, on_error: OnError) -> GlobalLimit {
        GlobalLimit { by, max: 5, window_secs: 10, on_error }
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
        let calls = limit_rules("c", &rules, who, 123_456);
        assert_eq!(calls[0].current, "sk:{c}:limit:user:u1:12");
        assert_eq!(calls[0].previous, "sk:{c}:limit:user:u1:11");
        assert_eq!(calls[1].current, "sk:{c}:limit:ip:10.0.0.7:12");
        assert_eq!(calls[2].current, "sk:{c}:limit:device:(no device):12", "no device: one shared bucket");
        assert_eq!(calls[3].current, "sk:{c}:limit:campaign:*:12");
        assert_eq!((calls[0].max, calls[0].window_ms, calls[0].into_ms), (5, 10_000, 3_456));
    }

    #[test]
    fn a_closed_rule_refuses_when_redis_does_not_answer_and_open_ones_let_on() {
        let open = [rule(LimitBy::User, OnError::Open), rule(LimitBy::Ip, OnError::Open)];
        assert_eq!(on_failure(&open, "timeout"), Ok(Checked::FailedOpen));
        let mixed = [rule(LimitBy::User, OnError::Open), rule(LimitBy::Ip, OnError::Closed)];
        let d = on_failure(&mixed, "timeout").unwrap_err();
        assert_eq!((d.code, d.retry_after_secs), (Code::ServiceDegraded, Some(1)));
    }

    #[test]
    fn over_says_which_rule_and_when_to_come_back() {
        let d = over("user", 2_300);
        assert_eq!((d.code, d.retry_after_secs), (Code::RateLimited, Some(3)));
        assert!(d.message.contains("user"), "{}", d.message);
        assert_eq!(over("ip", 0).retry_after_secs, Some(1), "never 0");
    }
}
