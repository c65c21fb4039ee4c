//! The active configuration, and reloading it without dropping a request.
//!
//! The active conf lives in an [`ArcSwap`]: each request loads one snapshot at its start and
//! keeps it to its end, so a reload never changes the rules under a request in flight (and an
//! old pool lives until its last request is done). [`reload`] reads and validates the files
//! again; an invalid conf is refused, the old one stays, and the error says file:line:field.
//! `SIGHUP` calls it ([`watch_sighup`]); tests call it directly.
//!
//! The listening address, the thread count, the Redis and the Kafka settings, the admin listener
//! and the access log are read once at start:
//! changing them needs a restart, and a reload that changes them says so in the log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use plugins::budget::{Budget, Budgets};
use plugins::edge::{CampaignRef, Conf};
use plugins::eligibility::Eligibility;
use plugins::sold_out::{SoldOutFlag, SoldOutFlags};
use protocol::campaign::Campaign;
use protocol::conf::ConfError;
use protocol::signing::Signer;

use crate::conf::{self, Loaded, ServerConf};
use crate::metrics::{metrics, Answers};
use crate::routes::RouteTable;
use crate::upstreams::{Pool, PoolSet};

/// A campaign with its process-wide state (kept across reloads).
#[derive(Debug)]
pub struct CampaignEntry {
    /// The campaign file.
    pub campaign: Campaign,
    /// Its local sold-out flag.
    pub sold_out: Arc<SoldOutFlag>,
    /// Its concurrency budget.
    pub budget: Arc<Budget>,
    /// Its order-answer counters, resolved here so a request only adds.
    pub answers: Answers,
    /// Who may buy (its lists loaded).
    pub eligibility: Eligibility,
}

impl CampaignEntry {
    /// The campaign as the edge's checks take it.
    pub fn edge(&self) -> CampaignRef<'_> {
        CampaignRef {
            campaign: &self.campaign,
            sold_out: &self.sold_out,
            budget: &self.budget,
            eligibility: &self.eligibility,
        }
    }
}

/// One validated configuration, ready to serve.
#[derive(Debug)]
pub struct Active {
    /// The server file.
    pub server: ServerConf,
    /// Campaigns by id.
    pub campaigns: HashMap<String, CampaignEntry>,
    /// Shop routes.
    pub routes: RouteTable,
    /// One pool per shop route, same index as `server.routes`.
    pub shop_pools: Vec<Pool>,
    /// The order writer's pool.
    pub order_writer: Pool,
    /// Signs the reserved records the gateway produces.
    pub signer: Signer,
}

impl Active {
    /// The server settings the edge's checks run under.
    pub fn edge(&self) -> Conf<'_> {
        let d = &self.server.defense;
        Conf {
            keys: &d.keys,
            login: &d.login,
            provider: d.provider.as_ref(),
            signer: &self.signer,
            sold_out_ttl: self.server.sold_out_ttl,
        }
    }
}

impl PoolSet for Active {
    /// The order writer's pool, then the shop pools.
    fn pools(&self) -> Vec<&Pool> {
        std::iter::once(&self.order_writer).chain(self.shop_pools.iter()).collect()
    }
}

/// What every request and background task of the process shares.
#[derive(Debug)]
pub struct SharedState {
    conf_file: PathBuf,
    active: ArcSwap<Active>,
    /// Sold-out flags by campaign, kept across reloads.
    pub sold_out: SoldOutFlags,
    /// Concurrency budgets by campaign, kept across reloads.
    pub budgets: Budgets,
}

