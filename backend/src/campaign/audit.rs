//! `order-writer campaign audit <id>`: who won a sale, grouped the ways a crowd of bots or a
//! buyer with many accounts shows (seed: 审计异常成功率、相同地址和设备聚集).
//!
//! The winners are the campaign's orders (every status: a closed order was won too), each with
//! the origin its reservation record carried (`sql/0008_order_origin.sql`: client address,
//! device id, account creation time). They are grouped by IPv4 address (/32) and network (/24),
//! IPv6 network (/64), device and account age band. The crowd's attempts come from the
//! gateways' JSON access logs (`--access-log FILE`, repeated; each line of a campaign's order
//! request with its client, its `device` and its answer code): attempts are counted where they
//! are already written, not on the reservation path. An attempt is a decided answer: `TRY_LATER`
//! and `SERVICE_DEGRADED` (and lines without a code) are the page's automatic resends, not the
//! buyer's choice, and are not counted. A group's success rate is its winners over its attempts;
//! the crowd's is every winner over every attempt. Account age bands have no attempts (the
//! access log does not know the account): their winners' share is what is judged.
//!
//! Decide ([`audit`], pure) → SQL and logs ([`source`]) → effects (the table or the JSON,
//! [`run`]). The thresholds have their defaults in one place ([`Thresholds::default`]), may be
//! set in the conf's `[audit]` table and then by the command's flags.

pub mod source;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Where a group is beyond what an ordinary crowd does. Every field has its default in
/// [`Thresholds::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// Winners (distinct accounts) from one IPv4 address, at most.
    pub max_per_ip32: u64,
    /// Winners from one IPv4 /24, at most.
    pub max_per_ip24: u64,
    /// Winners from one IPv6 /64, at most.
    pub max_per_ip64: u64,
    /// Accounts that won from one device, at most.
    pub max_accounts_per_device: u64,
    /// Decided order attempts from one device, at most.
    pub max_attempts_per_device: u64,
    /// Decided order attempts from one IPv4 address or IPv6 /64, at most.
    pub max_attempts_per_ip: u64,
    /// Attempts answered as only a forged request is (`BAD_SIGNATURE`, `STALE_TIMESTAMP`,
    /// `BAD_TOKEN`, `BAD_PATH`) from one group, at most.
    pub max_forged: u64,
    /// A group's success rate above this many times the crowd's is abnormal...
    pub rate_factor: f64,
    /// ...when the group made at least this many attempts.
    pub min_attempts_for_rate: u64,
    /// Accounts created less than this many days before they won are young.
    pub young_days: u64,
    /// The young bands' share of the winners, at most (0 to 1).
    pub max_young_share: f64,
    /// Networks (CIDR) never flagged by address: a known proxy, NAT or load generator.
    pub exempt: Vec<String>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            max_per_ip32: 2,
            max_per_ip24: 10,
            max_per_ip64: 10,
            max_accounts_per_device: 1,
            max_attempts_per_device: 10,
            max_attempts_per_ip: 50,
            max_forged: 0,
            rate_factor: 3.0,
            min_attempts_for_rate: 20,
            young_days: 7,
            max_young_share: 0.2,
            exempt: Vec::new(),
        }
    }
}

/// The answer codes only a forged request gets (not `REPLAY`: a replayer sends its victim's
/// device, so the victim's group would be flagged; replays are counted, not flagged).
pub const FORGED_CODES: [&str; 4] = ["BAD_SIGNATURE", "STALE_TIMESTAMP", "BAD_TOKEN", "BAD_PATH"];

/// Answers that are not a decision (the buyer's page resends them): not attempts.
const UNDECIDED_CODES: [&str; 2] = ["TRY_LATER", "SERVICE_DEGRADED"];

/// One winning order, as the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Winner {
    /// The buyer.
    pub user: String,
    /// Units.
    pub qty: i64,
    /// The client's address, when the record carried it.
    pub client_ip: Option<IpAddr>,
    /// The device id, when carried.
    pub device: Option<String>,
    /// The account's age when the order was reserved, seconds, when carried.
    pub account_age_secs: Option<i64>,
}

