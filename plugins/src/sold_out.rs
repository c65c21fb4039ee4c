//! The per-process sold-out flag (seed: 本地售罄标记).
//!
//! Set when Redis answers "sold out" with nothing left; while it is set, order requests are
//! answered `SOLD_OUT` in the process without touching Redis. It is only a traffic filter, never
//! the truth about stock: it expires after a short TTL, and a replenish message on
//! [`protocol::keys::REPLENISH_CHANNEL`] clears it at once (stock came back: an unpaid order was
//! closed, a reservation was compensated).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use protocol::codes::Code;

use crate::Denial;

/// Milliseconds since the Unix epoch, the clock of the flags.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The flag of one campaign: "sold out until" a time in ms (0 = not set).
#[derive(Debug, Default)]
pub struct SoldOutFlag {
    until_ms: AtomicU64,
}

impl SoldOutFlag {
    /// Whether the flag is set at `now_ms`.
    pub fn is_set(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms.load(Ordering::Acquire)
    }

    /// Sets the flag from `now_ms` for `ttl`.
    pub fn mark(&self, now_ms: u64, ttl: Duration) {
        self.until_ms.store(now_ms + ttl.as_millis() as u64, Ordering::Release);
    }

    /// Clears the flag.
    pub fn clear(&self) {
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
                let was = flag.is_set(now_ms());
                flag.clear();
                was
            }
            None => false,
        }
    }

    /// Clears every flag (e.g. after the replenish subscription reconnected and may have missed
    /// messages).
    pub fn clear_all(&self) {
        for flag in self.by_campaign.read().unwrap_or_else(|e| e.into_inner()).values() {
            flag.clear();
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
        f.mark(1_000, Duration::from_millis(500));
        assert_eq!(f.check(1_499).unwrap_err().code, Code::SoldOut);
        assert!(f.check(1_500).is_ok(), "expired after its TTL");
        f.mark(2_000, Duration::from_secs(60));
        f.clear();
        assert!(f.check(2_001).is_ok());
    }

    #[test]
    fn flags_are_per_campaign_and_shared() {
        let all = SoldOutFlags::default();
        let a = all.get("a");
        a.mark(now_ms(), Duration::from_secs(60));
        assert!(all.get("a").is_set(now_ms()), "same flag after a reload");
        assert!(!all.get("b").is_set(now_ms()));
        assert!(all.clear("a"));
        assert!(!a.is_set(now_ms()));
        assert!(!all.clear("unknown"));
    }
}
