//! Redis: the connection, the order writer's own scripts (`lua/ack.lua`, `lua/adopt.lua`,
//! `lua/claim.lua`, `lua/pause.lua`) next to the shared ones. The replenish message is sent by
//! the scripts themselves (`release.lua`, `pause.lua`).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fred::prelude::*;
use fred::types::scripts::Script;
use protocol::cluster::EvalRetry;
use protocol::keys::{Bucket, REPLENISH_CHANNEL};
use protocol::scripts::{self, Scripts};
use protocol::secret::{redact_url, Password};

/// Connects with bounded timeouts: a Redis that is down fails calls quickly instead of hanging.
/// `url` is one Redis or a Redis Cluster (`redis-cluster://`; redirections are then not followed
/// by the client, and the scripts' own retry sends a refused call again: `protocol::cluster`).
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    connect_as(url, None).await
}

/// [`connect`] with `password` (the conf's `redis_password`; the URL holds none). Messages show
/// the URL redacted.
pub async fn connect_as(url: &str, password: Option<&Password>) -> anyhow::Result<Client> {
    let shown = redact_url(url);
    let mut config = Config::from_url(url).with_context(|| format!("bad Redis URL {shown}"))?;
    if let Some(p) = password {
        config.password = Some(p.expose().to_string());
    }
    let clustered = config.server.is_clustered();
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(2);
            c.internal_command_timeout = Duration::from_secs(2);
            if clustered {
                c.max_redirections = protocol::cluster::MAX_REDIRECTIONS;
            }
            c.tcp = TcpConfig { nodelay: Some(true), ..Default::default() };
        })
        .with_performance_config(|p| {
            p.default_command_timeout = Duration::from_secs(2);
        })
        .set_policy(ReconnectPolicy::new_constant(0, 200))
        .build()
        .context("building the Redis client")?;
    client.init().await.with_context(|| format!("cannot connect to Redis at {shown}"))?;
    Ok(client)
}

/// Every script the order writer calls.
#[derive(Clone, Debug)]
pub struct RedisScripts {
    /// The shared scripts (release, publish, reserve).
    pub shared: Scripts,
    ack: Script,
    adopt: Script,
    claim: Script,
    pause: Script,
    restock: Script,
}

/// What `claim.lua` answered for a repair's claim on one outbox entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairClaim {
    /// Claimed: the sweeper no longer produces it. Times are Redis' own (ms).
    Claimed {
        /// When the reservation was made (from its record).
        reserved_at_ms: i64,
        /// Redis' clock at the claim.
        now_ms: i64,
    },
    /// The entry is no longer in the outbox (acked or released meanwhile).
    Gone,
}

/// What `adopt.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptOutcome {
    /// Adopted now: this many units taken (fewer than asked when the stock was short).
    Taken(i64),
    /// Adopted before: nothing changed.
    Before,
    /// Asked only if released, and the request id is not in the `released` ledger.
    NotReleased,
}

impl RedisScripts {
    /// The scripts of the repository's `lua/` folder, compiled into the binary (what the order
    /// writer runs unless its conf names a `lua_dir`).
    pub fn builtin() -> Self {
        let lua = |body: &str| Script::from_lua(body.to_string());
        Self {
            shared: Scripts::builtin(),
            ack: lua(include_str!("../lua/ack.lua")),
            adopt: lua(include_str!("../lua/adopt.lua")),
            claim: lua(include_str!("../lua/claim.lua")),
            pause: lua(include_str!("../lua/pause.lua")),
            restock: lua(include_str!("../lua/restock.lua")),
        }
    }