/// One order request of the crowd, as an access log line has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The client after trusted proxies.
    pub client: Option<IpAddr>,
    /// The `x-device-id` header sent.
    pub device: Option<String>,
    /// The answer code (`None`: proxied or unanswered).
    pub code: Option<String>,
}

/// What a group is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One IPv4 address.
    Ip32,
    /// One IPv4 /24.
    Ip24,
    /// One IPv6 /64.
    Ip64,
    /// One device id.
    Device,
    /// An account age band.
    AccountAge,
}

impl Kind {
    /// Its name in the JSON and the table.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ip32 => "ip/32",
            Kind::Ip24 => "ip/24",
            Kind::Ip64 => "ip/64",
            Kind::Device => "device",
            Kind::AccountAge => "account_age",
        }
    }
}

/// One group and what the audit found of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// What it is keyed by.
    pub kind: Kind,
    /// The address, network, device id or band.
    pub key: String,
    /// Distinct winning accounts.
    pub winners: u64,
    /// Units they won.
    pub units: i64,
    /// Decided order attempts (none without access logs, or for account age bands).
    pub attempts: Option<u64>,
    /// Attempts answered as only a forged request is ([`FORGED_CODES`]).
    pub forged: u64,
    /// Attempts answered `REPLAY` (counted, not flagged).
    pub replays: u64,
    /// Winners over attempts.
    pub success_rate: Option<f64>,
    /// Inside an exempt network: never flagged by address.
    pub exempt: bool,
    /// Why it is flagged for review; empty: not flagged.
    pub flags: Vec<String>,
}

/// The whole crowd.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Crowd {
    /// Distinct winning accounts.
    pub winners: u64,
    /// Units won.
    pub units: i64,
    /// Decided order attempts in the logs read (none: no log).
    pub attempts: Option<u64>,
    /// Winners over attempts.
    pub success_rate: Option<f64>,
    /// Winning orders without any origin (records written before it was carried).
    pub without_origin: u64,
}

/// The audit of a campaign: the crowd, every group, the thresholds applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Audit {
    /// Campaign id.
    pub campaign: String,
    /// The whole crowd.
    pub crowd: Crowd,
    /// Every group, flagged ones first, then by kind and winners.
    pub groups: Vec<Group>,
    /// The thresholds applied.
    pub thresholds: Thresholds,
}

impl Audit {
    /// The flagged groups.
    pub fn flagged(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| !g.flags.is_empty())
    }
}

/// The keys `ip` falls in: its /32 and /24 (IPv4) or its /64 (IPv6; an IPv4-mapped address is
/// taken as IPv4).
pub fn ip_keys(ip: IpAddr) -> Vec<(Kind, String)> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            vec![(Kind::Ip32, v4.to_string()), (Kind::Ip24, format!("{a}.{b}.{c}.0/24"))]
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => ip_keys(IpAddr::V4(v4)),
            None => {
                let s = v6.segments();
                let net = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                vec![(Kind::Ip64, format!("{net}/64"))]
            }
        },
    }
}

/// The band of an account `age` (seconds when it reserved; `None`: unknown).
pub fn age_band(age: Option<i64>) -> &'static str {
    const DAY: i64 = 86_400;
    match age {
        None => "unknown",
        Some(a) if a < DAY => "<1d",
        Some(a) if a < 7 * DAY => "1-7d",
        Some(a) if a < 30 * DAY => "7-30d",
        Some(a) if a < 365 * DAY => "30-365d",
        Some(_) => ">=1y",
    }
}

/// Whether band `band` is younger than `young_days`.
fn band_is_young(band: &str, young_days: u64) -> bool {
    let upper_days = match band {
        "<1d" => 1,
        "1-7d" => 7,
        "7-30d" => 30,
        "30-365d" => 365,
        _ => return false,
    };
    upper_days <= young_days.max(1)
}

/// Whether `ip` is inside one of `nets` (`a.b.c.d/n` or `x::/n`; a bare address is /32 or /128).
pub fn exempt(ip: IpAddr, nets: &[String]) -> bool {
    nets.iter().any(|n| match n.parse::<ipnet::IpNet>() {
        Ok(net) => net.contains(&ip),
        Err(_) => n.parse::<IpAddr>().is_ok_and(|a| a == ip),
    })
}

