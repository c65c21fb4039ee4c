//! Campaign tokens this process has verified, by their bytes, with what each derives (the hidden
//! path and the signing key): a token sent again (a buyer's second order, or a bot replaying a
//! stolen token with forged signatures) costs a lookup instead of the JWT's verification and two
//! HMAC derivations (2.6 µs measured by `edge-cost`).
//!
//! Only tokens that verified are kept, so what an attacker can put in is bounded by the tokens
//! it obtained (each one a solved captcha). An entry is used only up to its token's `exp` (a
//! lookup past it falls back to the full verification, which answers `TOKEN_EXPIRED`). The
//! table holds at most [`CAPACITY`] entries in [`SHARDS`] shards; a full shard forgets one
//! entry to make room. The cache belongs to one set of [`crate::token::EdgeKeys`]: new keys (a
//! reload with another master key) start with an empty one.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

use ring::hmac;

use crate::token::CampaignClaims;

/// Entries kept at most, all shards together.
pub const CAPACITY: usize = 8192;
/// Shards (each its own lock).
pub const SHARDS: usize = 16;

/// A verified token and what it derives.
#[derive(Debug)]
pub struct VerifiedToken {
    /// Its claims.
    pub claims: CampaignClaims,
    /// Its hidden path segment.
    pub path: String,
    /// Its signing key.
    pub signing_key: hmac::Key,
}

/// One shard: token bytes to their entry.
type Shard = Mutex<HashMap<Box<[u8]>, Arc<VerifiedToken>>>;

/// The table of verified tokens.
#[derive(Debug)]
pub struct VerifiedTokens {
    hasher: RandomState,
    shards: Vec<Shard>,
}

impl Default for VerifiedTokens {
    fn default() -> Self {
        Self { hasher: RandomState::new(), shards: (0..SHARDS).map(|_| Mutex::default()).collect() }
    }
}

impl VerifiedTokens {
    fn shard(&self, token: &[u8]) -> &Shard {
        &self.shards[(self.hasher.hash_one(token) as usize) % SHARDS]
    }

    /// The entry of `token`, if it verified before and has not expired at `now` (unix seconds).
    pub fn get(&self, token: &[u8], now: i64) -> Option<Arc<VerifiedToken>> {
        let mut shard = self.shard(token).lock().unwrap_or_else(|e| e.into_inner());
        let hit = shard.get(token)?;
        if hit.claims.exp < now {
            shard.remove(token);
            return None;
        }
        Some(Arc::clone(hit))
    }

    /// Keeps `entry` for `token` (which just verified).
    pub fn insert(&self, token: &[u8], entry: Arc<VerifiedToken>) {
        let mut shard = self.shard(token).lock().unwrap_or_else(|e| e.into_inner());
        if shard.len() >= CAPACITY / SHARDS {
            if let Some(any) = shard.keys().next().cloned() {
                shard.remove(&any);
            }
        }
        shard.insert(token.into(), entry);
    }

    /// Entries kept now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len()).sum()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(exp: i64) -> Arc<VerifiedToken> {
        Arc::new(VerifiedToken {
            claims: CampaignClaims {
                sub: "u".into(),
                cmp: "c".into(),
                dev: "d".into(),
                jti: "j".into(),
                iat: 0,
                exp,
                aud: "a".into(),
                lvl: None,
                rgn: None,
                reg: None,
            },
            path: "p".into(),
            signing_key: hmac::Key::new(hmac::HMAC_SHA256, b"k"),
        })
    }

    #[test]
    fn a_kept_token_is_found_until_it_expires() {
        let t = VerifiedTokens::default();
        t.insert(b"token-1", entry(100));
        assert!(t.get(b"token-1", 100).is_some());
        assert!(t.get(b"token-2", 100).is_none(), "only the same bytes");
        assert!(t.get(b"token-1", 101).is_none(), "past exp");
        assert!(t.get(b"token-1", 50).is_none(), "and forgotten then");
    }

    #[test]
    fn the_table_never_grows_past_its_capacity() {
        let t = VerifiedTokens::default();
        for i in 0..(CAPACITY * 3) {
            t.insert(format!("token-{i}").as_bytes(), entry(i64::MAX));
        }
        assert!(t.len() <= CAPACITY, "{}", t.len());
        assert!(t.len() >= CAPACITY / 2, "shards fill evenly enough: {}", t.len());
    }
}
