//! The wrappers of `lua/transfer.lua`: stock moved between two hot-stock buckets of a campaign,
//! "give" on one bucket, then "take" on the other ([`crate::keys::Bucket`]), and the reservation
//! that moves stock to a buyer's short home bucket ([`home_or_fall_over`]).

use std::future::Future;

use fred::prelude::Client;

use super::{int, ReserveOutcome, ScriptError, Scripts};
use crate::cluster::EvalRetry;
use crate::keys::{Bucket, REPLENISH_CHANNEL};

/// What the "take" half of `transfer.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeOutcome {
    /// The units were added now; `remaining` is the bucket's stock after it.
    Added {
        /// Stock after the transfer.
        remaining: i64,
    },
    /// This transfer id was taken before: nothing changed.
    AddedBefore,
}

impl Scripts {
    /// The "give" half of a transfer (`transfer.lua`): takes up to `qty` units (with `half`, at
    /// least half of what is there) out of `from` for bucket `to`, under `transfer_id`. Returns
    /// `(given, remaining)`; given 0 when `from` is empty. Follow it with [`Scripts::take`] on
    /// bucket `to`; the order writer's sweeper finishes a transfer whose take never ran.
    pub async fn give(
        &self,
        client: &Client,
        from: &Bucket,
        transfer_id: &str,
        to: u32,
        qty: i64,
        half: bool,
    ) -> Result<(i64, i64), ScriptError> {
        const NAME: &str = "transfer.lua";
        let keys = vec![from.keys.meta.clone(), from.keys.stock.clone(), from.keys.sent.clone()];
        let args = vec![
            "give".to_string(),
            transfer_id.to_string(),
            to.to_string(),
            qty.to_string(),
            if half { "half" } else { "" }.to_string(),
        ];
        let out: Vec<fred::types::Value> = self.transfer.evalsha_with_retry(client, keys, args).await?;
        match out.as_slice() {
            [given, remaining] => Ok((int(NAME, given)?, int(NAME, remaining)?)),
            other => Err(ScriptError::Protocol { script: NAME, detail: format!("{} values", other.len()) }),
        }
    }

    /// The "take" half of a transfer: adds `qty` units to `to` once per `transfer_id`.
    pub async fn take(
        &self,
        client: &Client,
        to: &Bucket,
        transfer_id: &str,
        qty: i64,
    ) -> Result<TakeOutcome, ScriptError> {
        const NAME: &str = "transfer.lua";
        let keys = vec![to.keys.meta.clone(), to.keys.stock.clone(), to.keys.received.clone()];
        let args = vec![
            "take".to_string(),
            transfer_id.to_string(),
            qty.to_string(),
            REPLENISH_CHANNEL.to_string(),
            to.campaign.clone(),
        ];
        let out: Vec<fred::types::Value> = self.transfer.evalsha_with_retry(client, keys, args).await?;
        let code = out.first().map(|v| int(NAME, v)).transpose()?;
        let n = out.get(1).map(|v| int(NAME, v)).transpose()?.unwrap_or(0);
        match code {
            Some(1) => Ok(TakeOutcome::Added { remaining: n }),
            Some(0) => Ok(TakeOutcome::AddedBefore),
            other => Err(ScriptError::Protocol { script: NAME, detail: format!("code {other:?}") }),
        }
    }
}

impl Scripts {
    /// One whole transfer: [`Scripts::give`] on `from`, then [`Scripts::take`] on `to` of what
    /// was given, under `transfer_id`. Returns the units moved (0: `from` had none). An error
    /// after the give leaves the units in flight, in `from`'s `sent` ledger: the order writer's
    /// sweeper finishes the transfer.
    pub async fn transfer(
        &self,
        client: &Client,
        from: &Bucket,
        to: &Bucket,
        transfer_id: &str,
        qty: i64,
        half: bool,
    ) -> Result<i64, ScriptError> {
        let (given, _) = self.give(client, from, transfer_id, to.index, qty, half).await?;
        if given > 0 {
            self.take(client, to, transfer_id, given).await?;
        }
        Ok(given)
    }
}

/// What [`home_or_fall_over`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallOver {
    /// The last `reserve.lua` answer.
    pub outcome: ReserveOutcome,
    /// How many other buckets were found empty.
    pub empty: u32,
}

/// A reservation of a campaign with hot-stock buckets, whoever makes it (the gateway, `order-writer
/// produce`): `reserve(fall_over)` runs `reserve.lua` once in the buyer's `home` bucket. While it
/// answers [`ReserveOutcome::BucketShort`], the next of up to `tries` other buckets, in order, is
/// asked for the missing units by `transfer(other, transfer_id, want)` (id `<request id>:<k>`;
/// `Some(units moved)`, or `None` to stop asking), and the reservation is asked again; the last
/// call is made without fall-over, so its answer is the last word. Without buckets, one call.
pub async fn home_or_fall_over<E, R, RF, T, TF>(
    home: &Bucket,
    tries: u32,
    qty: i64,
    request_id: &str,
    reserve: R,
    transfer: T,
) -> Result<FallOver, E>
where
    R: Fn(bool) -> RF,
    RF: Future<Output = Result<ReserveOutcome, E>>,
    T: Fn(Bucket, String, i64) -> TF,
    TF: Future<Output = Result<Option<i64>, E>>,
{
    let tries = if home.count > 1 { tries.min(home.count - 1) } else { 0 };
    let mut outcome = reserve(tries > 0).await?;
    let mut empty = 0;
    for k in 1..=tries {
        let ReserveOutcome::BucketShort { remaining } = outcome else { break };
        let other = Bucket::nth(&home.campaign, home.index + k, home.count);
        match transfer(other, format!("{request_id}:{k}"), qty - remaining).await? {
            Some(0) => empty += 1,
            Some(_) => outcome = reserve(k < tries).await?,
            None => break,
        }
    }
    if let ReserveOutcome::BucketShort { .. } = outcome {
        outcome = reserve(false).await?;
    }
    Ok(FallOver { outcome, empty })
}
