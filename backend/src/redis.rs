//! Redis: the connection, the order writer's own scripts (`lua/ack.lua`, `lua/adopt.lua`) next
//! to the shared ones, and the replenish message.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fred::prelude::*;
use fred::types::scripts::Script;
use protocol::keys::{CampaignKeys, REPLENISH_CHANNEL};
use protocol::scripts::{self, Scripts};

/// Connects with bounded timeouts: a Redis that is down fails calls quickly instead of hanging.
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let config = Config::from_url(url).with_context(|| format!("bad Redis URL {url}"))?;
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(2);
            c.internal_command_timeout = Duration::from_secs(2);
            c.tcp = TcpConfig { nodelay: Some(true), ..Default::default() };
        })
        .with_performance_config(|p| {
            p.default_command_timeout = Duration::from_secs(2);
        })
        .set_policy(ReconnectPolicy::new_constant(0, 200))
        .build()
        .context("building the Redis client")?;
    client.init().await.with_context(|| format!("cannot connect to Redis at {url}"))?;
    Ok(client)
}

/// Every script the order writer calls.
#[derive(Clone, Debug)]
pub struct RedisScripts {
    /// The shared scripts (release, publish, reserve).
    pub shared: Scripts,
    ack: Script,
    adopt: Script,
}

impl RedisScripts {
    /// Reads the scripts from the `lua/` folder.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            shared: Scripts::load(dir)?,
            ack: scripts::read(dir, "ack.lua")?,
            adopt: scripts::read(dir, "adopt.lua")?,
        })
    }

    /// Removes committed reservations from the outbox (idempotent). Returns how many were
    /// still there.
    pub async fn ack(&self, client: &Client, campaign: &str, request_ids: &[String]) -> anyhow::Result<i64> {
        if request_ids.is_empty() {
            return Ok(0);
        }
        let keys = CampaignKeys::new(campaign).all();
        let n: i64 = self.ack.evalsha_with_reload(client, keys, request_ids.to_vec()).await?;
        Ok(n)
    }

    /// Takes an order's quantity out of the Redis sale again (reconciliation repair; idempotent
    /// by request id). Returns `Some(taken)` when applied now, `None` when applied before.
    pub async fn adopt(
        &self,
        client: &Client,
        campaign: &str,
        request_id: &str,
        user: &str,
        qty: i64,
    ) -> anyhow::Result<Option<i64>> {
        let keys = CampaignKeys::new(campaign).all();
        let out: Vec<i64> = self
            .adopt
            .evalsha_with_reload(
                client,
                keys,
                vec![request_id.to_string(), user.to_string(), qty.to_string()],
            )
            .await?;
        match out.as_slice() {
            [1, taken] => Ok(Some(*taken)),
            [0, _] => Ok(None),
            other => anyhow::bail!("adopt.lua answered {other:?}"),
        }
    }
}

/// Tells every gateway that `campaign` has stock again (clears their sold-out flags).
pub async fn publish_replenish(client: &Client, campaign: &str) -> anyhow::Result<()> {
    let _: i64 = client.publish(REPLENISH_CHANNEL, campaign).await?;
    Ok(())
}
