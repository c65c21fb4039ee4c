//! The campaigns a process sells and the settings they run under, reloaded without dropping a
//! request.
//!
//! The active [`Registry`] lives in an [`ArcSwap`]: each request loads one snapshot at its start
//! and keeps it to its end, so a reload never changes the rules under a request in flight.
//! [`Registrar::reload`] reads and checks the files again; an invalid one is refused, the old
//! registry stays, and the error says file:line:column:field. A campaign's process state (its
//! sold-out flag and concurrency budget) is kept across reloads.
//!
//! `[redis]` and `[kafka]` are read once at start: a reload that changes them says so in the
//! log, and they take effect after a restart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use protocol::campaign::Campaign;
use protocol::conf::ConfError;
use protocol::control::Fleet;
use protocol::signing::Signer;

use crate::checks::budget::{Budget, Budgets};
use crate::checks::eligibility::Eligibility;
use crate::checks::sold_out::{SoldOutFlag, SoldOutFlags};
use crate::edge::{CampaignRef, Conf};
use crate::setup::conf::{Loaded, SaleConf};
use crate::setup::control::{Controls, LiveControl};

/// A campaign with its process state (kept across reloads).
#[derive(Debug)]
pub struct CampaignEntry {
    /// The campaign file.
    pub campaign: Campaign,
    /// Its local sold-out flag.
    pub sold_out: Arc<SoldOutFlag>,
    /// Its concurrency budget.
    pub budget: Arc<Budget>,
    /// Who may buy (its lists loaded).
    pub eligibility: Eligibility,
    /// Its operated state, read from Redis.
    pub control: Arc<LiveControl>,
}

impl CampaignEntry {
    /// The campaign as the edge's checks take it.
    pub fn as_ref(&self) -> CampaignRef<'_> {
        CampaignRef {
            campaign: &self.campaign,
            sold_out: &self.sold_out,
            budget: &self.budget,
            eligibility: &self.eligibility,
            control: &self.control,
        }
    }
}

/// One checked set of settings and campaigns, ready to sell.
#[derive(Debug)]
pub struct Registry {
    /// The sale's settings.
    pub conf: SaleConf,
    /// Campaigns by id.
    pub campaigns: HashMap<String, CampaignEntry>,
    /// Signs the reserved records.
    pub signer: Signer,
    /// This process's side of the contract with the order writer (its signing key's
    /// fingerprint, its topic and partitions), checked against each campaign's published one.
    pub fleet: Fleet,
}

impl Registry {
    /// The settings the edge's checks run under.
    pub fn edge_conf(&self) -> Conf<'_> {
        let d = &self.conf.defense;
        Conf {
            keys: &d.keys,
            login: &d.login,
            provider: d.provider.as_ref(),
            signer: &self.signer,
            sold_out_ttl: self.conf.sold_out_ttl,
            shed_at_lag: self.conf.shed_at_lag,
        }
    }

    /// A campaign by id.
    pub fn campaign(&self, id: &str) -> Option<&CampaignEntry> {
        self.campaigns.get(id)
    }
}

/// Where the sale's settings come from, read again on every reload: a file, a file's text
/// under a name (errors say name:line:column: field, and relative paths start beside it), or
/// settings already checked (a reload then reads only the campaigns folder again).
#[derive(Debug, Clone)]
pub enum SaleSource {
    /// A server file with the sale's sections ([`crate::conf::SECTIONS`]).
    File(PathBuf),
    /// The text of such a file, and the name it goes by.
    Text {
        /// Names the text in errors; relative paths (campaigns, `file:` secrets) start beside it.
        name: PathBuf,
        /// The TOML.
        text: String,
    },
    /// Settings built or checked by the caller.
    Conf(Box<SaleConf>),
}

impl SaleSource {
    /// Reads and checks the settings and every campaign of their campaigns folder.
    pub fn load(&self) -> Result<Loaded, ConfError> {
        match self {
            SaleSource::File(file) => SaleConf::load(file),
            SaleSource::Text { name, text } => SaleConf::parse(name, text).and_then(Loaded::with_campaigns),
            SaleSource::Conf(conf) => Loaded::with_campaigns(SaleConf::clone(conf)),
        }
    }

    /// What the settings are called in errors and in the log.
    pub fn name(&self) -> String {
        match self {
            SaleSource::File(file) | SaleSource::Text { name: file, .. } => file.display().to_string(),
            SaleSource::Conf(conf) => conf.file.display().to_string(),
        }
    }
}

impl From<&Path> for SaleSource {
    fn from(file: &Path) -> Self {
        SaleSource::File(file.to_path_buf())
    }
}

impl From<PathBuf> for SaleSource {
    fn from(file: PathBuf) -> Self {
        SaleSource::File(file)
    }
}

impl From<&PathBuf> for SaleSource {
    fn from(file: &PathBuf) -> Self {
        SaleSource::File(file.clone())
    }
}

impl From<&str> for SaleSource {
    /// A file's path.
    fn from(file: &str) -> Self {
        SaleSource::File(file.into())
    }
}