/// A group being counted.
#[derive(Default)]
struct Tally {
    users: BTreeSet<String>,
    units: i64,
    attempts: u64,
    forged: u64,
    replays: u64,
    exempt: bool,
}

/// The keys of one origin: its address keys, its device, its band (winners only).
fn keys_of(ip: Option<IpAddr>, device: Option<&str>) -> Vec<(Kind, String)> {
    let mut keys = ip.map(ip_keys).unwrap_or_default();
    if let Some(d) = device {
        keys.push((Kind::Device, d.to_string()));
    }
    keys
}

/// Counts winners and attempts into their groups.
fn tally(winners: &[Winner], attempts: &[Attempt], t: &Thresholds) -> BTreeMap<(Kind, String), Tally> {
    let mut groups: BTreeMap<(Kind, String), Tally> = BTreeMap::new();
    for w in winners {
        let mut keys = keys_of(w.client_ip, w.device.as_deref());
        keys.push((Kind::AccountAge, age_band(w.account_age_secs).to_string()));
        for key in keys {
            let g = groups.entry(key).or_default();
            g.users.insert(w.user.clone());
            g.units += w.qty;
            g.exempt |= w.client_ip.is_some_and(|ip| exempt(ip, &t.exempt));
        }
    }
    for a in attempts.iter().filter(|a| decided(a.code.as_deref())) {
        let code = a.code.as_deref().unwrap_or("");
        for key in keys_of(a.client, a.device.as_deref()) {
            let g = groups.entry(key).or_default();
            g.attempts += 1;
            g.forged += u64::from(FORGED_CODES.contains(&code));
            g.replays += u64::from(code == "REPLAY");
            g.exempt |= a.client.is_some_and(|ip| exempt(ip, &t.exempt));
        }
    }
    groups
}

/// Whether an answer `code` is a decision (an attempt), not a resend the page makes itself.
fn decided(code: Option<&str>) -> bool {
    code.is_some_and(|c| !UNDECIDED_CODES.contains(&c))
}

/// Why group `g` is flagged, against the crowd's success rate `crowd_rate` and the young
/// bands' share of winners `young_share`.
fn flags(g: &Group, t: &Thresholds, crowd_rate: Option<f64>, young_share: f64) -> Vec<String> {
    let mut out = Vec::new();
    let over = |out: &mut Vec<String>, n: u64, max: u64, what: &str| {
        if n > max {
            out.push(format!("{n} {what} (max {max})"));
        }
    };
    let attempts = g.attempts.unwrap_or(0);
    match g.kind {
        Kind::Ip32 | Kind::Ip24 | Kind::Ip64 if g.exempt => return out,
        Kind::Ip32 => over(&mut out, g.winners, t.max_per_ip32, "winners from one address"),
        Kind::Ip24 => over(&mut out, g.winners, t.max_per_ip24, "winners from one /24"),
        Kind::Ip64 => over(&mut out, g.winners, t.max_per_ip64, "winners from one /64"),
        Kind::Device => {
            over(&mut out, g.winners, t.max_accounts_per_device, "winning accounts on one device");
            over(&mut out, attempts, t.max_attempts_per_device, "attempts from one device");
        }
        Kind::AccountAge => {
            if band_is_young(&g.key, t.young_days) && young_share > t.max_young_share {
                out.push(format!(
                    "young accounts hold {:.0}% of the winners (max {:.0}%)",
                    young_share * 100.0,
                    t.max_young_share * 100.0
                ));
            }
        }
    }
    if matches!(g.kind, Kind::Ip32 | Kind::Ip64) {
        over(&mut out, attempts, t.max_attempts_per_ip, "attempts from one address");
    }
    over(&mut out, g.forged, t.max_forged, "forged requests (bad signature, stale, token of another device)");
    if let (Some(rate), Some(crowd)) = (g.success_rate, crowd_rate) {
        if attempts >= t.min_attempts_for_rate && rate > crowd * t.rate_factor {
            out.push(format!("success rate {:.1}% against the crowd's {:.1}%", rate * 100.0, crowd * 100.0));
        }
    }
    out
}

