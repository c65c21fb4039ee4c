//! The Redis key layout of a campaign.
//!
//! Every key of one campaign carries the same hash tag `{<campaign>}` so that the reservation
//! script, which touches several of them atomically, runs unchanged on Redis Cluster.
//!
//! A campaign with hot-stock buckets (`buckets = B` in its file, B > 1) splits its sale over B
//! key sets, one [`Bucket`] each, with the tags `{<campaign>#<B>.<n>}` chosen to fall in B
//! different ranges of the cluster's 16384 slots (so, with slots spread evenly, on different masters). Each
//! bucket is a whole ledger (meta, stock, bought, outbox, ...), so every script still touches one
//! slot. A buyer's records (what they hold, their nonces, their reservations) live in their home
//! bucket only, [`home_bucket`]: the per-user limit and the nonce hold across buckets because a
//! buyer never reserves anywhere else. When the home bucket runs short, stock moves to it from
//! the other buckets (`lua/transfer.lua`), never the buyer to the stock.

/// Pub/sub channel on which "stock came back" messages are published; the payload is the
/// campaign id. Every gateway process clears its local sold-out flag for that campaign.
pub const REPLENISH_CHANNEL: &str = "seckill:replenish";

/// HASH: the operated state of campaign `campaign` and the facts its processes must agree on
/// ([`crate::control`]). The one key of a campaign that `order-writer campaign end` keeps.
pub fn control_key(campaign: &str) -> String {
    format!("sk:{{{campaign}}}:control")
}

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
    /// HASH: transfer id -> `<to bucket> <qty> <ms>`: units this bucket gave to another bucket
    /// (`lua/transfer.lua` "give"). Kept as the ledger of every transfer.
    pub sent: String,
    /// HASH: transfer id -> qty: units this bucket received (`lua/transfer.lua` "take"); a
    /// transfer id is received once, so a repeated "take" never adds twice.
    pub received: String,
    /// HASH: request id -> who claimed the outbox entry as its producer of last resort: `sweep`
    /// (the sweeper produced it again) or `repair` (reconciliation is deciding it). A claimed
    /// entry may be on its way to an order, so the gateway's undo leaves it alone. Written only
    /// by `claim.lua`; cleared by `ack.lua` and `release.lua`.
    pub claims: String,
}

impl CampaignKeys {
    /// Keys for `campaign`. The id is used verbatim inside the hash tag.
    pub fn new(campaign: &str) -> Self {
        Self::tagged(campaign)
    }

