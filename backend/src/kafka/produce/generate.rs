//! `order-writer produce --generate N --campaign ID [--users M]`: test reservations made in
//! Redis through `lua/reserve.lua`, as a gateway would make them, for exercising the order
//! writer without a gateway. A test-data tool apart from the hot modules: the writer, the
//! sweeper and the closer never use it; only the `produce` subcommand does.

use anyhow::Context;
use fred::prelude::Client as RedisClient;
use protocol::keys::Bucket;
use protocol::scripts::{home_or_fall_over, ReserveCall, ReserveOutcome, Scripts};

use super::Outgoing;
use crate::app::Connections;

/// Most units `--generate` reserves in one run.
pub const GENERATE_MAX: u64 = 1_000_000;

/// What to generate, checked: `n` units of `campaign` over `users` new users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Units to reserve, one per call (1 to [`GENERATE_MAX`]).
    pub n: u64,
    /// The published campaign to reserve from.
    pub campaign: String,
    /// New users the units are spread over, round robin (1 to `n`).
    pub users: u64,
}

impl Plan {
    /// Checks `--generate N --campaign ID [--users M]` (`users` absent: `n`, one unit each).
    pub fn new(n: u64, campaign: String, users: Option<u64>) -> anyhow::Result<Self> {
        let users = users.unwrap_or(n);
        if !(1..=GENERATE_MAX).contains(&n) || !(1..=n).contains(&users) {
            anyhow::bail!("--generate must be 1 to {GENERATE_MAX} and --users 1 to --generate");
        }
        if !protocol::keys::valid_campaign_id(&campaign) {
            anyhow::bail!("--campaign {campaign:?} is not a campaign id (1 to 64 of A-Z a-z 0-9 _ -)");
        }
        Ok(Self { n, campaign, users })
    }
}

/// Reserves what `plan` says in the configured Redis (the campaign's bucket count read from
/// PostgreSQL) and says how many were reserved. Fails when none was.
pub async fn run(conns: &Connections<'_>, plan: &Plan) -> anyhow::Result<Generated> {
    let redis = conns.redis().await?;
    let scripts = conns.scripts()?;
    let pool = conns.postgres(1).await?;
    let buckets = crate::campaign::buckets::count(&pool, &plan.campaign).await?.unwrap_or(1);
    let g = generate(&redis, &scripts.shared, &plan.campaign, buckets, plan.n, plan.users).await?;
    if g.records.is_empty() {
        anyhow::bail!("nothing reserved: {}", g.stopped.unwrap_or_default());
    }
    println!(
        "reserved {} of {} units of campaign {} (over {} users)",
        g.records.len(),
        plan.n,
        plan.campaign,
        plan.users
    );
    Ok(g)
}

/// The user of the `i`-th generated reservation: `M` users named after the run's `tag`, taken
/// round robin.
pub fn generated_user(tag: &str, i: u64, users: u64) -> String {
    format!("gen-{tag}-{}", i % users.max(1))
}

/// Why `reserve.lua` stopped a generation, in words, or `None` for a reservation.
pub fn why_stopped(campaign: &str, user: &str, outcome: &ReserveOutcome) -> Option<String> {
    Some(match outcome {
        ReserveOutcome::Reserved { .. } => return None,
        ReserveOutcome::SoldOut { remaining } | ReserveOutcome::BucketShort { remaining } => {
            format!("campaign {campaign} is sold out ({remaining} units left in Redis)")
        }
        ReserveOutcome::LimitReached { held } => format!(
            "user {user} already holds {held}, the per-user limit of campaign {campaign}: give more --users"
        ),
        ReserveOutcome::NotReady => format!(
            "campaign {campaign} is not published in Redis (order-writer campaign publish {campaign})"
        ),
        ReserveOutcome::BadQuantity { limit } => {
            format!("campaign {campaign} refuses a quantity of 1 (per-user limit {limit})")
        }
        ReserveOutcome::Duplicate => "request id used twice".to_string(),
        ReserveOutcome::OtherBuckets { published } => format!(
            "campaign {campaign} was published with {published} bucket(s), not the campaign file's: \
             set buckets = {published}"
        ),
        ReserveOutcome::Replay | ReserveOutcome::Retry { .. } | ReserveOutcome::Again(_) => {
            "a nonce answer without a nonce".to_string()
        }
        ReserveOutcome::Limited { .. } => "a global limit answer without rules".to_string(),
    })
}

/// The address a generated reservation says it came from: 192.0.2.1, of TEST-NET-1 (RFC 5737,
/// kept for documentation), so that no audit mistakes it for a client's.
pub const GENERATED_CLIENT_IP: &str = "192.0.2.1";

/// The origin a generated reservation carries, as the gateway's do (`protocol::record::Origin`):
/// [`GENERATED_CLIENT_IP`] and a device of the user's own, `generated-<user>`; no account age.
pub fn generated_origin(user: &str) -> protocol::record::Origin {
    protocol::record::Origin {
        client_ip: Some(GENERATED_CLIENT_IP.into()),
        device: Some(format!("generated-{user}")),
        registered_at: None,
    }
}