impl From<&String> for SaleSource {
    /// A file's path.
    fn from(file: &String) -> Self {
        SaleSource::File(file.into())
    }
}

impl From<SaleConf> for SaleSource {
    fn from(conf: SaleConf) -> Self {
        SaleSource::Conf(Box::new(conf))
    }
}

/// The active registry and the process state it is built with.
#[derive(Debug)]
pub struct Registrar {
    source: SaleSource,
    active: ArcSwap<Registry>,
    /// Sold-out flags by campaign, kept across reloads.
    pub sold_out: SoldOutFlags,
    /// Concurrency budgets by campaign, kept across reloads.
    pub budgets: Budgets,
    /// Operated states by campaign, kept across reloads.
    pub controls: Controls,
}

impl Registrar {
    /// The registry of `source`'s sale sections and campaigns; fails on any invalid file.
    pub fn load(source: impl Into<SaleSource>) -> Result<Self, ConfError> {
        let source = source.into();
        let kept = Kept::default();
        let active = build(source.load()?, &kept)?;
        let Kept { sold_out, budgets, controls } = kept;
        Ok(Self { source, active: ArcSwap::from_pointee(active), sold_out, budgets, controls })
    }

    /// The active registry (a snapshot: keep it for the whole request).
    pub fn active(&self) -> Arc<Registry> {
        self.active.load_full()
    }

    /// Reads the files again and, if they are all valid, makes them active. On error the old
    /// registry stays and the error (file:line:column: field) is returned and logged.
    pub fn reload(&self) -> Result<Arc<Registry>, ConfError> {
        let refused = |e: ConfError| {
            tracing::error!(error = %e, "reload refused; the previous configuration stays active");
            e
        };
        let kept = KeptRef { sold_out: &self.sold_out, budgets: &self.budgets, controls: &self.controls };
        let new = Arc::new(self.source.load().and_then(|l| build(l, kept)).map_err(refused)?);
        let old = self.active();
        same_buckets(&old, &new).map_err(refused)?;
        agrees_with_published(&new, &self.controls).map_err(refused)?;
        if old.conf.redis != new.conf.redis || old.conf.kafka != new.conf.kafka {
            tracing::warn!("[redis] and [kafka] take effect only after a restart");
        }
        self.active.store(Arc::clone(&new));
        tracing::info!(campaigns = new.campaigns.len(), "sale configuration reloaded");
        Ok(new)
    }
}

/// The process state a registry is built with, kept across reloads.
#[derive(Default)]
struct Kept {
    sold_out: SoldOutFlags,
    budgets: Budgets,
    controls: Controls,
}

#[derive(Clone, Copy)]
struct KeptRef<'a> {
    sold_out: &'a SoldOutFlags,
    budgets: &'a Budgets,
    controls: &'a Controls,
}

impl<'a> From<&'a Kept> for KeptRef<'a> {
    fn from(k: &'a Kept) -> Self {
        KeptRef { sold_out: &k.sold_out, budgets: &k.budgets, controls: &k.controls }
    }
}

fn build<'a>(loaded: Loaded, kept: impl Into<KeptRef<'a>>) -> Result<Registry, ConfError> {
    let KeptRef { sold_out, budgets, controls } = kept.into();
    let Loaded { conf, campaigns } = loaded;
    let dir = &conf.campaigns_dir;
    let campaigns = campaigns
        .into_iter()
        .map(|c| {
            let eligibility = Eligibility::load(dir, &c.eligibility).map_err(|e| {
                ConfError::whole(&dir.join(format!("{}.toml", c.id)), format!("eligibility: {e}"))
            })?;
            let entry = CampaignEntry {
                sold_out: sold_out.get(&c.id),
                budget: budgets.get(&c.id, &c.limits),
                control: controls.get(&c.id),
                eligibility,
                campaign: c,
            };
            Ok((entry.campaign.id.clone(), entry))
        })
        .collect::<Result<_, ConfError>>()?;
    let fleet = Fleet {
        signing: protocol::control::fingerprint(&conf.signing_key),
        topic: conf.kafka.topic.clone(),
        partitions: conf.kafka.partitions,
    };
    Ok(Registry { signer: Signer::new(&conf.signing_key), conf, campaigns, fleet })
}

/// Refuses a conf whose campaign files or contract disagree with what was published for a
/// campaign (as last read from its control hash): a frozen field edited after the publish, a
/// signing key or a topic other than the order writer's. The error is at the field's line, in
/// the campaign file or in the server file.
fn agrees_with_published(new: &Registry, controls: &Controls) -> Result<(), ConfError> {
    for (id, entry) in &new.campaigns {
        let Some(published) = controls.last(id) else { continue };
        let Some(d) = published.disagreements(&entry.campaign, &new.fleet).into_iter().next() else {
            continue;
        };
        let message = format!("{}; the reload is refused", d.message);
        if d.server {
            let text = std::fs::read_to_string(&new.conf.file).unwrap_or_default();
            let key = d.field.rsplit('.').next().unwrap_or(d.field);
            let span = protocol::conf::field_span(&text, key);
            return Err(ConfError::at(&new.conf.file, &text, span, Some(d.field), message));
        }
        return Err(ConfError::at_field(
            &new.conf.campaigns_dir.join(format!("{id}.toml")),
            d.field,
            message,
        ));
    }
    Ok(())
}

