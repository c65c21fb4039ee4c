//! The reservation step of an order ([`Seller::sell`]): run
//! `reserve.lua` once ([`Reserver`]), learn "sold out" for the local flag, turn the outcome into
//! `Ok` (reserved: answer `202 QUEUED`) or a [`Denial`], and hand the reserved record, signed, to
//! the Kafka queue without waiting ([`ReservationQueue`]). The record in the Redis outbox is the
//! promise behind the `Ok`; nothing of it waits on Kafka.

use std::time::Duration;

use protocol::codes::Code;
use protocol::scripts::ReserveOutcome;
use protocol::signing::Signer;

use crate::checks::sold_out::{now_ms, SoldOutFlag};
use crate::denial::Denial;
use crate::queue::ReservationQueue;
use crate::reserve::{self, Order, ReserveError, Reserver};

/// A reservation the buyer is told about: answer `202 QUEUED`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queued {
    /// Reserved now, under the request's own id.
    New,
    /// The same signed request came again (same nonce): it reserved before, under this id.
    Retry(String),
}

/// Where a reservation's effects go besides its answer: the campaign's sold-out flag (with how
/// long it lives) and the signer of its Kafka record.
#[derive(Debug, Clone, Copy)]
pub struct Effects<'a> {
    /// The campaign's local sold-out flag.
    pub sold_out: &'a SoldOutFlag,
    /// How long the flag lives without a replenish message.
    pub sold_out_ttl: Duration,
    /// Signs the record for Kafka (the order writer's gateway key).
    pub signer: &'a Signer,
}

/// The reserver and the Kafka queue of one process: sells a checked order.
#[derive(Debug, Clone)]
pub struct Seller {
    reserver: Reserver,
    queue: ReservationQueue,
}

impl Seller {
    /// A seller over a Redis reserver and a started queue.
    pub fn new(reserver: Reserver, queue: ReservationQueue) -> Self {
        Self { reserver, queue }
    }

    /// Sells `order`: reserves it and hands its record to Kafka. `Ok` means reserved (answer `202 QUEUED`): the record is in the outbox
    /// and on its way to Kafka, or, for a safe retry, was before. Never retried (a timeout may
    /// hide a reservation; see [`Reserver::reserve`]).
    pub async fn sell(&self, order: Order<'_>, effects: Effects<'_>) -> Result<Queued, Denial> {
        let Order { request_id, user, .. } = order;
        let asked = now_ms();
        let decision = match self.reserver.decide(&order).await {
            Ok(decision) => decision,
            Err(ReserveError::Claimed(cause)) => {
                tracing::info!(request_id, cause, "late reservation already swept: QUEUED");
                return Ok(Queued::New);
            }
            Err(e) => return Err(reserve::degraded(&e, request_id)),
        };
        if decision.sold_out_everywhere {
            effects.sold_out.mark(asked, now_ms(), effects.sold_out_ttl);
        }
        let outcome = decision.outcome;
        if let (ReserveOutcome::Limited { rule, retry_after_ms }, Some(check)) = (&outcome, order.limits) {
            return Err(check.over(*rule, *retry_after_ms));
        }
        if let Some(d) = reserve::denial(&outcome) {
            return Err(d);
        }
        match outcome {
            ReserveOutcome::Reserved { record, .. } => {
                let signature = effects.signer.sign(record.as_bytes());
                self.queue.enqueue(user, record, signature);
                Ok(Queued::New)
            }
            ReserveOutcome::Retry { request_id } => Ok(Queued::Retry(request_id)),
            _ => Err(Denial::new(Code::Internal, "unexpected reservation outcome")),
        }
    }
}
