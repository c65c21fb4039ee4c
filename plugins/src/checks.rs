//! The checks of a request before its reservation, one file each. **The order of an order's
//! checks is written here once**, cheapest first, as `edge` runs them (a test holds this list
//! against the calls in `edge.rs`, so neither can change alone); the other docs point here.
//!
//! The request line and headers (`Edge::admit`; the method is a POST first):
//! 1. `window::check`: the campaign's sale window is open, by server time;
//! 2. `switches::check`: its kill switches (`closed`, `queue_only`);
//! 3. `sold_out.check`: the process's sold-out flag (cleared by pub/sub and by a short TTL);
//! 4. `pressure.check`: while the proxy's threads run late (`[sale] shed_at_lag_ms`), the costly
//!    endpoints answer `TRY_LATER`, so that the rest of the shop keeps its latency;
//! 5. `input::device_id`, then `input::qty`: the device id and the quantity (`?qty=`);
//! 6. `limiter.check_request`: the rates per IP (found by [`client_ip`]), device (no header: one
//!    shared "no device" bucket) and campaign;
//! 7. `keys.verify`: the campaign token, bound to user, campaign and device;
//! 8. `limiter.check_account`: the account's rate, on the verified user;
//! 9. `keys.check_path`: the token's hidden order path;
//! 10. `signature::check_timestamp`: the timestamp within the campaign's window.
//!
//! Then the body is read (at most a few KB, within a bound), and (`Edge::verify`, `Edge::hold`):
//! 11. `signature::verify`: the request's HMAC under the token's signing key (constant time);
//! 12. `eligibility.check`: blacklist, eligible set, account rules;
//! 13. `GlobalCheck::new`: the campaign's `[[global_limit]]` rules decided for the order (counted
//!     in its reservation's own call, fail-open or fail-closed per rule);
//! 14. `budget.try_acquire`: a place in the campaign's concurrency budget in this process, taken
//!     only now (a slow body holds none), a few at most per account, device and address;
//! 15. `seller.sell` (`Edge::reserve`): the one `reserve.lua` call (nonce spent, global limits
//!     counted, stock and the per-user limit), batched per bucket and bounded by the bucket's
//!     adaptive limit ([`crate::reserve`]), then the record handed to the Kafka queue without
//!     waiting ([`crate::queue`]).
//!
//! Each answers `Ok` or a [`crate::Denial`]. The modules whose functions a proxy or a tool calls
//! are public ([`client_ip`], [`input`], [`signature`]); of the rest only the types named below
//! are.

pub(crate) mod budget;
pub mod client_ip;
pub(crate) mod control;
pub(crate) mod eligibility;
pub(crate) mod global_limit;
pub mod input;
pub(crate) mod pressure;
pub(crate) mod rate_limit;
pub mod signature;
pub(crate) mod sold_out;
pub(crate) mod switches;
pub(crate) mod window;

pub use budget::Permit;
pub use client_ip::{TrustedProxies, X_FORWARDED_FOR};
pub use global_limit::{limit_rules, Subject};
pub use rate_limit::RateLimiter;
pub use sold_out::now_ms;

#[cfg(test)]
mod tests {
    /// The first call named by each numbered item of the list above, in its order.
    fn listed_calls(doc: &str) -> Vec<&str> {
        doc.lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .filter(|l| l.split_once(". ").is_some_and(|(n, _)| n.parse::<u32>().is_ok()))
            .filter_map(|l| l.split('`').nth(1))
            .collect()
    }

    #[test]
    fn the_listed_order_is_the_order_edge_runs_the_checks_in() {
        let calls = listed_calls(include_str!("checks.rs"));
        assert_eq!(calls.len(), 15, "{calls:?}");
        let edge = include_str!("edge.rs");
        let mut from = edge.find("pub fn admit(").expect("Edge::admit");
        for call in calls {
            let at = edge[from..].find(&format!("{call}(")).unwrap_or_else(|| {
                panic!("`{call}` is not called in edge.rs after the check listed before it")
            });
            from += at + call.len();
        }
    }
}
