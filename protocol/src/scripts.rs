//! The Lua scripts under `lua/`, read from disk at start and called by SHA.
//!
//! Each call goes out as `EVALSHA`; when Redis answers `NOSCRIPT` (a restart, a failover, a
//! `SCRIPT FLUSH`) the script is loaded again and the call repeated once. The typed wrappers
//! below are the only place that knows the scripts' argument order and return codes.

use std::path::{Path, PathBuf};

use crate::cluster::EvalRetry;
use fred::prelude::{Client, Error as RedisError};
use fred::types::scripts::Script;

use crate::keys::{Bucket, REPLENISH_CHANNEL};

mod room;
mod transfer;
pub use room::{Admit, Admitted, Arrivals, Drawn, RoomAnswer, RoomEntry, RoomPlace};
pub use transfer::{home_or_fall_over, FallOver, TakeOutcome};

/// Why the scripts could not be loaded or called.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// A script file could not be read.
    #[error("cannot read Lua script {path}: {source}")]
    Read {
        /// Path tried.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Redis failed or timed out.
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    /// The script answered something this code does not understand.
    #[error("unexpected answer from {script}: {detail}")]
    Protocol {
        /// Script name.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

/// The loaded scripts.
#[derive(Clone, Debug)]
pub struct Scripts {
    reserve: Script,
    release: Script,
    publish: Script,
    transfer: Script,
    room: Script,
    arrivals: Script,
    admit: Script,
}

/// What `reserve.lua` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// Reserved; `record` is the outbox JSON, `remaining` the stock left.
    Reserved {
        /// Stock left after this reservation.
        remaining: i64,
        /// The record as stored in the outbox.
        record: String,
    },
    /// Not enough stock for the quantity; `remaining` is what is left (0 means sold out).
    SoldOut {
        /// Stock left.
        remaining: i64,
    },
    /// The user already holds `held`, and `held + qty` would pass the limit.
    LimitReached {
        /// Quantity the user holds.
        held: i64,
    },
    /// The request id was already used: its reservation is in the outbox, or the request is
    /// finished (in the `released` ledger: released, or undone with nothing to release, so that
    /// a late run of its call after the undo reserves nothing).
    Duplicate,
    /// The campaign's stock is not published, or it is not READY/LIVE.
    NotReady,
    /// The quantity is below 1 or above `limit`.
    BadQuantity {
        /// The per-user limit.
        limit: i64,
    },
    /// The nonce was used by another request: a replay. Nothing was read or written.
    Replay,
    /// The caller's bucket count is not the one the campaign was published with: its home
    /// buckets are not the published ones. Nothing was written (a gateway whose campaign file
    /// says another `buckets`).
    OtherBuckets {
        /// The published count.
        published: i64,
    },
    /// A bucket of a campaign with buckets is short of the quantity, and other buckets may still
    /// give it stock (asked for with `fall_over`): nothing was written and the nonce is
    /// forgotten, so the same request may be sent again once stock moved here.
    BucketShort {
        /// Stock left in this bucket.
        remaining: i64,
    },
    /// The same signed request came again with its nonce (a safe retry) and had reserved:
    /// answer QUEUED with the first request's id. Nothing was reserved now.
    Retry {
        /// The request id of the first answer.
        request_id: String,
    },
    /// Over a `[[global_limit]]` rule the order carried ([`ReserveCall::limits`]): nothing was
    /// counted, read or written, the nonce not spent.
    Limited {
        /// The rule's index in the order's rules (from 0).
        rule: usize,
        /// Until the rule's current window ends, in ms.
        retry_after_ms: u64,
    },
    /// The same signed request came again with its nonce and had been refused: its first
    /// refusal, answered again. A past answer, not a fact of now (the stock may have come back
    /// since): nothing but the buyer's answer may act on it (never the sold-out flag).
    Again(Box<ReserveOutcome>),
}

/// The nonce of an order, checked in the same call as the reservation (`KEYS[9]`, `ARGV[5..6]`
/// of `reserve.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce {
    /// Its key, `CampaignKeys::nonce`.
    pub key: String,
    /// How long Redis remembers it (at least the timestamp window).
    pub ttl_secs: u32,
    /// What tells the same signed request from another one using the nonce (the hex
    /// signature): no spaces.
    pub fingerprint: String,
}

