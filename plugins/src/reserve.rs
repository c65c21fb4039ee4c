//! The reservation at the edge (seed: Redis 原子预扣库存): one `EVALSHA` of `lua/reserve.lua`
//! (per-user limit, stock check, decrement and outbox record, atomically), with a bounded
//! timeout. Redis down or slow → `SERVICE_DEGRADED` quickly; the database is never the fallback.
//!
//! A call whose answer does not come back (timeout, connection lost) may still have reserved in
//! Redis. It is undone at once: [`Scripts::undo`] on the same connection runs after the call in
//! Redis and gives back whatever the outbox holds for the request id (and forgets the nonce the
//! call spent, so the buyer may send the same signed request again), unless the sweeper has
//! already claimed the entry (then the reservation stands and is on its way to an order: the
//! buyer is told QUEUED). Only when the undo fails too is the outcome unknown, and the answer
//! says so (the result URL will tell).
//!
//! An order of a campaign with `[[global_limit]]` rules carries them into its first call
//! (`crate::checks::global_limit`): they are checked and counted there, before the nonce, and a rule
//! `on_error = "closed"` bounds that call's wait by `global_timeout_ms`.
//!
//! Hot-stock buckets (seed: 热点 Key 分桶): a campaign with B buckets reserves in the buyer's home
//! bucket, where their limit and nonces live. When it is short, stock moves to it from the other
//! buckets, in order and at most `tries` of them (`lua/transfer.lua`: at least half of what the
//! other bucket has, so one move serves the next buyers too), and the reservation is asked again.
//! "Sold out" for the local flag means every bucket was found empty.
//!
//! Around the call: the orders of one bucket sent together while a call of it is in flight
//! (`batch`), no more at once than the bucket's adaptive limit (`admission`), and the whole step
//! of an order (reserve, sold-out flag, answer, hand-off to the queue) in `sale`.

pub(crate) mod admission;
pub(crate) mod batch;
pub(crate) mod sale;

pub use admission::INITIAL_LIMIT;
pub use batch::BatchConf;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::clients::Pool;
use protocol::codes::Code;
use protocol::keys::Bucket;
use protocol::scripts::{
    home_or_fall_over, FallOver, Nonce, ReleaseOutcome, ReserveCall, ReserveOutcome, Scripts,
};
use protocol::timing::undo_timeout;

use crate::checks::global_limit::{self, GlobalCheck};
use crate::denial::Denial;
use crate::reserve::batch::{Attempt, Batcher};

/// Runs the reservation script over a pool of Redis connections.
#[derive(Clone)]
pub struct Reserver {
    pool: Pool,
    scripts: Scripts,
    timeout: Duration,
    batcher: Batcher,
}

impl std::fmt::Debug for Reserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserver")
            .field("timeout", &self.timeout)
            .field("batch", &self.batcher.conf())
            .finish_non_exhaustive()
    }
}

/// Why no decision came back from Redis.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    /// No answer; whatever the call may have reserved was undone.
    #[error("{0}; undone")]
    Undone(String),
    /// No answer within a closed global limit's bound (`global_timeout_ms`); whatever the call
    /// may have reserved was undone. The buyer is answered `SERVICE_DEGRADED`, as when the
    /// limits had a call of their own.
    #[error("{0}; the global limits went unchecked; undone")]
    LimitsUnchecked(String),
    /// No answer, and the undo failed too: the request may hold a reservation.
    #[error("{cause}; the undo failed too ({undo}): the request may hold a reservation")]
    Unknown {
        /// Why the reservation call gave no answer.
        cause: String,
        /// Why the undo gave none.
        undo: String,
    },
    /// Not sent: the bucket's orders at the script step are at its adaptive limit
    /// (`crate::reserve::admission`). Nothing was reserved or spent; the buyer is answered `TRY_LATER`.
    #[error("{limit} orders of this bucket are already at the reservation step")]
    Overloaded {
        /// The limit.
        limit: usize,
    },
    /// Not sent by its deadline while Redis kept answering the bucket's calls: Redis is behind
    /// the crowd, not down (`Attempt::Behind`). Nothing was reserved or spent; the buyer is
    /// answered `TRY_LATER`.
    #[error("waited {0:?} behind this bucket's calls, never sent")]
    Behind(Duration),
    /// No answer in time, and the undo found the entry claimed by the sweeper: the call did
    /// reserve, and the record is on its way to an order. The buyer is answered QUEUED.
    #[error("{0}; the reservation was already claimed by the sweeper, so it stands")]
    Claimed(String),
}