    /// Keys under the hash tag `{tag}`: a campaign id, or a bucket's `<campaign>#<B>.<n>`.
    fn tagged(tag: &str) -> Self {
        let tag = format!("sk:{{{tag}}}");
        Self {
            meta: format!("{tag}:meta"),
            stock: format!("{tag}:stock"),
            bought: format!("{tag}:bought"),
            outbox: format!("{tag}:outbox"),
            pending: format!("{tag}:pending"),
            released: format!("{tag}:released"),
            stats: format!("{tag}:stats"),
            sent: format!("{tag}:sent"),
            received: format!("{tag}:received"),
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
    /// spent, so that it is single use across every gateway process. One key, one command: its
    /// hash tag is the challenge's own (`{<campaign>/<id>}`), so that on a Redis Cluster the
    /// token endpoint's load (one `SET NX` per buyer, the sale's largest Redis load before the
    /// burst) spreads over every master instead of the campaign's.
    pub fn challenge(&self, id: &str) -> String {
        let campaign = self.tag().trim_start_matches("sk:{").trim_end_matches('}');
        format!("sk:challenge:{{{campaign}/{id}}}")
    }

    /// STRING (with a TTL of two windows): the count of requests of one `[[global_limit]]`
    /// rule (`by`, e.g. "user") for one `value` (the user id, address, device, or "*" for the
    /// whole campaign) in window number `window` (counted by `lua/reserve.lua`; under the tag of
    /// the order's home bucket, see [`crate::global_limit`]).
    pub fn global_limit(&self, by: &str, value: &str, window: u64) -> String {
        format!("{}:limit:{by}:{value}:{window}", self.tag())
    }

    /// HASH: the campaign's waiting room: `pre` (pre-queue arrivals so far), `size` (the
    /// pre-queue's size once closed at the start), `next` (the last position given)
    /// (`lua/room.lua`).
    pub fn room(&self) -> String {
        format!("{}:room", self.tag())
    }

    /// HASH: user -> their place in the waiting room, `a<n>` (pre-queue arrival) or `p<n>`
    /// (position) (`lua/room.lua`).
    pub fn room_users(&self) -> String {
        format!("{}:room:users", self.tag())
    }

    /// HASH: user -> the place of theirs the waiting room admitted, `p<n>` (`lua/admit.lua`:
    /// a place's first admission is counted once).
    pub fn room_admitted(&self) -> String {
        format!("{}:room:admitted", self.tag())
    }

    /// STRING (expiring after 3 s): the campaign's arrivals (token requests) in unix second
    /// `second`, across every gateway (`lua/arrivals.lua`).
    pub fn arrivals(&self, second: i64) -> String {
        format!("{}:arrivals:{second}", self.tag())
    }

    /// STRING (expiring after 3 s): the first admissions of the campaign's waiting room in unix
    /// second `second`, across every gateway (`lua/admit.lua`).
    pub fn admitted(&self, second: i64) -> String {
        format!("{}:admitted:{second}", self.tag())
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

/// The most buckets a campaign may have.
pub const MAX_BUCKETS: u32 = 64;

/// One bucket of a campaign's sale: the key set of one script call. A campaign without buckets
/// has one, whose keys are [`CampaignKeys::new`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// The campaign id.
    pub campaign: String,
    /// This bucket, from 0.
    pub index: u32,
    /// How many buckets the campaign has (1 to [`MAX_BUCKETS`]).
    pub count: u32,
    /// Its keys.
    pub keys: CampaignKeys,
}

impl Bucket {
    /// Bucket `index` of `count` of `campaign` (`count` is clamped to 1..=[`MAX_BUCKETS`],
    /// `index` taken modulo it).
    pub fn nth(campaign: &str, index: u32, count: u32) -> Self {
        let count = count.clamp(1, MAX_BUCKETS);
        let index = index % count;
        let keys = if count == 1 {
            CampaignKeys::new(campaign)
        } else {
            CampaignKeys::tagged(&bucket_tag(campaign, index, count))
        };
        Self { campaign: campaign.to_string(), index, count, keys }
    }

    /// The only bucket of a campaign without buckets.
    pub fn single(campaign: &str) -> Self {
        Self::nth(campaign, 0, 1)
    }

    /// `user`'s home bucket: where everything of theirs lives.
    pub fn of_user(campaign: &str, user: &str, count: u32) -> Self {
        Self::nth(campaign, home_bucket(user, count), count)
    }

    /// Every bucket of `campaign`, in order.
    pub fn all(campaign: &str, count: u32) -> Vec<Self> {
        let count = count.clamp(1, MAX_BUCKETS);
        (0..count).map(|i| Self::nth(campaign, i, count)).collect()
    }

    /// The hash slot of this bucket's keys on a Redis Cluster.
    pub fn slot(&self) -> u16 {
        fred::util::redis_keyslot(self.keys.stock.as_bytes())
    }
}

/// The home bucket of `user` among `count`: FNV-1a of `bucket:<user>`, modulo `count` (another
/// hash than the Kafka partition's, so that buckets and partitions do not line up). Stable
/// across processes and versions: the gateway, the order writer and reconciliation agree.
pub fn home_bucket(user: &str, count: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"bucket:".iter().chain(user.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(count.clamp(1, MAX_BUCKETS))) as u32
}

/// Bucket `index`'s tag `<campaign>#<count>.<n>`, `n` the smallest whose hash slot falls in the
/// `index`-th of `count` equal ranges of the 16384 slots, so that the buckets land on different
/// slots and, with slots spread evenly over the masters, on different masters. The count is in
/// the tag, so two counts never share a ledger: a gateway whose campaign file says another count
/// finds no published bucket, whichever the user.
fn bucket_tag(campaign: &str, index: u32, count: u32) -> String {
    const SLOTS: u32 = 16384;
    let (lo, hi) = (index * SLOTS / count, (index + 1) * SLOTS / count);
    let tag = |n: u32| format!("{campaign}#{count}.{n}");
    let n = (0..200_000)
        .find(|n| (lo..hi).contains(&u32::from(fred::util::redis_keyslot(tag(*n).as_bytes()))))
        .unwrap_or(index);
    tag(n)
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
    fn the_room_keys_share_the_campaign_tag() {
        let k = CampaignKeys::new("c1");
        for key in [k.room(), k.room_users(), k.arrivals(1_700_000_000)] {
            assert_eq!(
                fred::util::redis_keyslot(key.as_bytes()),
                fred::util::redis_keyslot(k.meta.as_bytes())
            );
        }
        assert_eq!(k.room(), "sk:{c1}:room");
        assert_eq!(k.arrivals(7), "sk:{c1}:arrivals:7");
    }

    #[test]
    fn all_keys_share_one_hash_tag() {
        let keys = CampaignKeys::new("phone-42");
        for key in keys.all() {
            assert!(key.starts_with("sk:{phone-42}:"), "{key}");
        }
        assert_eq!(keys.all().len(), 8);
        assert_eq!(keys.nonce("j1", "n1"), "sk:{phone-42}:nonce:j1:n1");
        assert_eq!(keys.challenge("c1"), "sk:challenge:{phone-42/c1}");
    }

    #[test]
    fn a_single_bucket_is_the_campaign_itself() {
        assert_eq!(Bucket::single("c").keys, CampaignKeys::new("c"));
        assert_eq!(Bucket::of_user("c", "alice", 1).keys, CampaignKeys::new("c"));
    }

    #[test]
    fn buckets_spread_over_the_slot_ranges_and_keep_one_tag_each() {
        for count in [2, 3, 8] {
            let all = Bucket::all("phone-42", count);
            assert_eq!(all.len(), count as usize);
            for (i, b) in all.iter().enumerate() {
                let slot = u32::from(b.slot());
                assert!(
                    (i as u32 * 16384 / count..(i as u32 + 1) * 16384 / count).contains(&slot),
                    "bucket {i} of {count} at slot {slot}"
                );
                let tag = b.keys.meta.strip_suffix(":meta").unwrap();
                assert!(tag.starts_with("sk:{phone-42#"), "{tag}");
                for key in b.keys.all().iter().chain([&b.keys.sent, &b.keys.received]) {
                    assert!(key.starts_with(tag), "{key}");
                    assert_eq!(fred::util::redis_keyslot(key.as_bytes()), b.slot(), "{key}");
                }
            }
        }
    }

    #[test]
    fn no_two_bucket_counts_share_a_tag() {
        // A gateway whose file says another count must never find (or write) a ledger of the
        // published count: every tag of every count is its own.
        for campaign in ["demo", "phone-42", "c"] {
            let mut seen = std::collections::HashMap::new();
            for count in 1..=MAX_BUCKETS {
                for b in Bucket::all(campaign, count) {
                    let tag = b.keys.meta.clone();
                    if let Some((c, i)) = seen.insert(tag.clone(), (count, b.index)) {
                        panic!("{tag} is bucket {i} of {c} and bucket {} of {count}", b.index);
                    }
                }
            }
        }
    }

    #[test]
    fn home_buckets_are_stable_and_spread() {
        assert_eq!(home_bucket("alice", 3), home_bucket("alice", 3));
        assert_eq!(home_bucket("alice", 1), 0);
        let mut seen = [0u32; 3];
        for i in 0..3000 {
            seen[home_bucket(&format!("u{i}"), 3) as usize] += 1;
        }
        assert!(seen.iter().all(|n| (800..1200).contains(n)), "{seen:?}");
        assert_eq!(Bucket::of_user("c", "alice", 3).index, home_bucket("alice", 3));
        assert_eq!(Bucket::nth("c", 7, 3).index, 1, "index modulo count");
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