/// One order of a `reserve.lua` call ([`Scripts::reserve`], [`Scripts::reserve_batch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveCall {
    /// The order's request id (the outbox entry's field).
    pub request_id: String,
    /// The buyer.
    pub user: String,
    /// Units asked for.
    pub qty: i64,
    /// The order's nonce, checked and spent in the same call; `None` for orders without one (the
    /// order writer's own reservations, tests).
    pub nonce: Option<Nonce>,
    /// A bucket of a campaign with buckets that other buckets may still give stock to: a short
    /// bucket answers [`ReserveOutcome::BucketShort`] instead of [`ReserveOutcome::SoldOut`].
    pub fall_over: bool,
    /// The campaign's global limit rules for this order, checked (and counted when they all
    /// pass) in the same call, before the nonce is spent; empty: none.
    pub limits: Vec<LimitRule>,
    /// Where the order came from, spliced into its record for the audit: the fragment of
    /// [`crate::record::Origin::fragment`]; empty: none.
    pub origin: String,
}

impl ReserveCall {
    /// An order of `qty` units for `user` under `request_id`, without a nonce, the last word.
    pub fn new(request_id: impl Into<String>, user: impl Into<String>, qty: i64) -> Self {
        Self {
            request_id: request_id.into(),
            user: user.into(),
            qty,
            nonce: None,
            fall_over: false,
            limits: Vec::new(),
            origin: String::new(),
        }
    }

    /// The same order carrying `origin` into its record.
    pub fn with_origin(mut self, origin: &crate::record::Origin) -> Self {
        self.origin = origin.fragment();
        self
    }

    /// The same order with `nonce`.
    pub fn with_nonce(mut self, nonce: Option<Nonce>) -> Self {
        self.nonce = nonce;
        self
    }

    /// The same order with `fall_over`.
    pub fn with_fall_over(mut self, fall_over: bool) -> Self {
        self.fall_over = fall_over;
        self
    }

    /// The same order with the global limit rules `limits`.
    pub fn with_limits(mut self, limits: Vec<LimitRule>) -> Self {
        self.limits = limits;
        self
    }
}

/// One `[[global_limit]]` rule of an order of a `reserve.lua` call ([`ReserveCall::limits`]):
/// its two counters (in the order's bucket, `CampaignKeys::global_limit`) and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRule {
    /// The counter of the current window (`CampaignKeys::global_limit`).
    pub current: String,
    /// The counter of the window before it.
    pub previous: String,
    /// Requests allowed in any window.
    pub max: u32,
    /// The window's length in ms.
    pub window_ms: u64,
    /// How far into the current window the request is, in ms.
    pub into_ms: u64,
}

/// One request of a `release.lua` call ([`Scripts::release_batch`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseCall {
    /// The reservation's request id (released at most once).
    pub request_id: String,
    /// Its buyer (unused by an undo, which reads the outbox record).
    pub user: String,
    /// Units to give back (unused by an undo).
    pub qty: i64,
    /// The gateway's undo: release what the outbox holds, unless claimed.
    pub undo: bool,
    /// With `undo`: the order's nonce, forgotten when nothing is left held.
    pub nonce_key: Option<String>,
    /// Set the units aside (`aside_qty`) instead of back into the stock, whatever the campaign's
    /// pause switch: the database refused the reservation for want of stock, so Redis counted a
    /// unit the sale does not have ([`Scripts::set_aside`]).
    pub aside: bool,
}