/// The Redis client's own per-command timeout for a reserver bounded by `timeout`: past the
/// undo's bound, so that the client never gives up on an undo first.
pub fn command_timeout(timeout: Duration) -> Duration {
    undo_timeout(timeout) + timeout
}

impl Reserver {
    /// A reserver over `pool`, giving up after `timeout`, collecting orders as
    /// [`BatchConf::default`] says.
    pub fn new(pool: Pool, scripts: Scripts, timeout: Duration) -> Self {
        let batcher = Batcher::new(pool.clone(), scripts.clone(), BatchConf::default(), timeout, None);
        Self { pool, scripts, timeout, batcher }
    }

    /// The same reserver collecting orders as `batch` says (`max = 1`: one call per order).
    pub fn with_batch(self, batch: BatchConf) -> Self {
        let io = self.batcher.io();
        self.rebuilt(batch, io)
    }

    /// The same reserver sending its batches on `io`, the runtime that runs `pool`'s
    /// connections (without: on a thread of its own).
    pub fn with_io(self, io: tokio::runtime::Handle) -> Self {
        let batch = self.batcher.conf();
        self.rebuilt(batch, Some(io))
    }

    /// The same reserver with a batcher of `batch` sending on `io`; the batcher it had keeps
    /// both, so the reserver keeps no copy of either.
    fn rebuilt(self, batch: BatchConf, io: Option<tokio::runtime::Handle>) -> Self {
        let (pool, scripts) = (self.pool.clone(), self.scripts.clone());
        let batcher = Batcher::new(pool, scripts, batch, self.timeout, io);
        Self { batcher, ..self }
    }

    /// Its batcher (how it collects, what it sent).
    pub fn batcher(&self) -> &Batcher {
        &self.batcher
    }

    /// Decides `order` in its home bucket, with its nonce checked in the same call; when that
    /// bucket is short, moves stock to it from up to `bucket_tries` other buckets and asks again
    /// ([`home_or_fall_over`]). Never retried by the caller: a timeout may hide a reservation
    /// that did happen, and the outbox (swept by the order writer) is what keeps it.
    pub async fn decide(&self, order: &Order<'_>) -> Result<Decision, ReserveError> {
        let Order { home, bucket_tries: tries, request_id, qty, .. } = *order;
        // One client (one connection) for every call and the undo: Redis runs them in this order.
        let client = self.pool.next_connected();
        // The global limits go with the first call only: a fall-over's call again is the same
        // request, counted once.
        let first = AtomicBool::new(true);
        let reserve = |fall_over: bool| self.once(order, fall_over, first.swap(false, Ordering::Relaxed));
        // A transfer (give, then take) bounded as its two calls were; a failure stops the asking
        // (units given and not taken are finished by the order writer's sweeper).
        let bound = self.timeout * 2;
        let transfer = |other: Bucket, id: String, want: i64| async move {
            let moved =
                tokio::time::timeout(bound, self.scripts.transfer(client, &other, home, &id, want, true));
            Ok(match moved.await {
                Ok(Ok(n)) => Some(n),
                failed => {
                    let error = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {bound:?}"),
                    };
                    tracing::warn!(request_id, bucket = other.index, error, "stock transfer failed");
                    None
                }
            })
        };
        let FallOver { outcome, empty } =
            home_or_fall_over(home, tries, qty, request_id, reserve, transfer).await?;
        let sold_out_everywhere = empty + 1 == home.count
            && matches!(outcome, ReserveOutcome::SoldOut { remaining } if remaining <= 0);
        Ok(Decision { outcome, sold_out_everywhere })
    }

    /// One order's `reserve.lua` call in `bucket` (alone or in a batch, [`Batcher`]), with its
    /// global limits when `with_limits`, undone when its answer does not come back: on the
    /// client its call was written to, so that Redis runs the undo after it.
    async fn once(
        &self,
        order: &Order<'_>,
        fall_over: bool,
        with_limits: bool,
    ) -> Result<ReserveOutcome, ReserveError> {
        let Order { home: bucket, request_id, user, qty, nonce, .. } = *order;
        let mut call =
            ReserveCall::new(request_id, user, qty).with_nonce(nonce.cloned()).with_fall_over(fall_over);
        call.origin = order.origin.to_string();
        let mut wait = self.timeout;
        let check = order.limits.filter(|c| with_limits && !c.rules.is_empty());
        if let Some(check) = check {
            call = call.with_limits(check.rules.clone());
            wait = wait.min(check.closed_within.unwrap_or(wait));
        }
        // A closed rule's bound passed (or the reservation's own): the limits went unchecked.
        let closed = check.is_some_and(|c| c.closed_within.is_some());
        let undone =
            |cause| if closed { ReserveError::LimitsUnchecked(cause) } else { ReserveError::Undone(cause) };
        let deadline = tokio::time::Instant::now() + wait;
        let (cause, client) = match self.batcher.call(bucket, call, deadline).await {
            Attempt::Answered(outcome) => return Ok(outcome),
            Attempt::Overloaded { limit } => return Err(ReserveError::Overloaded { limit }),
            Attempt::Behind { waited } => return Err(ReserveError::Behind(waited)),
            // Never sent: nothing reserved, no nonce spent.
            Attempt::NoAnswer { cause, sent_on: None } => return Err(undone(cause)),
            Attempt::NoAnswer { cause, sent_on: Some(client) } => (cause, client),
        };
        let undo = self.scripts.undo(&client, bucket, request_id, nonce.map(|n| n.key.as_str()));
        match tokio::time::timeout(undo_timeout(self.timeout), undo).await {
            Ok(Ok(ReleaseOutcome::Claimed)) => Err(ReserveError::Claimed(cause)),
            Ok(Ok(_)) => Err(undone(cause)),
            Ok(Err(e)) => Err(ReserveError::Unknown { cause, undo: e.to_string() }),
            Err(_) => Err(ReserveError::Unknown { cause, undo: "no answer".into() }),
        }
    }
}