fn build(loaded: Loaded, sold_out: &SoldOutFlags, budgets: &Budgets) -> Result<Active, ConfError> {
    let server = loaded.server;
    let pool_err =
        |e: std::io::Error| ConfError::whole(&server.file, format!("cannot build an upstream pool: {e}"));
    let order_writer = Pool::new("order_writer", &server.order_writer).map_err(pool_err)?;
    let shop_pools = server
        .routes
        .iter()
        .map(|r| Pool::new(&r.name, &r.pool))
        .collect::<Result<Vec<_>, _>>()
        .map_err(pool_err)?;
    for pool in std::iter::once(&order_writer).chain(&shop_pools) {
        metrics().pool_loaded(pool.name());
    }
    let dir = &server.campaigns_dir;
    let campaigns = loaded
        .campaigns
        .into_iter()
        .map(|c| {
            let eligibility = Eligibility::load(dir, &c.eligibility).map_err(|e| {
                ConfError::whole(&dir.join(format!("{}.toml", c.id)), format!("eligibility: {e}"))
            })?;
            let entry = CampaignEntry {
                sold_out: sold_out.get(&c.id),
                budget: budgets.get(&c.id, c.limits.max_inflight),
                answers: metrics().answers_for(&c.id),
                eligibility,
                campaign: c,
            };
            Ok((entry.campaign.id.clone(), entry))
        })
        .collect::<Result<_, ConfError>>()?;
    Ok(Active {
        routes: RouteTable::new(&server.routes),
        signer: Signer::new(&server.signing_key),
        server,
        campaigns,
        shop_pools,
        order_writer,
    })
}

impl SharedState {
    /// Loads `conf_file` and its campaigns; fails on any invalid file.
    pub fn load(conf_file: &Path) -> Result<Self, ConfError> {
        let loaded = conf::load(conf_file)?;
        let (sold_out, budgets) = (SoldOutFlags::default(), Budgets::default());
        let active = build(loaded, &sold_out, &budgets)?;
        Ok(Self {
            conf_file: conf_file.to_path_buf(),
            active: ArcSwap::from_pointee(active),
            sold_out,
            budgets,
        })
    }

    /// The active conf (a snapshot: keep it for the whole request).
    pub fn active(&self) -> Arc<Active> {
        self.active.load_full()
    }
}

/// Reads the files again and, if they are all valid, makes them active. On error the old conf
/// stays active and the error (file:line:col: field) is returned and logged.
pub fn reload(shared: &SharedState) -> Result<Arc<Active>, ConfError> {
    let loaded = conf::load(&shared.conf_file).and_then(|l| build(l, &shared.sold_out, &shared.budgets));
    let new = match loaded {
        Ok(new) => Arc::new(new),
        Err(e) => {
            tracing::error!(error = %e, "reload refused; the previous configuration stays active");
            return Err(e);
        }
    };
    let old = shared.active();
    if let Err(e) = same_buckets(&old, &new) {
        tracing::error!(error = %e, "reload refused; the previous configuration stays active");
        return Err(e);
    }
    let (o, n) = (&old.server, &new.server);
    let tls_listeners =
        |t: &Option<crate::conf::tls::TlsConf>| t.as_ref().map(|t| (t.listen, t.http2, t.redirect_listen));
    if o.listen != n.listen
        || o.threads != n.threads
        || o.redis != n.redis
        || o.kafka != n.kafka
        || o.limits != n.limits
        || o.shutdown != n.shutdown
        || tls_listeners(&o.tls) != tls_listeners(&n.tls)
    {
        tracing::warn!(
            "server.listen, server.threads, [redis], [kafka], [limits], [shutdown] and the [tls] listeners \
             take effect only after a restart (certificates are reloaded now)"
        );
    }
    if o.admin != n.admin || o.access_log != n.access_log {
        tracing::warn!("[admin] and [access_log] take effect only after a restart");
    }
    shared.active.store(Arc::clone(&new));
    tracing::info!(campaigns = new.campaigns.len(), routes = new.shop_pools.len(), "configuration reloaded");
    Ok(new)
}

/// Refuses a conf that gives a campaign this process serves another `buckets` (at the line of
/// `buckets` in its file): its buyers' home buckets, where their limit, nonces and reservations
/// live, would move under the sale. The count is fixed for the life of the process; `campaign
/// publish` fixes it in the order writer once the campaign is past DRAFT, and a restarted
/// gateway with another count than the published one reserves nowhere (its tags are others,
/// and `reserve.lua` refuses a caller whose count is not meta's).
fn same_buckets(old: &Active, new: &Active) -> Result<(), ConfError> {
    for (id, entry) in &new.campaigns {
        let Some(before) = old.campaigns.get(id) else { continue };
        let (was, now) = (before.campaign.buckets, entry.campaign.buckets);
        if was != now {
            let file = new.server.campaigns_dir.join(format!("{id}.toml"));
            return Err(ConfError::at_field(
                &file,
                "buckets",
                format!(
                    "campaign {id} is served with {was} bucket(s); a reload never changes the count \
                     (a buyer's home bucket would move under the sale): set buckets = {was}, or \
                     restart the gateway once the campaign is published with {now}"
                ),
            ));
        }
    }
    Ok(())
}