/// What `release.lua` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Units given back to the stock (and a replenish message sent); `remaining` after it.
    Released {
        /// Stock after the release.
        remaining: i64,
    },
    /// Released, but set aside: the campaign's `pause_replenish` switch is on (the units go back
    /// to the stock when the switch is turned off, `lua/pause.lua`), or the call asked for it
    /// ([`Scripts::set_aside`]).
    SetAside,
    /// This request id was released before; nothing changed.
    AlreadyReleased,
    /// [`Scripts::undo`] only: the outbox holds nothing for this request id; nothing was
    /// released, and the request id is marked finished (0 units in the `released` ledger), so
    /// that its reservation call, should Redis run it after the undo, reserves nothing.
    NothingHeld,
    /// [`Scripts::undo`] only: the sweeper or a repair has claimed the entry (`lua/claim.lua`),
    /// so it may already be on its way to an order; nothing changed, the reservation stands.
    Claimed,
}

/// What `publish.lua` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Stock loaded; the campaign is READY.
    Published,
    /// Already READY with this stock version and untouched.
    Unchanged,
    /// The campaign is LIVE or has reservations; nothing changed.
    RefusedLive {
        /// State found in Redis.
        state: String,
        /// Stock version found in Redis.
        stock_version: String,
    },
}

/// What a campaign's published metadata says; the arguments of [`Scripts::publish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishSpec {
    /// Stock version (from the database).
    pub stock_version: i64,
    /// Total stock.
    pub total: i64,
    /// Per-user limit.
    pub limit: i64,
    /// Item.
    pub sku: String,
    /// Unit price in cents.
    pub price_cents: i64,
    /// Price version.
    pub price_version: i64,
}

/// The share of `total` units of each of `count` buckets: `total / count` each, the remainder one
/// unit each to the first buckets. Sums to `total`.
pub fn bucket_shares(total: i64, count: u32) -> Vec<i64> {
    let n = i64::from(count.max(1));
    (0..n).map(|i| total / n + i64::from(i < total % n)).collect()
}

/// The default folder of the scripts: `lua/` at the workspace root, as seen from a crate of it.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("lua")
}

/// Reads one script `name` from `dir`, ready for `EVALSHA` with a NOSCRIPT reload. The shared
/// scripts are loaded by [`Scripts::load`]; a binary's own scripts (the order writer's
/// `ack.lua`, `adopt.lua`) are read with this.
pub fn read(dir: &Path, name: &str) -> Result<Script, ScriptError> {
    let path = dir.join(name);
    let body = std::fs::read_to_string(&path).map_err(|source| ScriptError::Read { path, source })?;
    Ok(Script::from_lua(body))
}

const RESERVE: &str = "reserve.lua";
const RELEASE: &str = "release.lua";

/// One order's answer of `reserve.lua`: its three values.
fn reserve_outcome(out: &[fred::types::Value]) -> Result<ReserveOutcome, ScriptError> {
    let (code, n) = (int(RESERVE, &out[0])?, int(RESERVE, &out[1])?);
    // The third value of a refusal (not of 1 or 2, where it is a record or a request id).
    let again = !matches!(code, 1 | 2) && out[2].as_str().is_some_and(|m| m == "again");
    let outcome = match code {
        1 => ReserveOutcome::Reserved { remaining: n, record: out[2].as_string().unwrap_or_default() },
        0 => ReserveOutcome::SoldOut { remaining: n },
        -1 => ReserveOutcome::LimitReached { held: n },
        -2 => ReserveOutcome::Duplicate,
        -3 => ReserveOutcome::NotReady,
        -4 => ReserveOutcome::BadQuantity { limit: n },
        -5 => ReserveOutcome::Replay,
        -6 => ReserveOutcome::OtherBuckets { published: n },
        2 => ReserveOutcome::Retry { request_id: out[2].as_string().unwrap_or_default() },
        3 => ReserveOutcome::BucketShort { remaining: n },
        -7 => ReserveOutcome::Limited {
            rule: usize::try_from(n - 1).unwrap_or(0),
            retry_after_ms: u64::try_from(int(RESERVE, &out[2])?).unwrap_or(0),
        },
        other => return Err(ScriptError::Protocol { script: RESERVE, detail: format!("code {other}") }),
    };
    Ok(if again { ReserveOutcome::Again(Box::new(outcome)) } else { outcome })
}