/// One order, checked, ready to reserve.
#[derive(Debug, Clone, Copy)]
pub struct Order<'a> {
    /// The campaign id.
    pub campaign: &'a str,
    /// The buyer's home bucket ([`Bucket::of_user`]; the campaign's only one without buckets).
    pub home: &'a Bucket,
    /// How many other buckets the order may ask for stock (`bucket_tries` of the campaign file).
    pub bucket_tries: u32,
    /// The id the proxy gave the request.
    pub request_id: &'a str,
    /// The buyer.
    pub user: &'a str,
    /// The quantity asked.
    pub qty: i64,
    /// The order's nonce, spent in the reservation's own call (replay, safe retry).
    pub nonce: Option<&'a Nonce>,
    /// The campaign's global limits for this order, checked in its first call.
    pub limits: Option<&'a GlobalCheck>,
    /// Where the order came from, for its record ([`protocol::record::Origin::fragment`]; empty:
    /// unknown).
    pub origin: &'a str,
}

/// What the reservation decided, and whether it found every bucket empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The last `reserve.lua` answer.
    pub outcome: ReserveOutcome,
    /// Sold out, and every bucket was found empty: the local sold-out flag may be set.
    pub sold_out_everywhere: bool,
}

/// The answer for an outcome that is not a reservation; `None` for [`ReserveOutcome::Reserved`].
pub fn denial(outcome: &ReserveOutcome) -> Option<Denial> {
    Some(match outcome {
        ReserveOutcome::Reserved { .. } | ReserveOutcome::Retry { .. } => return None,
        ReserveOutcome::Replay => Denial::new(
            Code::Replay,
            "this nonce was used by another request; sign each order with a new one",
        ),
        ReserveOutcome::SoldOut { remaining: 0 } | ReserveOutcome::BucketShort { remaining: 0 } => {
            Denial::new(Code::SoldOut, "sold out")
        }
        ReserveOutcome::SoldOut { remaining } | ReserveOutcome::BucketShort { remaining } => {
            Denial::new(Code::SoldOut, format!("only {remaining} left, fewer than the quantity asked"))
        }
        ReserveOutcome::LimitReached { held } => {
            Denial::new(Code::LimitReached, format!("you already hold {held}, the most one buyer may hold"))
        }
        ReserveOutcome::NotReady => {
            Denial::new(Code::CampaignNotReady, "the campaign's stock is not published yet")
        }
        ReserveOutcome::OtherBuckets { published } => {
            tracing::error!(
                published,
                "this gateway's campaign file has another `buckets` than the published campaign: \
                 set buckets = {published} and restart it"
            );
            Denial::new(
                Code::CampaignNotReady,
                "the campaign's stock is not published as this gateway knows it",
            )
        }
        ReserveOutcome::BadQuantity { limit } => {
            Denial::new(Code::BadRequest, format!("qty must be between 1 and {limit}"))
        }
        ReserveOutcome::Duplicate => Denial::new(Code::Internal, "request id used twice"),
        ReserveOutcome::Limited { rule, retry_after_ms } => {
            GlobalCheck::default().over(*rule, *retry_after_ms)
        }
        ReserveOutcome::Again(first) => return denial(first),
    })
}

