//! The per-process sold-out flag (seed: 本地售罄标记).
//!
//! Set when Redis answers "sold out" with nothing left; while it is set, order requests are
//! answered `SOLD_OUT` in the process without touching Redis. It is only a traffic filter, never
//! the truth about stock: it expires after a short TTL, and a replenish message on
//! [`protocol::keys::REPLENISH_CHANNEL`] clears it at once (stock came back: an unpaid order was
//! closed, a reservation was compensated or undone; `lua/release.lua` sends it).
//!
//! A "sold out" answer to a call asked before the last replenish arrived says nothing about the
//! stock now, so it does not set the flag: [`SoldOutFlag::mark`] takes the time the call was
//! asked, and a flag cleared since then stays clear.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use protocol::codes::Code;

use crate::denial::Denial;

/// Milliseconds since the Unix epoch, the clock of the flags.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The flag of one campaign: "sold out until" a time in ms (0 = not set), and when it was last
/// cleared by a replenish message.
#[derive(Debug, Default)]
pub struct SoldOutFlag {
    until_ms: AtomicU64,
    cleared_at_ms: AtomicU64,
}

impl SoldOutFlag {
    /// Whether the flag is set at `now_ms`.
    pub fn is_set(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms.load(Ordering::Acquire)
    }

    /// Sets the flag from `now_ms` for `ttl`, for a "sold out" answer to a call asked at
    /// `asked_ms`. Does nothing when the flag was cleared at or after `asked_ms`: stock came back
    /// after Redis answered. Returns whether the flag was set.
    pub fn mark(&self, asked_ms: u64, now_ms: u64, ttl: Duration) -> bool {
        if asked_ms <= self.cleared_at_ms.load(Ordering::Acquire) {
            return false;
        }
        let until = now_ms + ttl.as_millis() as u64;
        self.until_ms.store(until, Ordering::Release);
        // A replenish that arrived while we stored wins: take our mark back (only ours).
        if asked_ms <= self.cleared_at_ms.load(Ordering::Acquire) {
            let _ = self.until_ms.compare_exchange(until, 0, Ordering::AcqRel, Ordering::Acquire);
            return false;
        }
        true
    }

    /// Clears the flag at `now_ms` (a replenish message): answers to calls asked before then no
    /// longer set it.
    pub fn clear_at(&self, now_ms: u64) {
        self.cleared_at_ms.fetch_max(now_ms, Ordering::AcqRel);
        self.until_ms.store(0, Ordering::Release);
    }

    /// `SOLD_OUT` while the flag is set, `Ok` otherwise.
    pub fn check(&self, now_ms: u64) -> Result<(), Denial> {
        if self.is_set(now_ms) {
            Err(Denial::new(Code::SoldOut, "sold out"))
        } else {
            Ok(())
        }
    }
}

/// The flags of every campaign of this process, kept across reloads.
#[derive(Debug, Default)]
pub struct SoldOutFlags {
    by_campaign: RwLock<HashMap<String, Arc<SoldOutFlag>>>,
}

impl SoldOutFlags {
    /// The flag of `campaign`, created (clear) on first use.
    pub fn get(&self, campaign: &str) -> Arc<SoldOutFlag> {
        if let Some(flag) = self.by_campaign.read().unwrap_or_else(|e| e.into_inner()).get(campaign) {
            return Arc::clone(flag);
        }
        let mut map = self.by_campaign.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(campaign.to_string()).or_default())
    }

    /// Clears the flag of `campaign` (a replenish message). Returns whether it was set.
    pub fn clear(&self, campaign: &str) -> bool {
        let map = self.by_campaign.read().unwrap_or_else(|e| e.into_inner());
        match map.get(campaign) {
            Some(flag) => {
                let now = now_ms();
                let was = flag.is_set(now);
                flag.clear_at(now);
                was
            }
            None => false,
        }
    }

    /// Clears every flag (e.g. after the replenish subscription reconnected and may have missed
    /// messages).
    pub fn clear_all(&self) {
        let now = now_ms();
        for flag in self.by_campaign.read().unwrap_or_else(|e| e.into_inner()).values() {
            flag.clear_at(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_expires_and_clears() {
        let f = SoldOutFlag::default();
        assert!(f.check(1_000).is_ok());
        assert!(f.mark(1_000, 1_000, Duration::from_millis(500)));
        assert_eq!(f.check(1_499).unwrap_err().code, Code::SoldOut);
        assert!(f.check(1_500).is_ok(), "expired after its TTL");
        f.mark(2_000, 2_000, Duration::from_secs(60));
        f.clear_at(2_000);
        assert!(f.check(2_001).is_ok());
    }

    #[test]
    fn a_sold_out_answer_older_than_the_last_replenish_does_not_stand() {
        let f = SoldOutFlag::default();
        // A call asked at 5_000; a replenish clears the flag at 5_010; the call's "sold out"
        // answer arrives at 5_020: Redis answered before the stock came back.
        f.clear_at(5_010);
        assert!(!f.mark(5_000, 5_020, Duration::from_secs(1)));
        assert!(f.check(5_021).is_ok());
        // The same answer to a call asked at the very time of the clear does not stand either.
        assert!(!f.mark(5_010, 5_030, Duration::from_secs(1)));
        // A call asked after the replenish may set it.
        assert!(f.mark(5_011, 5_040, Duration::from_secs(1)));
        assert!(f.check(5_041).is_err());
        // An older clear does not move the clear time back.
        f.clear_at(4_000);
        assert!(!f.mark(5_005, 5_050, Duration::from_secs(1)) && f.check(5_051).is_ok());
    }

    #[test]
    fn flags_are_per_campaign_and_shared() {
        let all = SoldOutFlags::default();
        let a = all.get("a");
        a.mark(now_ms() + 1, now_ms(), Duration::from_secs(60));
        assert!(all.get("a").is_set(now_ms()), "same flag after a reload");
        assert!(!all.get("b").is_set(now_ms()));
        assert!(all.clear("a"));
        assert!(!a.is_set(now_ms()));
        assert!(!all.clear("unknown"));
    }
}