fn int(script: &'static str, v: &fred::types::Value) -> Result<i64, ScriptError> {
    v.as_i64().ok_or_else(|| ScriptError::Protocol { script, detail: format!("{v:?} is not an integer") })
}

impl Scripts {
    /// The scripts of the repository's `lua/` folder, compiled into the binary (what a gateway
    /// or an embedding proxy runs unless told to read a folder).
    pub fn builtin() -> Self {
        let lua = |body: &str| Script::from_lua(body.to_string());
        Self {
            reserve: lua(include_str!("../lua/reserve.lua")),
            release: lua(include_str!("../lua/release.lua")),
            publish: lua(include_str!("../lua/publish.lua")),
            transfer: lua(include_str!("../lua/transfer.lua")),
            room: lua(include_str!("../lua/room.lua")),
            arrivals: lua(include_str!("../lua/arrivals.lua")),
            admit: lua(include_str!("../lua/admit.lua")),
        }
    }

    /// Reads `reserve.lua`, `release.lua`, `publish.lua`, `transfer.lua`,
    /// `room.lua`, `arrivals.lua` and `admit.lua` from `dir`.
    pub fn load(dir: &Path) -> Result<Self, ScriptError> {
        Ok(Self {
            reserve: read(dir, "reserve.lua")?,
            release: read(dir, "release.lua")?,
            publish: read(dir, "publish.lua")?,
            transfer: read(dir, "transfer.lua")?,
            room: read(dir, "room.lua")?,
            arrivals: read(dir, "arrivals.lua")?,
            admit: read(dir, "admit.lua")?,
        })
    }

    /// SHA1 of the reservation script (what `EVALSHA` sends).
    pub fn reserve_sha(&self) -> &str {
        self.reserve.sha1()
    }

    /// Loads every script into the server's script cache (optional: calls reload on NOSCRIPT).
    pub async fn preload(&self, client: &Client) -> Result<(), ScriptError> {
        for s in [
            &self.reserve,
            &self.release,
            &self.publish,
            &self.transfer,
            &self.room,
            &self.arrivals,
            &self.admit,
        ] {
            s.load(client).await?;
        }
        Ok(())
    }

    /// Runs `reserve.lua` for one order in `bucket` (the buyer's home bucket): a batch of one
    /// ([`Scripts::reserve_batch`]).
    pub async fn reserve(
        &self,
        client: &Client,
        bucket: &Bucket,
        call: &ReserveCall,
    ) -> Result<ReserveOutcome, ScriptError> {
        let mut out = self.reserve_batch(client, bucket, std::slice::from_ref(call)).await?;
        out.pop().ok_or_else(|| ScriptError::Protocol { script: RESERVE, detail: "no answer".into() })
    }

