//! `order-writer campaign diff ID --file DIR/ID.toml`: what a change to a campaign file would do,
//! field by field, against the file in force (this conf's copy, whose digest the gateways
//! report) and what was published: applied by the gateways' reload, at the next publish, refused
//! after the publish (and why), or not applied where it matters (and the command to use
//! instead). Changes nothing. Which field goes where is [`effect`], a pure function.

use protocol::campaign::Campaign;

use super::fleet::{self, Gateways};
use crate::app::{Connections, COMMAND_POOL};

/// What a changed field does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Every gateway applies it at its reload (`campaign apply`).
    Reload,
    /// Applied by the next `campaign publish` (while the campaign is DRAFT, or a writer's switch).
    Publish,
    /// Refused by `publish` and by every gateway's reload once published.
    Refused,
    /// The gateways' reload applies it, PostgreSQL keeps the published value.
    GatewaysOnly,
}

impl Effect {
    fn said(self, field: &str) -> String {
        match self {
            Effect::Reload => "applies at the gateways' reload (campaign apply)".into(),
            Effect::Publish => "applies at the next campaign publish".into(),
            Effect::Refused => format!(
                "REFUSED after the publish (publish and every gateway's reload): the buyers' answers, holdings and ledger were made with it{}",
                if field == "stock" { "; more stock comes by campaign add-stock" } else { "" }
            ),
            Effect::GatewaysOnly => format!(
                "applies at the gateways' reload, but PostgreSQL keeps the published {field} (orders' pay-by and `end` read it){}",
                if field == "ends_at" { "; move the end with campaign extend" } else { "" }
            ),
        }
    }
}

/// Where a change of `field` goes, for a campaign `published` (past DRAFT) or not.
pub fn effect(field: &str, published: bool) -> Effect {
    match field {
        "stock" | "price_cents" | "per_user_limit" | "sku" | "buckets" if published => Effect::Refused,
        "stock" | "price_cents" | "per_user_limit" | "sku" | "buckets" => Effect::Publish,
        "starts_at" | "ends_at" | "pay_window_secs" if published => Effect::GatewaysOnly,
        "starts_at" | "ends_at" | "pay_window_secs" => Effect::Publish,
        "switches.pause_replenish" => Effect::Publish,
        _ => Effect::Reload,
    }
}

/// Each field (or table) that differs between `old` and `new`: (field, old, new).
pub fn changes(old: &Campaign, new: &Campaign) -> Vec<(&'static str, String, String)> {
    let pairs: [(&'static str, String, String); 16] = [
        ("stock", old.stock.to_string(), new.stock.to_string()),
        ("price_cents", old.price_cents.to_string(), new.price_cents.to_string()),
        ("per_user_limit", old.per_user_limit.to_string(), new.per_user_limit.to_string()),
        ("sku", format!("{:?}", old.sku), format!("{:?}", new.sku)),
        ("buckets", old.buckets.to_string(), new.buckets.to_string()),
        ("starts_at", old.starts_at.to_rfc3339(), new.starts_at.to_rfc3339()),
        ("ends_at", old.ends_at.to_rfc3339(), new.ends_at.to_rfc3339()),
        ("pay_window_secs", old.pay_window_secs.to_string(), new.pay_window_secs.to_string()),
        ("switches.closed", old.switches.closed.to_string(), new.switches.closed.to_string()),
        ("switches.queue_only", old.switches.queue_only.to_string(), new.switches.queue_only.to_string()),
        (
            "switches.pause_replenish",
            old.switches.pause_replenish.to_string(),
            new.switches.pause_replenish.to_string(),
        ),
        ("[limits]", format!("{:?}", old.limits), format!("{:?}", new.limits)),
        ("[defense]", format!("{:?}", old.defense), format!("{:?}", new.defense)),
        ("[eligibility]", format!("{:?}", old.eligibility), format!("{:?}", new.eligibility)),
        ("[[global_limit]]", format!("{:?}", old.global_limits), format!("{:?}", new.global_limits)),
        (
            "[waiting_room], [[pow_level]], bucket_tries",
            format!("{:?} {:?} {}", old.waiting_room, old.pow_levels, old.bucket_tries),
            format!("{:?} {:?} {}", new.waiting_room, new.pow_levels, new.bucket_tries),
        ),
    ];
    pairs.into_iter().filter(|(_, a, b)| a != b).collect()
}

/// Prints what `new_file` would change for campaign `id`.
pub async fn run(conns: &Connections<'_>, id: &str, new_file: &std::path::Path) -> anyhow::Result<()> {
    let current = conns.conf().campaigns_dir.join(format!("{id}.toml"));
    let old = Campaign::load(&current)?;
    let new = Campaign::load(new_file)?;
    if new.id != id {
        anyhow::bail!("{} is campaign {:?}, not {id:?}", new_file.display(), new.id);
    }
    let pool = conns.migrated_postgres(COMMAND_POOL).await?;
    let state: Option<String> = sqlx::query_scalar("SELECT state FROM campaigns WHERE id = $1")
        .bind(id)
        .fetch_optional(&pool)
        .await?;
    let published = state.as_deref().is_some_and(|s| s != "DRAFT");
    println!(
        "campaign {id} ({}): {} (digest {}) → {} (digest {})",
        state.as_deref().unwrap_or("not published"),
        current.display(),
        old.digest,
        new_file.display(),
        new.digest
    );
    let found = changes(&old, &new);
    if found.is_empty() {
        println!("  no field changes");
    }
    for (field, from, to) in &found {
        let short = |s: &str| {
            if s.len() > 60 {
                format!("{}…", &s[..s.floor_char_boundary(60)])
            } else {
                s.to_string()
            }
        };
        println!("  {field}: {} → {}: {}", short(from), short(to), effect(field, published).said(field));
    }
    if !conns.conf().fleet.gateways.is_empty() {
        let seen = Gateways::new(&conns.conf().fleet)?.serving().await;
        println!("  loaded now (the file in force has digest {}):", old.digest);
        print!("{}", fleet::table(&seen, id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn campaign(extra: &str) -> Campaign {
        let text = format!(
            "id = \"c\"\nsku = \"S\"\nstock = 10\nper_user_limit = 1\nprice_cents = 5\n\
             starts_at = 2026-01-01T00:00:00Z\nends_at = 2026-02-01T00:00:00Z\n{extra}"
        );
        Campaign::parse(
            Path::new("c.toml"),
            &text.replace("stock = 10\n", if extra.contains("stock") { "" } else { "stock = 10\n" }),
        )
        .unwrap()
    }

    #[test]
    fn each_field_is_said_with_its_effect() {
        let old = campaign("");
        let new = campaign("stock = 20\n[limits]\nuser_per_sec = 9\n[switches]\nclosed = true\n");
        let found: Vec<&str> = changes(&old, &new).iter().map(|c| c.0).collect();
        assert_eq!(found, vec!["stock", "switches.closed", "[limits]"]);
        assert_eq!(effect("stock", true), Effect::Refused);
        assert_eq!(effect("stock", false), Effect::Publish);
        assert_eq!(effect("ends_at", true), Effect::GatewaysOnly);
        assert_eq!(effect("switches.closed", true), Effect::Reload);
        assert_eq!(effect("switches.pause_replenish", true), Effect::Publish);
        assert!(effect("stock", true).said("stock").contains("add-stock"));
        assert!(effect("ends_at", true).said("ends_at").contains("campaign extend"));
        assert!(changes(&old, &campaign("")).is_empty());
    }
}
