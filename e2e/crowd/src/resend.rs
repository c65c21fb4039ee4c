//! The buyer's page's resend rule for one signed order, played by the crowd: the same signed
//! bytes sent again after a network error, a `429` (`TRY_LATER`, `RATE_LIMITED`), a `503`
//! (`SERVICE_DEGRADED`) or `NOT_STARTED`, after the answer's `Retry-After` (else a backoff) with
//! jitter, a bounded number of times, within a bound from its signing.
//!
//! One rule for both: its numbers are read from the page itself (`web/app.js`, its constants
//! `RESEND_WITHIN_MS`, `MAX_SENDS`, `RESEND_STATUSES`, `RESEND_BACKOFF_MS`,
//! `RESEND_BACKOFF_CAP_MS`, compiled in), so the page's tests (`e2e/browser`) and the crowd's
//! exercise the same rule. [`Rule::pause`] is the decision, pure.

use std::sync::LazyLock;
use std::time::Duration;

/// The page, compiled in.
const PAGE: &str = include_str!("../../../web/app.js");

/// The page's resend rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// No resend past this much of the order's signing.
    pub within: Duration,
    /// Sends of one order at most, the first included.
    pub max_sends: u32,
    /// Statuses resent (besides a network error and `NOT_STARTED`).
    pub statuses: Vec<u16>,
    /// The backoff without a `Retry-After`: this, doubled per send ...
    pub backoff: Duration,
    /// ... up to this.
    pub backoff_cap: Duration,
}

static PAGE_RULE: LazyLock<Rule> =
    LazyLock::new(|| Rule::of_page(PAGE).expect("web/app.js declares its resend rule (e2e::resend's test)"));

/// The value of `const NAME = <digits>;` in `js`.
fn js_number(js: &str, name: &str) -> Option<u64> {
    let rest = js.split_once(&format!("\nconst {name} = "))?.1;
    rest.split_once(';')?.0.trim().parse().ok()
}

/// The numbers of `const NAME = [<digits>, ...];` in `js`.
fn js_numbers(js: &str, name: &str) -> Option<Vec<u16>> {
    let rest = js.split_once(&format!("\nconst {name} = ["))?.1;
    rest.split_once("];")?.0.split(',').map(|n| n.trim().parse().ok()).collect()
}

impl Rule {
    /// The rule the page `js` declares.
    pub fn of_page(js: &str) -> Option<Self> {
        Some(Self {
            within: Duration::from_millis(js_number(js, "RESEND_WITHIN_MS")?),
            max_sends: u32::try_from(js_number(js, "MAX_SENDS")?).ok()?,
            statuses: js_numbers(js, "RESEND_STATUSES")?,
            backoff: Duration::from_millis(js_number(js, "RESEND_BACKOFF_MS")?),
            backoff_cap: Duration::from_millis(js_number(js, "RESEND_BACKOFF_CAP_MS")?),
        })
    }

    /// The buyer's page's rule (`web/app.js`).
    pub fn page() -> &'static Rule {
        &PAGE_RULE
    }

    /// After send number `n` (from 1) of an order signed `since` ago was answered `status`
    /// (0: no answer, a network error) with `code` and `Retry-After` `retry_after_secs`: how long
    /// to wait before sending it again, before the jitter ([`jittered`]); `None`: that answer
    /// is the order's.
    pub fn pause(
        &self,
        n: u32,
        since: Duration,
        status: u16,
        code: &str,
        retry_after_secs: Option<u64>,
    ) -> Option<Duration> {
        let again = status == 0 || self.statuses.contains(&status) || code == "NOT_STARTED";
        if !again || n >= self.max_sends {
            return None;
        }
        let wait = match retry_after_secs {
            Some(s) if s > 0 => Duration::from_secs(s),
            _ => self.backoff.saturating_mul(1 << n.min(16)).min(self.backoff_cap),
        };
        (since + wait <= self.within).then_some(wait)
    }
}

/// `wait` times the page's jitter, 0.5 to 1 (`u` in 0..1).
pub fn jittered(wait: Duration, u: f64) -> Duration {
    wait.mul_f64(0.5 + u.clamp(0.0, 1.0) / 2.0)
}

/// A number in 0..1, different on every call (the jitter's).
pub fn uniform() -> f64 {
    use std::hash::BuildHasher;
    let h = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_is_read_from_the_page() {
        let rule = Rule::page();
        assert_eq!(rule.within, Duration::from_secs(20));
        assert_eq!(rule.max_sends, 6);
        assert_eq!(rule.statuses, vec![429, 503]);
        assert_eq!((rule.backoff, rule.backoff_cap), (Duration::from_millis(250), Duration::from_secs(4)));
        assert!(PAGE.contains("RESEND_STATUSES.includes(r.status)"), "the page's sendOrder uses its rule");
        assert_eq!(Rule::of_page("const MAX_SENDS = 6;"), None, "a page without the rule has none");
    }

    #[test]
    fn retryable_answers_are_resent_after_retry_after_within_the_bounds() {
        let rule = Rule::page();
        let s = Duration::from_secs;
        // TRY_LATER and SERVICE_DEGRADED: after their Retry-After.
        assert_eq!(rule.pause(1, s(0), 429, "TRY_LATER", Some(1)), Some(s(1)));
        assert_eq!(rule.pause(1, s(0), 503, "SERVICE_DEGRADED", Some(1)), Some(s(1)));
        // A network error: the backoff, doubling, capped.
        assert_eq!(rule.pause(1, s(0), 0, "ERROR", None), Some(Duration::from_millis(500)));
        assert_eq!(rule.pause(3, s(0), 0, "ERROR", None), Some(s(2)));
        assert_eq!(rule.pause(5, s(0), 0, "ERROR", None), Some(s(4)));
        // Not resent: a decision, the sixth send, or past 20 s of the signing.
        assert_eq!(rule.pause(1, s(0), 410, "SOLD_OUT", None), None);
        assert_eq!(rule.pause(1, s(0), 202, "QUEUED", None), None);
        assert_eq!(rule.pause(6, s(0), 429, "TRY_LATER", Some(1)), None);
        assert_eq!(rule.pause(2, s(19) + Duration::from_millis(1), 429, "TRY_LATER", Some(1)), None);
        assert_eq!(rule.pause(2, s(19), 429, "TRY_LATER", Some(1)), Some(s(1)));
    }

    #[test]
    fn the_jitter_is_half_to_all_of_the_wait() {
        let w = Duration::from_secs(1);
        assert_eq!(jittered(w, 0.0), Duration::from_millis(500));
        assert_eq!(jittered(w, 1.0), w);
        for _ in 0..100 {
            let u = uniform();
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }
}
