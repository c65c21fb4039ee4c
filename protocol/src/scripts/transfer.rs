//! The wrappers of `lua/transfer.lua`: stock moved between two hot-stock buckets of a campaign,
//! "give" on one bucket, then "take" on the other ([`crate::keys::Bucket`]).

use fred::prelude::Client;

use super::{int, ScriptError, Scripts};
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