/// The audit of `campaign`: its `winners` and the crowd's `attempts` (`None`: no access log was
/// read) grouped and judged against `t`. Pure.
pub fn audit(campaign: &str, winners: &[Winner], attempts: Option<&[Attempt]>, t: &Thresholds) -> Audit {
    let tallies = tally(winners, attempts.unwrap_or(&[]), t);
    let users: BTreeSet<&str> = winners.iter().map(|w| w.user.as_str()).collect();
    let crowd_attempts = attempts.map(|a| a.iter().filter(|a| decided(a.code.as_deref())).count() as u64);
    let crowd = Crowd {
        winners: users.len() as u64,
        units: winners.iter().map(|w| w.qty).sum(),
        attempts: crowd_attempts,
        success_rate: crowd_attempts.filter(|&n| n > 0).map(|n| users.len() as f64 / n as f64),
        without_origin: winners
            .iter()
            .filter(|w| w.client_ip.is_none() && w.device.is_none() && w.account_age_secs.is_none())
            .count() as u64,
    };
    let young: u64 = tallies
        .iter()
        .filter(|((k, key), _)| *k == Kind::AccountAge && band_is_young(key, t.young_days))
        .map(|(_, g)| g.users.len() as u64)
        .sum();
    let young_share = if crowd.winners == 0 { 0.0 } else { young as f64 / crowd.winners as f64 };
    let mut groups: Vec<Group> = tallies
        .into_iter()
        .map(|((kind, key), g)| {
            let counted = attempts.is_some() && kind != Kind::AccountAge;
            let winners = g.users.len() as u64;
            let mut group = Group {
                kind,
                key,
                winners,
                units: g.units,
                attempts: counted.then_some(g.attempts),
                forged: g.forged,
                replays: g.replays,
                success_rate: (counted && g.attempts > 0).then(|| winners as f64 / g.attempts as f64),
                exempt: g.exempt,
                flags: Vec::new(),
            };
            group.flags = flags(&group, t, crowd.success_rate, young_share);
            group
        })
        .collect();
    groups.sort_by(|a, b| {
        (a.flags.is_empty(), a.kind, std::cmp::Reverse(a.winners), &a.key).cmp(&(
            b.flags.is_empty(),
            b.kind,
            std::cmp::Reverse(b.winners),
            &b.key,
        ))
    });
    Audit { campaign: campaign.to_string(), crowd, groups, thresholds: t.clone() }
}

/// The human table of `a`: the crowd, then the flagged groups with their reasons, then how many
/// groups of each kind were not flagged.
pub fn table(a: &Audit) -> String {
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.2}%", r * 100.0));
    let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let mut s = format!(
        "audit of {}: {} winners, {} units, {} attempts, success rate {}; {} orders without origin\n",
        a.campaign,
        a.crowd.winners,
        a.crowd.units,
        n(a.crowd.attempts),
        pct(a.crowd.success_rate),
        a.crowd.without_origin
    );
    s.push_str(&format!(
        "{:<12} {:<40} {:>7} {:>6} {:>8} {:>6} {:>8}  flags\n",
        "group", "key", "winners", "units", "attempts", "forged", "rate"
    ));
    for g in a.flagged() {
        s.push_str(&format!(
            "{:<12} {:<40} {:>7} {:>6} {:>8} {:>6} {:>8}  {}\n",
            g.kind.name(),
            g.key,
            g.winners,
            g.units,
            n(g.attempts),
            g.forged,
            pct(g.success_rate),
            g.flags.join("; ")
        ));
    }
    let mut quiet: BTreeMap<&str, u64> = BTreeMap::new();
    for g in a.groups.iter().filter(|g| g.flags.is_empty()) {
        *quiet.entry(g.kind.name()).or_default() += 1;
    }
    let flagged = a.flagged().count();
    let quiet: Vec<String> = quiet.iter().map(|(k, v)| format!("{k} {v}")).collect();
    s.push_str(&format!("{flagged} groups flagged; not flagged: {}\n", quiet.join(", ")));
    s
}