/// Reloads on every `SIGHUP`, forever.
pub async fn watch_sighup(shared: Arc<SharedState>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGHUP: reload is off");
            return;
        }
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the configuration");
        let _ = reload(&shared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_conf(dir: &Path, stock: &str) {
        write_conf_buckets(dir, stock, 1);
    }

    fn write_conf_buckets(dir: &Path, stock: &str, buckets: u32) {
        std::fs::create_dir_all(dir.join("campaigns")).unwrap();
        std::fs::write(
            dir.join("server.toml"),
            r#"
[server]
listen = "127.0.0.1:1"
signing_key = "file:key"
[redis]
url = "redis://127.0.0.1:1"
[order_writer]
upstreams = ["127.0.0.1:1"]
[kafka]
brokers = ["127.0.0.1:1"]
[defense]
master_key = "file:key"
login_alg = "HS256"
login_key = "file:key"
login_issuer = "shop"
login_audience = "seckill"
"#,
        )
        .unwrap();
        std::fs::write(dir.join("key"), "0123456789abcdef0123").unwrap();
        std::fs::write(
            dir.join("campaigns/c1.toml"),
            format!(
                "id = \"c1\"\nsku = \"S\"\nstock = {stock}\nper_user_limit = 1\nprice_cents = 1\n\
                 starts_at = 2026-01-01T00:00:00Z\nends_at = 2099-01-01T00:00:00Z\nbuckets = {buckets}\n"
            ),
        )
        .unwrap();
    }

    #[test]
    fn a_bad_reload_keeps_the_old_conf_and_a_good_one_replaces_it() {
        let dir = std::env::temp_dir().join(format!("gw-reload-{}", uuid::Uuid::new_v4().simple()));
        write_conf(&dir, "10");
        let shared = SharedState::load(&dir.join("server.toml")).unwrap();
        let flag = shared.active().campaigns["c1"].sold_out.clone();
        let now = plugins::sold_out::now_ms();
        flag.mark(now, now, std::time::Duration::from_secs(60));

        write_conf(&dir, "-1");
        let err = reload(&shared).unwrap_err();
        assert!(err.to_string().contains("c1.toml:3:"), "{err}");
        assert_eq!(err.field.as_deref(), Some("stock"));
        assert_eq!(shared.active().campaigns["c1"].campaign.stock, 10, "the old conf stays");

        write_conf(&dir, "20");
        reload(&shared).unwrap();
        let active = shared.active();
        assert_eq!(active.campaigns["c1"].campaign.stock, 20);
        assert!(Arc::ptr_eq(&active.campaigns["c1"].sold_out, &flag), "flags survive a reload");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reload_never_changes_the_bucket_count_of_a_campaign_it_serves() {
        let dir = std::env::temp_dir().join(format!("gw-reload-{}", uuid::Uuid::new_v4().simple()));
        write_conf_buckets(&dir, "10", 3);
        let shared = SharedState::load(&dir.join("server.toml")).unwrap();
        write_conf_buckets(&dir, "10", 4);
        let err = reload(&shared).unwrap_err();
        assert!(err.to_string().contains("c1.toml:8:1:"), "{err}");
        assert_eq!(err.field.as_deref(), Some("buckets"));
        assert_eq!(shared.active().campaigns["c1"].campaign.buckets, 3, "the old conf stays");
        // Other changes of the same campaign still reload.
        write_conf_buckets(&dir, "20", 3);
        reload(&shared).unwrap();
        assert_eq!(shared.active().campaigns["c1"].campaign.stock, 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