/// The answer when Redis gave no decision for `request_id`: `TRY_LATER` when the order was not
/// sent (the bucket's limit, or Redis behind the bucket's crowd), `SERVICE_DEGRADED` otherwise;
/// when the request may hold a reservation, one that carries its poll URL and result token
/// ([`Denial::may_hold`]). Not for [`ReserveError::Claimed`], which is a reservation (the caller
/// answers QUEUED).
pub fn degraded(err: &ReserveError, request_id: &str) -> Denial {
    let (message, may_hold) = match err {
        ReserveError::Overloaded { .. } | ReserveError::Behind(_) => {
            let message = "too many orders at once: nothing was reserved, try again";
            return Denial::new(Code::TryLater, message).retry_after(1);
        }
        ReserveError::LimitsUnchecked(_) => {
            tracing::warn!(request_id, error = %err, "global limits unchecked: answering SERVICE_DEGRADED");
            return global_limit::unchecked();
        }
        ReserveError::Undone(_) => {
            ("the reservation service is unavailable: nothing was reserved, try again", false)
        }
        ReserveError::Unknown { .. } | ReserveError::Claimed(_) => (
            "the reservation service is unavailable and this request may hold a reservation: poll \
             its poll_url with X-Result-Token: its result_token to learn the outcome (a new request \
             stays within the per-user limit)",
            true,
        ),
    };
    tracing::warn!(request_id, error = %err, "reservation failed: answering SERVICE_DEGRADED");
    Denial { may_hold, ..Denial::new(Code::ServiceDegraded, message).retry_after(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_codes() {
        let code = |o: ReserveOutcome| denial(&o).map(|d| d.code);
        assert_eq!(code(ReserveOutcome::Reserved { remaining: 1, record: String::new() }), None);
        assert_eq!(code(ReserveOutcome::SoldOut { remaining: 0 }), Some(Code::SoldOut));
        assert_eq!(code(ReserveOutcome::SoldOut { remaining: 1 }), Some(Code::SoldOut));
        assert_eq!(code(ReserveOutcome::LimitReached { held: 1 }), Some(Code::LimitReached));
        assert_eq!(code(ReserveOutcome::NotReady), Some(Code::CampaignNotReady));
        assert_eq!(code(ReserveOutcome::OtherBuckets { published: 3 }), Some(Code::CampaignNotReady));
        assert_eq!(code(ReserveOutcome::BadQuantity { limit: 2 }), Some(Code::BadRequest));
        assert_eq!(code(ReserveOutcome::Replay), Some(Code::Replay));
        assert_eq!(code(ReserveOutcome::Retry { request_id: "r".into() }), None, "a safe retry is QUEUED");
        assert_eq!(code(ReserveOutcome::BucketShort { remaining: 0 }), Some(Code::SoldOut));
        assert_eq!(code(ReserveOutcome::Limited { rule: 0, retry_after_ms: 10 }), Some(Code::RateLimited));
        let again = |o: ReserveOutcome| ReserveOutcome::Again(Box::new(o));
        assert_eq!(code(again(ReserveOutcome::SoldOut { remaining: 0 })), Some(Code::SoldOut));
        assert_eq!(code(again(ReserveOutcome::LimitReached { held: 1 })), Some(Code::LimitReached));
    }

    #[test]
    fn an_order_over_the_limit_is_told_to_try_later_not_degraded() {
        let behind = degraded(&ReserveError::Behind(Duration::from_millis(100)), "r");
        assert_eq!((behind.code, behind.retry_after_secs), (Code::TryLater, Some(1)));
        let over = degraded(&ReserveError::Overloaded { limit: 16 }, "r");
        assert_eq!((over.code, over.retry_after_secs), (Code::TryLater, Some(1)));
        let down = degraded(&ReserveError::Undone("no answer".into()), "r");
        assert_eq!(down.code, Code::ServiceDegraded);
        let unchecked = degraded(&ReserveError::LimitsUnchecked("no answer".into()), "r");
        assert_eq!(unchecked.code, Code::ServiceDegraded);
        assert!(unchecked.message.contains("global limits"), "{}", unchecked.message);
        assert!(!down.may_hold && !unchecked.may_hold, "undone: nothing held");
        let unknown = ReserveError::Unknown { cause: "no answer".into(), undo: "no answer".into() };
        let unknown = degraded(&unknown, "r");
        assert_eq!(
            (unknown.code, unknown.may_hold),
            (Code::ServiceDegraded, true),
            "its answer says where to poll"
        );
    }
}