/// The command's flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Args {
    /// The report as JSON (the groups, the crowd, the thresholds) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// What is read and the thresholds.
    #[command(flatten)]
    pub inputs: Inputs,
}

/// What the audit reads besides the database, and each threshold over the conf's `[audit]` and
/// the defaults (shared with `campaign report`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Inputs {
    /// A gateway's JSON access log (repeat for each gateway): the crowd's attempts.
    #[arg(long = "access-log", value_name = "FILE")]
    pub access_logs: Vec<std::path::PathBuf>,
    /// Winners from one IPv4 address, at most.
    #[arg(long, value_name = "N")]
    pub max_per_ip32: Option<u64>,
    /// Winners from one IPv4 /24, at most.
    #[arg(long, value_name = "N")]
    pub max_per_ip24: Option<u64>,
    /// Winners from one IPv6 /64, at most.
    #[arg(long, value_name = "N")]
    pub max_per_ip64: Option<u64>,
    /// Winning accounts on one device, at most.
    #[arg(long, value_name = "N")]
    pub max_accounts_per_device: Option<u64>,
    /// Attempts from one device, at most.
    #[arg(long, value_name = "N")]
    pub max_attempts_per_device: Option<u64>,
    /// Attempts from one address, at most.
    #[arg(long, value_name = "N")]
    pub max_attempts_per_ip: Option<u64>,
    /// A network (CIDR) never flagged by address (repeat; replaces the conf's list).
    #[arg(long = "exempt", value_name = "CIDR")]
    pub exempt: Vec<String>,
}

impl Inputs {
    /// `base` (the conf's thresholds) with these flags over it; refuses an exempt network that
    /// does not parse.
    pub fn thresholds(&self, base: Thresholds) -> anyhow::Result<Thresholds> {
        let mut t = base;
        let pick = |flag: Option<u64>, v: &mut u64| *v = flag.unwrap_or(*v);
        pick(self.max_per_ip32, &mut t.max_per_ip32);
        pick(self.max_per_ip24, &mut t.max_per_ip24);
        pick(self.max_per_ip64, &mut t.max_per_ip64);
        pick(self.max_accounts_per_device, &mut t.max_accounts_per_device);
        pick(self.max_attempts_per_device, &mut t.max_attempts_per_device);
        pick(self.max_attempts_per_ip, &mut t.max_attempts_per_ip);
        if !self.exempt.is_empty() {
            t.exempt = self.exempt.clone();
        }
        check_thresholds(&t)?;
        Ok(t)
    }
}

/// Refuses thresholds the audit cannot apply: a network that does not parse, a share outside 0
/// to 1, a factor that is not positive.
pub fn check_thresholds(t: &Thresholds) -> anyhow::Result<()> {
    for n in &t.exempt {
        if n.parse::<ipnet::IpNet>().is_err() && n.parse::<IpAddr>().is_err() {
            anyhow::bail!("exempt network {n:?} is not a CIDR network (a.b.c.d/n) or an address");
        }
    }
    if !(0.0..=1.0).contains(&t.max_young_share) {
        anyhow::bail!("max_young_share must be between 0 and 1");
    }
    if t.rate_factor.is_nan() || t.rate_factor <= 0.0 {
        anyhow::bail!("rate_factor must be above 0");
    }
    Ok(())
}

/// Runs the command: reads the campaign's winners and the access logs, prints the table or the
/// JSON. An unknown campaign is an error.
pub async fn run(
    conns: &crate::app::Connections<'_>,
    id: &str,
    conf: &std::path::Path,
    args: &Args,
) -> anyhow::Result<()> {
    let thresholds = args.inputs.thresholds(source::conf_thresholds(conf)?)?;
    let pg = conns.postgres(crate::app::COMMAND_POOL).await?;
    let a = source::audit_of(&pg, id, &args.inputs.access_logs, &thresholds).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&a)?);
    } else {
        print!("{}", table(&a));
    }
    Ok(())
}
