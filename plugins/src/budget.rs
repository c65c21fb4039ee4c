//! A campaign's concurrency budget: how many of its order requests one gateway process holds in
//! flight at once. Past it, `TRY_LATER`. This is what keeps a hammered campaign from taking the
//! capacity of the rest of the shop (seed 003: 不能影响商城的其他功能).
//!
//! A [`Permit`] is taken in the request filter and given back when it is dropped (the gateway
//! drops it in its logging phase, which runs once the answer is written, on every path).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

use protocol::codes::Code;

use crate::Denial;

/// In-flight counter of one campaign.
#[derive(Debug)]
pub struct Budget {
    inflight: AtomicU32,
    max: AtomicU32,
}

/// One request's place in a [`Budget`]; dropping it frees the place.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<Budget>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Budget {
    /// A budget of `max` requests in flight.
    pub fn new(max: u32) -> Self {
        Self { inflight: AtomicU32::new(0), max: AtomicU32::new(max) }
    }

    /// Changes the maximum (on reload); permits already given stay valid.
    pub fn set_max(&self, max: u32) {
        self.max.store(max, Ordering::Release);
    }

    /// Requests in flight now.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Acquire)
    }

    /// Takes a place, or answers `TRY_LATER` when the budget is full.
    pub fn try_acquire(self: &Arc<Self>) -> Result<Permit, Denial> {
        let max = self.max.load(Ordering::Acquire);
        let taken = self
            .inflight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_ok();
        if taken {
            Ok(Permit { budget: Arc::clone(self) })
        } else {
            Err(Denial::new(Code::TryLater, "too many requests for this campaign right now: try again")
                .retry_after(1))
        }
    }
}

/// The budgets of every campaign of this process, kept across reloads so that permits taken
/// before a reload are counted against the same budget after it.
#[derive(Debug, Default)]
pub struct Budgets {
    by_campaign: RwLock<HashMap<String, Arc<Budget>>>,
}

impl Budgets {
    /// The budget of `campaign`, created on first use, with its maximum set to `max`.
    pub fn get(&self, campaign: &str, max: u32) -> Arc<Budget> {
        let mut map = self.by_campaign.write().unwrap_or_else(|e| e.into_inner());
        let budget = map.entry(campaign.to_string()).or_insert_with(|| Arc::new(Budget::new(max)));
        budget.set_max(max);
        Arc::clone(budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_bounded_and_given_back_on_drop() {
        let b = Arc::new(Budget::new(2));
        let p1 = b.try_acquire().unwrap();
        let _p2 = b.try_acquire().unwrap();
        assert_eq!(b.try_acquire().unwrap_err().code, Code::TryLater);
        drop(p1);
        assert_eq!(b.inflight(), 1);
        assert!(b.try_acquire().is_ok());
    }

    #[test]
    fn budgets_survive_a_reload() {
        let all = Budgets::default();
        let before = all.get("c", 1);
        let _p = before.try_acquire().unwrap();
        let after = all.get("c", 1);
        assert!(after.try_acquire().is_err(), "the permit taken before the reload still counts");
        all.get("c", 2);
        assert!(after.try_acquire().is_ok());
    }
}
