//! The Redis key layout of a campaign.
//!
//! Every key of one campaign carries the same hash tag `{<campaign>}` so that the reservation
//! script, which touches several of them atomically, runs unchanged on Redis Cluster.

/// Pub/sub channel on which "stock came back" messages are published; the payload is the
/// campaign id. Every gateway process clears its local sold-out flag for that campaign.
pub const REPLENISH_CHANNEL: &str = "seckill:replenish";

/// The keys of one campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CampaignKeys {
    /// HASH: `state` (READY, LIVE), `stock_version`, `total`, `limit`, `sku`, `price_cents`,
    /// `price_version`. Written by the publish script only.
    pub meta: String,
    /// STRING: remaining stock, an integer that never goes below zero.
    pub stock: String,
    /// HASH: user id -> quantity this user currently holds (reserved and not released).
    pub bought: String,
    /// HASH: request id -> reservation record (JSON). The outbox: every reservation without a
    /// committed order or a release is here.
    pub outbox: String,
    /// ZSET: request id scored by reservation time (ms). Lets the sweeper list outbox entries
    /// older than a cutoff without scanning the hash.
    pub pending: String,
    /// HASH: request id -> released quantity. Makes release idempotent and auditable.
    pub released: String,
    /// HASH: counters for reconciliation, none written by a reservation (what was reserved is
    /// derived from `bought`): `released_count`, `released_qty` (cumulative), `aside_qty` (released while `pause_replenish` is on, not yet
    /// back in the stock), `returned_qty`, `acked_count`, `adopted_count`, `adopted_qty`.
    pub stats: String,
    /// HASH: request id -> who claimed the outbox entry as its producer of last resort: `sweep`
    /// (the sweeper produced it again) or `repair` (reconciliation is deciding it). A claimed
    /// entry may be on its way to an order, so the gateway's undo leaves it alone. Written only
    /// by `claim.lua`; cleared by `ack.lua` and `release.lua`.
    pub claims: String,
}

impl CampaignKeys {
    /// Keys for `campaign`. The id is used verbatim inside the hash tag.
    pub fn new(campaign: &str) -> Self {
        let tag = format!("sk:{{{campaign}}}");
        Self {
            meta: format!("{tag}:meta"),
            stock: format!("{tag}:stock"),
            bought: format!("{tag}:bought"),
            outbox: format!("{tag}:outbox"),
            pending: format!("{tag}:pending"),
            released: format!("{tag}:released"),
            stats: format!("{tag}:stats"),
            claims: format!("{tag}:claims"),
        }
    }

    /// STRING (with a TTL): the nonce `nonce` of the campaign token `jti`, written by
    /// `reserve.lua` with one `SET NX` (its 9th key): `<fingerprint> <request id>[ <code> <n>]`,
    /// the request that first used it and, when that request was refused, its answer.
    pub fn nonce(&self, jti: &str, nonce: &str) -> String {
        format!("{}:nonce:{jti}:{nonce}", self.tag())
    }

    /// STRING (with a TTL): a captcha challenge (or provider token) id, set once when it is
    /// spent, so that it is single use across every gateway process.
    pub fn challenge(&self, id: &str) -> String {
        format!("{}:challenge:{id}", self.tag())
    }

    /// STRING (with a TTL of two windows): the count of requests of one `[[global_limit]]`
    /// rule (`by`, e.g. "user") for one `value` (the user id, address, device, or "*" for the
    /// whole campaign) in window number `window` (`lua/limit.lua`).
    pub fn global_limit(&self, by: &str, value: &str, window: u64) -> String {
        format!("{}:limit:{by}:{value}:{window}", self.tag())
    }

    /// The hash-tagged prefix of every key (`sk:{campaign}`).
    fn tag(&self) -> &str {
        self.meta.strip_suffix(":meta").unwrap_or(&self.meta)
    }

    /// All keys, in the order the Lua scripts expect them as `KEYS[1..8]`.
    pub fn all(&self) -> Vec<String> {
        vec![
            self.meta.clone(),
            self.stock.clone(),
            self.bought.clone(),
            self.outbox.clone(),
            self.pending.clone(),
            self.released.clone(),
            self.stats.clone(),
            self.claims.clone(),
        ]
    }
}

/// Checks that a campaign id is safe to embed in a key and a URL path:
/// 1 to 64 characters of `[A-Za-z0-9_-]`.
pub fn valid_campaign_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys_share_one_hash_tag() {
        let keys = CampaignKeys::new("phone-42");
        for key in keys.all() {
            assert!(key.starts_with("sk:{phone-42}:"), "{key}");
        }
        assert_eq!(keys.all().len(), 8);
        assert_eq!(keys.nonce("j1", "n1"), "sk:{phone-42}:nonce:j1:n1");
        assert_eq!(keys.challenge("c1"), "sk:{phone-42}:challenge:c1");
    }

    #[test]
    fn campaign_ids_are_restricted() {
        assert!(valid_campaign_id("phone-42_a"));
        assert!(!valid_campaign_id(""));
        assert!(!valid_campaign_id("a}b"));
        assert!(!valid_campaign_id("a/b"));
        assert!(!valid_campaign_id(&"x".repeat(65)));
    }
}