    /// Runs `reserve.lua` once for every order of `calls`, all in `bucket`: each decided as if
    /// it were sent alone, after the ones before it; one answer per order, in their order. With
    /// a `nonce`, an order's nonce is checked and spent in the same call (replay and safe retry,
    /// see the script); with `limits`, its global limits are checked and counted before that.
    /// No call for an empty batch.
    pub async fn reserve_batch(
        &self,
        client: &Client,
        bucket: &Bucket,
        calls: &[ReserveCall],
    ) -> Result<Vec<ReserveOutcome>, ScriptError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys = bucket.keys.all();
        let mut args = Vec::with_capacity(2 + 8 * calls.len());
        args.push(bucket.campaign.clone());
        args.push(bucket.count.to_string());
        for c in calls {
            args.extend([c.request_id.clone(), c.user.clone(), c.qty.to_string()]);
            match &c.nonce {
                Some(n) => {
                    keys.push(n.key.clone());
                    args.extend([n.ttl_secs.to_string(), n.fingerprint.clone()]);
                }
                None => args.extend([String::new(), String::new()]),
            }
            args.push(if c.fall_over { "1" } else { "" }.to_string());
            args.push(c.limits.len().to_string());
            args.push(c.origin.clone());
            for r in &c.limits {
                keys.extend([r.current.clone(), r.previous.clone()]);
                args.extend([r.max.to_string(), r.window_ms.max(1).to_string(), r.into_ms.to_string()]);
            }
        }
        let out: Vec<fred::types::Value> = self.reserve.evalsha_with_retry(client, keys, args).await?;
        if out.len() != 3 * calls.len() {
            let detail = format!("{} values for {} orders", out.len(), calls.len());
            return Err(ScriptError::Protocol { script: RESERVE, detail });
        }
        out.chunks_exact(3).map(reserve_outcome).collect()
    }

    /// Runs `release.lua`: gives `qty` back for `request_id`, at most once (into the stock, or
    /// aside while the campaign pauses replenishment).
    pub async fn release(
        &self,
        client: &Client,
        bucket: &Bucket,
        request_id: &str,
        user: &str,
        qty: i64,
    ) -> Result<ReleaseOutcome, ScriptError> {
        let call =
            ReleaseCall { request_id: request_id.into(), user: user.into(), qty, ..ReleaseCall::default() };
        self.release_one(client, bucket, call).await
    }

    /// Runs `release.lua` in its "aside" mode: releases `qty` for `request_id`, at most once, but
    /// sets the units aside (`aside_qty`) rather than back into the stock. For a reservation the
    /// database refused for want of stock: it had no unit left, so the one Redis reserved is one
    /// the sale does not have, and back in the stock it would be sold again and refused again
    /// until reconcile adopts what Redis lost (`lua/adopt.lua` takes from the units set aside
    /// first).
    pub async fn set_aside(
        &self,
        client: &Client,
        bucket: &Bucket,
        request_id: &str,
        user: &str,
        qty: i64,
    ) -> Result<ReleaseOutcome, ScriptError> {
        let call = ReleaseCall {
            request_id: request_id.into(),
            user: user.into(),
            qty,
            aside: true,
            ..ReleaseCall::default()
        };
        self.release_one(client, bucket, call).await
    }

    /// The gateway's undo of a reservation call whose answer never came back: releases what the
    /// outbox holds for `request_id` (`release.lua` in its "undo" mode), unless the sweeper or a
    /// repair has claimed it. Sent on the same client as that call, it runs after it in Redis,
    /// so afterwards either nothing is held, or the reservation stands and is on its way
    /// ([`ReleaseOutcome::Claimed`]). With the order's `nonce_key`, an undo that leaves nothing
    /// held also forgets the nonce this request spent, so the buyer's retry of the same signed
    /// request is a new attempt.
    pub async fn undo(
        &self,
        client: &Client,
        bucket: &Bucket,
        request_id: &str,
        nonce_key: Option<&str>,
    ) -> Result<ReleaseOutcome, ScriptError> {
        let call = ReleaseCall {
            request_id: request_id.into(),
            qty: 1,
            undo: true,
            nonce_key: nonce_key.map(str::to_string),
            ..ReleaseCall::default()
        };
        self.release_one(client, bucket, call).await
    }

    async fn release_one(
        &self,
        client: &Client,
        bucket: &Bucket,
        call: ReleaseCall,
    ) -> Result<ReleaseOutcome, ScriptError> {
        let mut out = self.release_batch(client, bucket, std::slice::from_ref(&call)).await?;
        out.pop().ok_or_else(|| ScriptError::Protocol { script: RELEASE, detail: "no answer".into() })
    }

    /// Runs `release.lua` once for every request of `calls`, all in `bucket`: each released as
    /// in a call of its own, in order (at most once per request id); one answer per request.
    /// No call for an empty batch.
    pub async fn release_batch(
        &self,
        client: &Client,
        bucket: &Bucket,
        calls: &[ReleaseCall],
    ) -> Result<Vec<ReleaseOutcome>, ScriptError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys = bucket.keys.all();
        let mut args = Vec::with_capacity(2 + 5 * calls.len());
        args.extend([REPLENISH_CHANNEL.to_string(), bucket.campaign.clone()]);
        for c in calls {
            keys.extend(c.nonce_key.clone());
            args.extend([
                c.request_id.clone(),
                c.user.clone(),
                c.qty.to_string(),
                if c.undo {
                    "undo"
                } else if c.aside {
                    "aside"
                } else {
                    ""
                }
                .to_string(),
                if c.nonce_key.is_some() { "1" } else { "" }.to_string(),
            ]);
        }
        let out: Vec<fred::types::Value> = self.release.evalsha_with_retry(client, keys, args).await?;
        if out.len() != 2 * calls.len() {
            let detail = format!("{} values for {} requests", out.len(), calls.len());
            return Err(ScriptError::Protocol { script: RELEASE, detail });
        }
        out.chunks_exact(2)
            .map(|v| match (int(RELEASE, &v[0])?, int(RELEASE, &v[1])?) {
                (1, n) => Ok(ReleaseOutcome::Released { remaining: n }),
                (3, _) => Ok(ReleaseOutcome::SetAside),
                (0, _) => Ok(ReleaseOutcome::AlreadyReleased),
                (2, _) => Ok(ReleaseOutcome::NothingHeld),
                (5, _) => Ok(ReleaseOutcome::Claimed),
                (other, _) => Err(ScriptError::Protocol { script: RELEASE, detail: format!("code {other}") }),
            })
            .collect()
    }

    /// Runs `publish.lua` for one `bucket`, with `spec.total` its share of the stock
    /// ([`bucket_shares`]).
    pub async fn publish(
        &self,
        client: &Client,
        bucket: &Bucket,
        spec: &PublishSpec,
    ) -> Result<PublishOutcome, ScriptError> {
        const NAME: &str = "publish.lua";
        let keys = bucket.keys.all();
        let args = vec![
            spec.stock_version.to_string(),
            spec.total.to_string(),
            spec.limit.to_string(),
            spec.sku.clone(),
            spec.price_cents.to_string(),
            spec.price_version.to_string(),
            bucket.count.to_string(),
            bucket.index.to_string(),
        ];
        let out: Vec<fred::types::Value> = self.publish.evalsha_with_retry(client, keys, args).await?;
        let code = out.first().map(|v| int(NAME, v)).transpose()?;
        let text = |i: usize| out.get(i).and_then(|v| v.as_string()).unwrap_or_default();
        match code {
            Some(1) => Ok(PublishOutcome::Published),
            Some(0) => Ok(PublishOutcome::Unchanged),
            Some(-1) => Ok(PublishOutcome::RefusedLive { state: text(1), stock_version: text(2) }),
            other => Err(ScriptError::Protocol { script: NAME, detail: format!("code {other:?}") }),
        }
    }

    /// Runs `publish.lua` for every one of `count` buckets of `campaign`, each with its share of
    /// `spec.total` ([`bucket_shares`]); the outcomes in bucket order. Stops at the first error.
    pub async fn publish_buckets(
        &self,
        client: &Client,
        campaign: &str,
        count: u32,
        spec: &PublishSpec,
    ) -> Result<Vec<PublishOutcome>, ScriptError> {
        let mut outcomes = Vec::with_capacity(count as usize);
        for (bucket, share) in Bucket::all(campaign, count).iter().zip(bucket_shares(spec.total, count)) {
            outcomes.push(self.publish(client, bucket, &PublishSpec { total: share, ..spec.clone() }).await?);
        }
        Ok(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_load_from_the_workspace() {
        let s = Scripts::load(&default_dir()).unwrap();
        assert_eq!(s.reserve_sha().len(), 40);
    }

    #[test]
    fn bucket_shares_sum_to_the_total() {
        assert_eq!(bucket_shares(10, 3), vec![4, 3, 3]);
        assert_eq!(bucket_shares(2, 3), vec![1, 1, 0]);
        assert_eq!(bucket_shares(7, 1), vec![7]);
        for (total, count) in [(0, 5), (100_000, 7), (1, 64)] {
            assert_eq!(bucket_shares(total, count).iter().sum::<i64>(), total);
        }
    }

    #[test]
    fn a_missing_folder_names_the_file() {
        let err = Scripts::load(Path::new("/nonexistent-lua-dir")).unwrap_err();
        assert!(err.to_string().contains("reserve.lua"), "{err}");
    }
}