/// Reserves one unit for `user` in their home bucket, as the gateway does
/// ([`home_or_fall_over`]): when that bucket is short, stock moves to it from each other bucket in
/// turn (at least half of what the other holds) and the reservation is asked again; sold out
/// once every bucket was tried.
pub async fn reserve_home(
    redis: &RedisClient,
    scripts: &Scripts,
    campaign: &str,
    buckets: u32,
    request_id: &str,
    user: &str,
) -> Result<ReserveOutcome, protocol::scripts::ScriptError> {
    let home = &Bucket::of_user(campaign, user, buckets);
    let origin = &generated_origin(user);
    let reserve = |fall_over: bool| async move {
        let call = ReserveCall::new(request_id, user, 1).with_fall_over(fall_over).with_origin(origin);
        scripts.reserve(redis, home, &call).await
    };
    let transfer = |other: Bucket, id: String, want: i64| async move {
        scripts.transfer(redis, &other, home, &id, want, true).await.map(Some)
    };
    let every_other = buckets.saturating_sub(1);
    Ok(home_or_fall_over(home, every_other, 1, request_id, reserve, transfer).await?.outcome)
}

/// What `--generate` reserved, and why it stopped early, if it did.
#[derive(Debug, Default)]
pub struct Generated {
    /// The reservations made, in order.
    pub records: Vec<Outgoing>,
    /// Why the script refused the next one.
    pub stopped: Option<String>,
}

/// Reserves `n` units of `campaign` (with `buckets` hot-stock buckets) through `reserve.lua`,
/// one per call, over `users` users, each in the user's home bucket ([`reserve_home`]).
pub async fn generate(
    redis: &RedisClient,
    scripts: &Scripts,
    campaign: &str,
    buckets: u32,
    n: u64,
    users: u64,
) -> anyhow::Result<Generated> {
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let mut out = Generated::default();
    for i in 0..n {
        let user = generated_user(tag, i, users);
        let rid = uuid::Uuid::now_v7().to_string();
        let outcome = reserve_home(redis, scripts, campaign, buckets, &rid, &user)
            .await
            .with_context(|| format!("reserve.lua for {user}"))?;
        if let Some(why) = why_stopped(campaign, &user, &outcome) {
            out.stopped = Some(why);
            break;
        }
        if let ReserveOutcome::Reserved { record, .. } = outcome {
            out.records.push(Outgoing { user, value: record.into_bytes() });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = r#"{"request_id":"r1","campaign":"c","user":"u1","sku":"s","qty":1,"price_cents":1,"price_version":1,"stock_version":1,"reserved_at_ms":1}"#;

    #[test]
    fn generated_users_go_round_robin() {
        let users: Vec<String> = (0..5).map(|i| generated_user("t", i, 2)).collect();
        assert_eq!(users, ["gen-t-0", "gen-t-1", "gen-t-0", "gen-t-1", "gen-t-0"]);
        assert_eq!(generated_user("t", 7, 0), "gen-t-0");
    }

    #[test]
    fn a_stop_says_why_and_a_reservation_is_none() {
        let reserved = ReserveOutcome::Reserved { remaining: 1, record: A.into() };
        assert_eq!(why_stopped("c", "u", &reserved), None);
        let why = |o| why_stopped("c", "u", &o).unwrap();
        assert!(why(ReserveOutcome::SoldOut { remaining: 0 }).contains("sold out"));
        assert!(why(ReserveOutcome::LimitReached { held: 1 }).contains("--users"));
        assert!(why(ReserveOutcome::NotReady).contains("campaign publish c"));
    }

    #[test]
    fn a_plan_is_checked_before_anything_is_reserved() {
        let plan = Plan::new(10, "demo".into(), None).unwrap();
        assert_eq!(plan, Plan { n: 10, campaign: "demo".into(), users: 10 }, "one unit per user by default");
        assert_eq!(Plan::new(10, "demo".into(), Some(3)).unwrap().users, 3);
        for (n, users) in [(0, None), (GENERATE_MAX + 1, None), (5, Some(0)), (5, Some(6))] {
            let e = Plan::new(n, "demo".into(), users).unwrap_err().to_string();
            assert!(e.starts_with("--generate must be 1 to 1000000"), "{n} {users:?}: {e}");
        }
        let e = Plan::new(1, "no spaces".into(), None).unwrap_err().to_string();
        assert!(e.contains("is not a campaign id"), "{e}");
    }

    #[test]
    fn no_module_but_the_subcommand_uses_the_generator() {
        // The hot modules (writer, sweeper, closer, serve, ...) must never depend on test data.
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        walk(&src, &mut files);
        let allowed = [src.join("main.rs"), src.join("lib.rs"), src.join("kafka/produce.rs")];
        let mut checked = 0;
        for f in files.iter().filter(|f| !allowed.contains(f) && !f.starts_with(src.join("kafka/produce"))) {
            let text = std::fs::read_to_string(f).unwrap();
            assert!(
                !text.contains("produce::generate") && !text.contains("generate::"),
                "{} uses the test-data generator",
                f.display()
            );
            checked += 1;
        }
        assert!(checked > 20, "only {checked} files checked");
    }
}