/// Refuses a conf that gives a campaign this process serves another `buckets` (at the line of
/// `buckets` in its file): its buyers' home buckets, where their limit, nonces and reservations
/// live, would move under the sale. The count is fixed for the life of the process; `campaign
/// publish` fixes it in the order writer once the campaign is past DRAFT, and a restarted
/// gateway with another count than the published one reserves nowhere (its tags are others,
/// and `reserve.lua` refuses a caller whose count is not meta's).
fn same_buckets(old: &Registry, new: &Registry) -> Result<(), ConfError> {
    for (id, entry) in &new.campaigns {
        let Some(before) = old.campaigns.get(id) else { continue };
        let (was, now) = (before.campaign.buckets, entry.campaign.buckets);
        if was != now {
            let file = new.conf.campaigns_dir.join(format!("{id}.toml"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write_conf(dir: &Path, stock: &str, buckets: u32) {
        std::fs::create_dir_all(dir.join("campaigns")).unwrap();
        std::fs::write(
            dir.join("sale.toml"),
            r#"
[sale]
signing_key = "file:key"
[redis]
url = "redis://127.0.0.1:1"
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

    fn temp_dir() -> PathBuf {
        let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        std::env::temp_dir().join(format!("sale-registry-{}-{n}", std::process::id()))
    }

    #[test]
    fn a_bad_reload_keeps_the_old_registry_and_a_good_one_replaces_it() {
        let dir = temp_dir();
        write_conf(&dir, "10", 1);
        let registrar = Registrar::load(dir.join("sale.toml")).unwrap();
        let flag = registrar.active().campaigns["c1"].sold_out.clone();
        let now = crate::checks::sold_out::now_ms();
        flag.mark(now, now, std::time::Duration::from_secs(60));

        write_conf(&dir, "-1", 1);
        let err = registrar.reload().unwrap_err();
        assert!(err.to_string().contains("c1.toml:3:"), "{err}");
        assert_eq!(err.field.as_deref(), Some("stock"));
        assert_eq!(registrar.active().campaigns["c1"].campaign.stock, 10, "the old conf stays");

        write_conf(&dir, "20", 1);
        registrar.reload().unwrap();
        let active = registrar.active();
        assert_eq!(active.campaigns["c1"].campaign.stock, 20);
        assert!(Arc::ptr_eq(&active.campaigns["c1"].sold_out, &flag), "flags survive a reload");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_text_or_checked_settings_load_like_their_file() {
        let dir = temp_dir();
        write_conf(&dir, "10", 1);
        let file = dir.join("sale.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        let by_text = Registrar::load(SaleSource::Text { name: file.clone(), text: text.clone() }).unwrap();
        assert_eq!(by_text.active().campaigns["c1"].campaign.stock, 10, "campaigns beside the name");
        let conf = SaleConf::parse(&file, &text).unwrap();
        let by_conf = Registrar::load(conf).unwrap();
        write_conf(&dir, "20", 1);
        by_conf.reload().unwrap();
        assert_eq!(by_conf.active().campaigns["c1"].campaign.stock, 20, "the campaigns read again");
        let bad =
            SaleSource::Text { name: "inline.toml".into(), text: text.replace("[redis]", "[redis]\nx = 1") };
        let err = Registrar::load(bad).unwrap_err().to_string();
        assert!(err.starts_with("inline.toml:5:"), "the text's name, line and column: {err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_provider_captcha_without_a_provider_in_the_server_file_is_refused_at_its_line() {
        let dir = temp_dir();
        write_conf(&dir, "10", 1);
        let file = dir.join("campaigns/c1.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, format!("{text}\n[defense]\ncaptcha = \"provider\"\n")).unwrap();
        let err = Registrar::load(dir.join("sale.toml")).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("captcha"));
        assert!(
            err.to_string().contains("c1.toml:11:") && err.to_string().contains("names no captcha_provider"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reload_never_changes_the_bucket_count_of_a_campaign_it_serves() {
        let dir = temp_dir();
        write_conf(&dir, "10", 3);
        let registrar = Registrar::load(dir.join("sale.toml")).unwrap();
        write_conf(&dir, "10", 4);
        let err = registrar.reload().unwrap_err();
        assert!(err.to_string().contains("c1.toml:8:1:"), "{err}");
        assert_eq!(err.field.as_deref(), Some("buckets"));
        assert_eq!(registrar.active().campaigns["c1"].campaign.buckets, 3, "the old conf stays");
        // Other changes of the same campaign still reload.
        write_conf(&dir, "20", 3);
        registrar.reload().unwrap();
        assert_eq!(registrar.active().campaigns["c1"].campaign.stock, 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
