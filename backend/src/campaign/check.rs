//! `order-writer campaign check ID [--live]`: the campaign file against what was published and,
//! with `--live`, against every gateway of `[fleet]`: the facts that must agree across files and
//! processes, each said with both values (keys compared by fingerprint, never printed). Changes
//! nothing; fails when anything disagrees.

use protocol::campaign::Campaign;
use protocol::control::{Disagreement, Fleet};

use super::fleet::{Gateways, Seen};
use super::publish::fleet_of;
use crate::app::Connections;

/// What one gateway's answer disagrees with: this writer's contract `mine` and file `c`.
pub fn gateway_disagreements(seen: &Seen, c: &Campaign, mine: &Fleet) -> Vec<String> {
    let serving = match &seen.answer {
        Err(e) => return vec![format!("{}: {e}", seen.gateway)],
        Ok(s) => s,
    };
    let mut out = Vec::new();
    let g = &seen.gateway;
    if serving.signing.as_deref() != Some(mine.signing.as_str()) {
        out.push(format!(
            "{g}: its signing key differs from this writer's gateway_key (fingerprints {} there, {} here)",
            serving.signing.as_deref().unwrap_or("-"),
            mine.signing
        ));
    }
    if serving.topic.as_deref() != Some(mine.topic.as_str()) || serving.partitions != Some(mine.partitions) {
        out.push(format!(
            "{g}: it produces to {:?} with {} partitions, this writer reads {:?} with {}",
            serving.topic.as_deref().unwrap_or("-"),
            serving.partitions.map_or("-".into(), |p| p.to_string()),
            mine.topic,
            mine.partitions
        ));
    }
    match seen.campaign(&c.id) {
        None => out.push(format!("{g}: does not serve campaign {}", c.id)),
        Some(s) if s.digest != c.digest => {
            out.push(format!("{g}: serves file digest {}, this writer's file is {}", s.digest, c.digest))
        }
        Some(s) if !s.selling => out.push(format!("{g}: does not sell it: {}", s.disagreements.join("; "))),
        Some(_) => {}
    }
    out
}

/// Runs the check and prints each finding; an error when one disagrees.
pub async fn run(conns: &Connections<'_>, id: &str, live: bool) -> anyhow::Result<()> {
    let file = conns.conf().campaigns_dir.join(format!("{id}.toml"));
    let c = Campaign::load(&file)?;
    let mine = fleet_of(conns.conf());
    println!(
        "campaign {id}: {} parses (digest {}); writer key fingerprint {}, topic {:?} with {} partitions",
        file.display(),
        c.digest,
        mine.signing,
        mine.topic,
        mine.partitions
    );
    let mut found: Vec<String> = Vec::new();
    let redis = conns.redis().await?;
    let control = super::operate::read_control(&redis, id).await?;
    if control.facts.is_none() {
        println!("  not published through `campaign publish` yet: nothing to compare in Redis");
    }
    found.extend(
        control
            .disagreements(&c, &mine)
            .into_iter()
            .map(|d: Disagreement| format!("published: {}", d.message)),
    );
    if live {
        let seen = Gateways::new(&conns.conf().fleet)?.serving().await;
        print!("{}", super::fleet::table(&seen, id));
        for s in &seen {
            found.extend(gateway_disagreements(s, &c, &mine));
        }
    }
    if found.is_empty() {
        println!(
            "  every fact agrees{}",
            if live { " on every gateway" } else { " (add --live to ask the gateways)" }
        );
        return Ok(());
    }
    for f in &found {
        println!("  DIFFERS {f}");
    }
    anyhow::bail!("campaign {id}: {} disagreement(s)", found.len())
}