    /// Reads the scripts from a folder laid out as `lua/` (a developer's changed copy).
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            shared: Scripts::load(dir)?,
            ack: scripts::read(dir, "ack.lua")?,
            adopt: scripts::read(dir, "adopt.lua")?,
            claim: scripts::read(dir, "claim.lua")?,
            pause: scripts::read(dir, "pause.lua")?,
            restock: scripts::read(dir, "restock.lua")?,
        })
    }

    /// The sweeper's claim (`claim.lua` "sweep"): the outbox records of `bucket` reserved, or
    /// last claimed, more than `age` ago by Redis' clock, at most `limit`; each is claimed for
    /// another `age`, so the gateway's undo leaves it alone.
    pub async fn claim_for_sweep(
        &self,
        client: &Client,
        bucket: &Bucket,
        age: Duration,
        limit: i64,
    ) -> anyhow::Result<Vec<String>> {
        let keys = bucket.keys.all();
        let args = vec!["sweep".to_string(), age.as_millis().to_string(), limit.to_string()];
        Ok(self.claim.evalsha_with_retry(client, keys, args).await?)
    }

    /// A repair's claim on one outbox entry (`claim.lua` "repair"): the sweeper skips it until
    /// [`RedisScripts::unclaim_repair`] gives it back.
    pub async fn claim_for_repair(
        &self,
        client: &Client,
        bucket: &Bucket,
        request_id: &str,
    ) -> anyhow::Result<RepairClaim> {
        let keys = bucket.keys.all();
        let args = vec!["repair".to_string(), request_id.to_string()];
        let out: Vec<i64> = self.claim.evalsha_with_retry(client, keys, args).await?;
        match out.as_slice() {
            [1, at, now] => Ok(RepairClaim::Claimed { reserved_at_ms: *at, now_ms: *now }),
            [0, _, _] => Ok(RepairClaim::Gone),
            other => anyhow::bail!("claim.lua answered {other:?}"),
        }
    }

    /// Gives a repair's claim back to the sweeper (`claim.lua` "unrepair").
    pub async fn unclaim_repair(
        &self,
        client: &Client,
        bucket: &Bucket,
        request_id: &str,
    ) -> anyhow::Result<()> {
        let keys = bucket.keys.all();
        let args = vec!["unrepair".to_string(), request_id.to_string()];
        let _: i64 = self.claim.evalsha_with_retry(client, keys, args).await?;
        Ok(())
    }

    /// Applies the `pause_replenish` switch to one bucket in Redis (`lua/pause.lua`). Returns how
    /// many units set aside went back to its stock (turning it off), or `None` when the bucket
    /// is not published in Redis.
    pub async fn pause(&self, client: &Client, bucket: &Bucket, paused: bool) -> anyhow::Result<Option<i64>> {
        let keys = bucket.keys.all();
        let args = vec![
            if paused { "1" } else { "0" }.to_string(),
            REPLENISH_CHANNEL.to_string(),
            bucket.campaign.clone(),
        ];
        let out: Vec<i64> = self.pause.evalsha_with_retry(client, keys, args).await?;
        match out.as_slice() {
            [1, returned] => Ok(Some(*returned)),
            [-3, _] => Ok(None),
            other => anyhow::bail!("pause.lua answered {other:?}"),
        }
    }

    /// Adds `qty` units to `bucket` under the addition `reference` (`lua/restock.lua`), once:
    /// `Some(true)` added now, `Some(false)` added before, `None` the bucket is not published.
    pub async fn restock(
        &self,
        client: &Client,
        bucket: &Bucket,
        reference: &str,
        qty: i64,
    ) -> anyhow::Result<Option<bool>> {
        let keys = bucket.keys.all();
        let args = vec![
            reference.to_string(),
            qty.to_string(),
            REPLENISH_CHANNEL.to_string(),
            bucket.campaign.clone(),
        ];
        let out: Vec<i64> = self.restock.evalsha_with_retry(client, keys, args).await?;
        match out.as_slice() {
            [1, _] => Ok(Some(true)),
            [0, _] => Ok(Some(false)),
            [-3, _] => Ok(None),
            other => anyhow::bail!("restock.lua answered {other:?}"),
        }
    }

    /// Removes committed reservations from `bucket`'s outbox (idempotent): the request ids of
    /// reservations whose home bucket it is. Returns how many were still there.
    pub async fn ack(&self, client: &Client, bucket: &Bucket, request_ids: &[String]) -> anyhow::Result<i64> {
        if request_ids.is_empty() {
            return Ok(0);
        }
        let keys = bucket.keys.all();
        let n: i64 = self.ack.evalsha_with_retry(client, keys, request_ids.to_vec()).await?;
        Ok(n)
    }

    /// Takes an order's quantity out of the Redis sale again (reconciliation repair; idempotent
    /// by request id). With `only_if_released`, only while the request id is still in the
    /// `released` ledger (re-checked in the script).
    pub async fn adopt(
        &self,
        client: &Client,
        bucket: &Bucket,
        request_id: &str,
        user: &str,
        qty: i64,
        only_if_released: bool,
    ) -> anyhow::Result<AdoptOutcome> {
        let keys = bucket.keys.all();
        let mode = if only_if_released { "released" } else { "" };
        let args = vec![request_id.to_string(), user.to_string(), qty.to_string(), mode.to_string()];
        let out: Vec<i64> = self.adopt.evalsha_with_retry(client, keys, args).await?;
        match out.as_slice() {
            [1, taken] => Ok(AdoptOutcome::Taken(*taken)),
            [0, _] => Ok(AdoptOutcome::Before),
            [2, _] => Ok(AdoptOutcome::NotReleased),
            other => anyhow::bail!("adopt.lua answered {other:?}"),
        }
    }
}
