//! A campaign file: `conf/campaigns/<id>.toml`, the one file a platform team writes per sale.
//!
//! The gateway reads it for the window, switches and limits; the order writer's
//! `campaign publish` reads it to create the campaign in PostgreSQL (the stock's source of truth)
//! before loading the stock into Redis. See `conf/campaigns/example.toml` for a commented example.

use std::path::Path;

use chrono::{DateTime, FixedOffset};
use serde::Deserialize;
use toml::Spanned;

use crate::conf::{self, Checker, ConfError};
use crate::defense::{Defense, Eligibility, RawDefense, RawEligibility};
use crate::global_limit::{self, GlobalLimit, RawGlobalLimit};
use crate::keys::{valid_campaign_id, MAX_BUCKETS};
use crate::waiting_room::{PowLevel, RawPowLevel, RawWaitingRoom, WaitingRoom};

/// The most units a campaign may sell.
pub const MAX_STOCK: i64 = 1_000_000_000;
/// The highest per-user limit (also the largest quantity a reservation record may carry).
pub const MAX_PER_USER_LIMIT: i64 = 10_000;
/// The highest unit price, in cents. `lua/reserve.lua` writes the record with cjson, which
/// prints a number of more than 14 digits as a float (`1e+14`) no integer field decodes; this
/// bound keeps every price, and a price times the largest quantity, an exact integer.
pub const MAX_PRICE_CENTS: i64 = 10_000_000_000;
/// The longest pay window: a week (PostgreSQL's `make_interval` takes any of these).
pub const MAX_PAY_WINDOW_SECS: i64 = 7 * 24 * 3600;
/// The highest rate and in-flight budget of `[limits]`, per gateway process.
pub const MAX_LIMIT_RATE: u32 = 1_000_000;

/// The kill switches of a campaign. They take effect on reload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switches {
    /// Fail fast: every order request is answered `CAMPAIGN_CLOSED` without touching Redis.
    #[serde(default)]
    pub closed: bool,
    /// Answer `TRY_LATER` (429, `Retry-After`) without reserving.
    #[serde(default)]
    pub queue_only: bool,
    /// Released stock (unpaid orders, compensations) is not given back to the sale.
    #[serde(default)]
    pub pause_replenish: bool,
}

/// Per-key request rates at the edge, in requests per second; 0 turns a dimension off.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Per client IP.
    #[serde(default)]
    pub ip_per_sec: u32,
    /// Per device id.
    #[serde(default)]
    pub device_per_sec: u32,
    /// Per account (the campaign token's user, counted once the token is verified, so nobody
    /// can use up another buyer's allowance).
    #[serde(default)]
    pub user_per_sec: u32,
    /// All order requests of this campaign in one gateway process.
    #[serde(default)]
    pub campaign_per_sec: u32,
    /// Order requests of this campaign in flight at once in one gateway process; past it,
    /// `TRY_LATER`. Keeps a hammered campaign from starving the rest of the shop.
    #[serde(default = "default_max_inflight")]
    pub max_inflight: u32,
    /// Of those, how many one account, and one device, may hold at once (at least 1); past it,
    /// `TRY_LATER`. A place is taken once the order's body is read, so a slow body holds none.
    #[serde(default = "default_max_inflight_per_buyer")]
    pub max_inflight_per_buyer: u32,
    /// Of those, how many one client IP may hold at once; 0 is off (the default: many buyers
    /// may share one address, whose rate `ip_per_sec` bounds).
    #[serde(default)]
    pub max_inflight_per_ip: u32,
    /// Result queries (`GET /seckill/{c}/result/{id}`) per client IP per second; past it,
    /// `RATE_LIMITED` at the gateway, so a polling storm never reaches the order writer. 0 is off.
    #[serde(default = "default_result_per_sec")]
    pub result_per_sec: u32,
    /// How long the campaign's `[[global_limit]]` call to Redis may take (1..=1,000 ms); past
    /// it, each rule does what its `on_error` says.
    #[serde(default = "default_global_timeout_ms")]
    pub global_timeout_ms: u32,
}

fn default_global_timeout_ms() -> u32 {
    50
}

fn default_max_inflight() -> u32 {
    256
}

fn default_max_inflight_per_buyer() -> u32 {
    4
}

fn default_result_per_sec() -> u32 {
    20
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            ip_per_sec: 0,
            device_per_sec: 0,
            user_per_sec: 0,
            campaign_per_sec: 0,
            max_inflight: default_max_inflight(),
            max_inflight_per_buyer: default_max_inflight_per_buyer(),
            max_inflight_per_ip: 0,
            result_per_sec: default_result_per_sec(),
            global_timeout_ms: default_global_timeout_ms(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    id: Spanned<String>,
    sku: Spanned<String>,
    stock: Spanned<i64>,
    per_user_limit: Spanned<i64>,
    price_cents: Spanned<i64>,
    starts_at: Spanned<toml::Value>,
    ends_at: Spanned<toml::Value>,
    #[serde(default = "default_pay_window")]
    pay_window_secs: Spanned<i64>,
    #[serde(default)]
    switches: Switches,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    defense: Option<RawDefense>,
    #[serde(default)]
    eligibility: Option<RawEligibility>,
    #[serde(default)]
    global_limit: Vec<RawGlobalLimit>,
    #[serde(default = "default_buckets")]
    buckets: Spanned<i64>,
    #[serde(default)]
    bucket_tries: Option<Spanned<i64>>,
    #[serde(default)]
    waiting_room: Option<RawWaitingRoom>,
    #[serde(default)]
    pow_level: Vec<RawPowLevel>,
}

fn default_buckets() -> Spanned<i64> {
    Spanned::new(0..0, 1)
}

fn default_pay_window() -> Spanned<i64> {
    Spanned::new(0..0, 900)
}

/// A validated campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Campaign {
    /// Id; equals the file's stem.
    pub id: String,
    /// Item sold.
    pub sku: String,
    /// Units for sale.
    pub stock: i64,
    /// Units one user may hold.
    pub per_user_limit: i64,
    /// Unit price in cents.
    pub price_cents: i64,
    /// Window start (server time decides).
    pub starts_at: DateTime<FixedOffset>,
    /// Window end.
    pub ends_at: DateTime<FixedOffset>,
    /// Seconds an order may stay unpaid before it is closed and its stock released.
    pub pay_window_secs: i64,
    /// Kill switches.
    pub switches: Switches,
    /// Edge limits.
    pub limits: Limits,
    /// Captcha, token and timestamp settings of the edge defenses.
    pub defense: Defense,
    /// Who may buy.
    pub eligibility: Eligibility,
    /// Limits counted in Redis across every gateway process (`[[global_limit]]`), at most one
    /// per dimension; empty: none (no Redis call).
    pub global_limits: Vec<GlobalLimit>,
    /// Hot-stock buckets (1 to [`MAX_BUCKETS`]; 1: off): the stock split over this many key sets,
    /// each on its own Redis Cluster slot ([`crate::keys::Bucket`]). Fixed once published.
    pub buckets: u32,
    /// Other buckets a buyer's order asks for stock, in order, when the buyer's home bucket is
    /// short (1 to `buckets - 1`; default all of them; 0 without buckets). Sold out is declared
    /// at the edge only when every bucket was found empty.
    pub bucket_tries: u32,
    /// The waiting room at the token endpoint (`[waiting_room]`; off by default).
    pub waiting_room: WaitingRoom,
    /// The proof of work's bits by arrival rate (`[[pow_level]]`), sorted by rate; empty: the
    /// campaign's `pow_bits` always.
    pub pow_levels: Vec<PowLevel>,
    /// The file's content hash (SHA-256 of its bytes, the first 16 hex digits): the version a
    /// process says it loaded, compared across the fleet by `order-writer campaign apply`.
    pub digest: String,
}

/// Where a campaign's window stands at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Before `starts_at`.
    NotStarted,
    /// In `[starts_at, ends_at)`.
    Open,
    /// At or after `ends_at`.
    Ended,
}

/// Checks a campaign's `id` (a campaign id, the file's name) and its `sku` (not empty).
fn check_names(c: &Checker<'_>, raw: &Raw, file: &Path) -> Result<(), ConfError> {
    if !valid_campaign_id(raw.id.get_ref()) {
        return Err(c.err(raw.id.span(), "id", "must be 1 to 64 characters of A-Z a-z 0-9 _ -"));
    }
    if let Some(stem) = file.file_stem().and_then(|s| s.to_str()) {
        if stem != raw.id.get_ref() {
            return Err(c.err(raw.id.span(), "id", format!("must equal the file name ({stem:?})")));
        }
    }
    if raw.sku.get_ref().trim().is_empty() {
        return Err(c.err(raw.sku.span(), "sku", "must not be empty"));
    }
    Ok(())
}

/// A time of a campaign file: an RFC 3339 time with an offset, as a TOML datetime or a string.
fn time(c: &Checker<'_>, v: &Spanned<toml::Value>, field: &str) -> Result<DateTime<FixedOffset>, ConfError> {
    let s = match v.get_ref() {
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::String(s) => s.clone(),
        other => {
            return Err(c.err(
                v.span(),
                field,
                format!("expected an RFC 3339 time, found {}", other.type_str()),
            ))
        }
    };
    DateTime::parse_from_rfc3339(&s)
        .map_err(|e| c.err(v.span(), field, format!("{s:?} is not an RFC 3339 time with an offset: {e}")))
}

/// Checks `[limits]`: each rate and in-flight bound within its range, and the global limits'
/// timeout.
fn check_limits(c: &Checker<'_>, l: &Limits) -> Result<(), ConfError> {
    for (v, field, min) in [
        (l.ip_per_sec, "ip_per_sec", 0),
        (l.device_per_sec, "device_per_sec", 0),
        (l.user_per_sec, "user_per_sec", 0),
        (l.campaign_per_sec, "campaign_per_sec", 0),
        (l.max_inflight, "max_inflight", 1),
        (l.max_inflight_per_buyer, "max_inflight_per_buyer", 1),
        (l.max_inflight_per_ip, "max_inflight_per_ip", 0),
        (l.result_per_sec, "result_per_sec", 0),
    ] {
        conf::within(v, min, MAX_LIMIT_RATE)
            .map_err(|m| c.err_at_key(field, &format!("limits.{field}"), m))?;
    }
    conf::within(l.global_timeout_ms, 1, 1000)
        .map_err(|m| c.err_at_key("global_timeout_ms", "limits.global_timeout_ms", m))?;
    Ok(())
}

/// Checks the `[[global_limit]]` rules (one per dimension), `buckets` (each rule's max splits
/// among them) and `bucket_tries` (below `buckets`; all the other buckets when absent).
fn global_limits_and_buckets(c: &Checker<'_>, raw: &Raw) -> Result<(Vec<GlobalLimit>, u32, u32), ConfError> {
    let global_limits = raw.global_limit.iter().map(|g| g.check(c)).collect::<Result<Vec<_>, _>>()?;
    if let Some(i) = global_limit::repeated(&global_limits) {
        return Err(c.err(
            raw.global_limit[i].by_span(),
            "global_limit.by",
            format!("a second rule by {:?}: one rule per dimension", global_limits[i].by.as_str()),
        ));
    }
    let buckets: u32 = c.bounded(&raw.buckets, "buckets", 1, i64::from(MAX_BUCKETS))?;
    if let Some(i) = global_limit::unsplittable(&global_limits, buckets) {
        return Err(c.err(
            raw.global_limit[i].max_span(),
            "global_limit.max",
            format!(
                "a rule by {:?} counts in each of the {buckets} buckets with its share of max: \
                 max must be at least {buckets}",
                global_limits[i].by.as_str()
            ),
        ));
    }
    let bucket_tries = match &raw.bucket_tries {
        None => buckets - 1,
        Some(t) if buckets == 1 => return Err(c.err(t.span(), "bucket_tries", "needs buckets = 2 or more")),
        Some(t) => c.bounded(t, "bucket_tries", 1, i64::from(buckets) - 1)?,
    };
    Ok((global_limits, buckets, bucket_tries))
}

impl Campaign {
    /// Where the window stands at `now`.
    pub fn window(&self, now: DateTime<chrono::Utc>) -> Window {
        if now < self.starts_at {
            Window::NotStarted
        } else if now < self.ends_at {
            Window::Open
        } else {
            Window::Ended
        }
    }

    /// Parses and validates a campaign file's text.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfError> {
        let raw: Raw = conf::parse(file, text)?;
        let c = Checker::new(file, text);
        check_names(&c, &raw, file)?;
        let stock = c.bounded(&raw.stock, "stock", 0, MAX_STOCK)?;
        let per_user_limit = c.bounded(&raw.per_user_limit, "per_user_limit", 1, MAX_PER_USER_LIMIT)?;
        let price_cents = c.bounded(&raw.price_cents, "price_cents", 0, MAX_PRICE_CENTS)?;
        let pay_window_secs = c.bounded(&raw.pay_window_secs, "pay_window_secs", 1, MAX_PAY_WINDOW_SECS)?;
        let starts_at = time(&c, &raw.starts_at, "starts_at")?;
        let ends_at = time(&c, &raw.ends_at, "ends_at")?;
        if ends_at <= starts_at {
            return Err(c.err(raw.ends_at.span(), "ends_at", "must be after starts_at"));
        }
        check_limits(&c, &raw.limits)?;
        let (global_limits, buckets, bucket_tries) = global_limits_and_buckets(&c, &raw)?;
        let defense = raw.defense.as_ref().map_or(Ok(Defense::default()), |d| d.check(&c))?;
        let eligibility = raw.eligibility.as_ref().map_or(Ok(Eligibility::default()), |e| e.check(&c))?;
        let (waiting_room, pow_levels) =
            crate::waiting_room::check(raw.waiting_room.as_ref(), &raw.pow_level)
                .map_err(|(span, field, msg)| c.err(span, field, msg))?;
        Ok(Campaign {
            id: raw.id.into_inner(),
            sku: raw.sku.into_inner(),
            stock,
            per_user_limit,
            price_cents,
            starts_at,
            ends_at,
            pay_window_secs,
            switches: raw.switches,
            limits: raw.limits,
            defense,
            eligibility,
            global_limits,
            buckets,
            bucket_tries,
            waiting_room,
            pow_levels,
            digest: digest(text),
        })
    }

    /// Reads, parses and validates a campaign file.
    pub fn load(file: &Path) -> Result<Self, ConfError> {
        let text = crate::conf::read(file)?;
        Self::parse(file, &text)
    }

    /// Loads every `*.toml` in `dir`, sorted by file name. Any invalid file fails the whole load.
    pub fn load_dir(dir: &Path) -> Result<Vec<Self>, ConfError> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| ConfError::whole(dir, format!("cannot list: {e}")))?;
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        files.iter().map(|f| Self::load(f)).collect()
    }
}

/// The content hash of a campaign file's text ([`Campaign::digest`]).
pub fn digest(text: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    hex::encode(&d.as_ref()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
id = "phone"
sku = "SKU-1"
stock = 100
per_user_limit = 1
price_cents = 99900
starts_at = 2026-12-01T10:00:00+08:00
ends_at = "2026-12-01T11:00:00+08:00"

[switches]
queue_only = true

[limits]
ip_per_sec = 20
"#;

    fn parse(text: &str) -> Result<Campaign, ConfError> {
        Campaign::parse(Path::new("conf/campaigns/phone.toml"), text)
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.stock, 100);
        assert_eq!(c.pay_window_secs, 900);
        assert!(c.switches.queue_only && !c.switches.closed);
        assert_eq!(c.limits.ip_per_sec, 20);
        assert_eq!(c.limits.max_inflight, 256);
        let during = DateTime::parse_from_rfc3339("2026-12-01T02:30:00Z").unwrap().to_utc();
        assert_eq!(c.window(during), Window::Open);
        assert_eq!(c.window(c.ends_at.to_utc()), Window::Ended);
        assert_eq!(c.window(c.starts_at.to_utc() - chrono::Duration::seconds(1)), Window::NotStarted);
    }

    #[test]
    fn every_number_has_an_upper_bound() {
        // Each past its bound: refused at its line, naming the bound.
        let line_of = |text: &str, key: &str| text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
        for (from, to, field) in [
            ("stock = 100", "stock = 1000000001", "stock"),
            ("per_user_limit = 1", "per_user_limit = 10001", "per_user_limit"),
            ("price_cents = 99900", "price_cents = 100000000000000", "price_cents"),
            (
                "price_cents = 99900",
                "price_cents = 99900\npay_window_secs = 10000000000000",
                "pay_window_secs",
            ),
            ("ip_per_sec = 20", "ip_per_sec = 1000001", "limits.ip_per_sec"),
            ("ip_per_sec = 20", "max_inflight = 1000001", "limits.max_inflight"),
            ("ip_per_sec = 20", "max_inflight_per_buyer = 1000001", "limits.max_inflight_per_buyer"),
            ("ip_per_sec = 20", "max_inflight_per_ip = 1000001", "limits.max_inflight_per_ip"),
            ("ip_per_sec = 20", "result_per_sec = 1000001", "limits.result_per_sec"),
        ] {
            let text = GOOD.replace(from, to);
            let key = field.rsplit('.').next().unwrap();
            expect_err(&text, line_of(&text, key), field, "must be between");
        }
        // At the bounds, it parses.
        let text = GOOD
            .replace("stock = 100", "stock = 1000000000")
            .replace("per_user_limit = 1", "per_user_limit = 10000")
            .replace("price_cents = 99900", "price_cents = 10000000000\npay_window_secs = 604800");
        let c = parse(&text).unwrap();
        assert_eq!(
            (c.stock, c.per_user_limit, c.price_cents, c.pay_window_secs),
            (MAX_STOCK, MAX_PER_USER_LIMIT, MAX_PRICE_CENTS, MAX_PAY_WINDOW_SECS)
        );
    }

    fn expect_err(text: &str, line: usize, field: &str, words: &str) {
        crate::conf::assert_refused(parse(text), "conf/campaigns/phone.toml", line, field, words);
    }

    #[test]
    fn buckets_default_to_one_and_their_tries_to_all_others() {
        let c = parse(GOOD).unwrap();
        assert_eq!((c.buckets, c.bucket_tries), (1, 0));
        let c = parse(&GOOD.replace("stock = 100", "stock = 100\nbuckets = 4")).unwrap();
        assert_eq!((c.buckets, c.bucket_tries), (4, 3));
        let c = parse(&GOOD.replace("stock = 100", "stock = 100\nbuckets = 4\nbucket_tries = 1")).unwrap();
        assert_eq!((c.buckets, c.bucket_tries), (4, 1));
    }

    #[test]
    fn bad_buckets_are_refused_with_their_line() {
        let with = |extra: &str| GOOD.replace("stock = 100", &format!("stock = 100\n{extra}"));
        expect_err(&with("buckets = 0"), 5, "buckets", "between 1 and 64");
        expect_err(&with("buckets = 65"), 5, "buckets", "between 1 and 64");
        expect_err(&with("buckets = 3\nbucket_tries = 3"), 6, "bucket_tries", "between 1 and 2");
        expect_err(&with("buckets = 3\nbucket_tries = 0"), 6, "bucket_tries", "between 1 and 2");
        expect_err(&with("bucket_tries = 1"), 5, "bucket_tries", "needs buckets = 2");
    }

    #[test]
    fn negative_stock_is_refused_with_its_line() {
        expect_err(&GOOD.replace("stock = 100", "stock = -5"), 4, "stock", "between 0 and");
    }

    #[test]
    fn end_before_start_is_refused() {
        expect_err(&GOOD.replace("11:00:00", "09:00:00"), 8, "ends_at", "after starts_at");
    }

    #[test]
    fn unknown_field_is_refused() {
        expect_err(&GOOD.replace("sku = ", "skew = "), 3, "skew", "unknown field");
    }

    #[test]
    fn id_must_match_the_file_name() {
        expect_err(&GOOD.replace("id = \"phone\"", "id = \"tablet\""), 2, "id", "file name");
    }

    #[test]
    fn bad_time_and_bad_switch_are_refused() {
        expect_err(&GOOD.replace("\"2026-12-01T11:00:00+08:00\"", "\"tomorrow\""), 8, "ends_at", "RFC 3339");
        expect_err(&GOOD.replace("queue_only = true", "queue_only = 3"), 11, "queue_only", "");
        expect_err(
            &GOOD.replace("ip_per_sec = 20", "max_inflight = 0"),
            14,
            "limits.max_inflight",
            "between 1 and",
        );
    }

    #[test]
    fn defense_and_eligibility_parse_with_defaults_and_bounds() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.defense, Defense::default());
        assert!(c.eligibility.is_open());
        let text = format!(
            "{GOOD}\n[defense]\ncaptcha = \"provider\"\npow_bits = 4\ntimestamp_window_secs = 10\n\n\
             [eligibility]\nblacklist_file = \"phone.blacklist\"\nmin_level = 2\nregions = [\"CN-SH\"]\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.defense.captcha, crate::defense::CaptchaKind::Provider);
        assert_eq!(
            (c.defense.pow_bits, c.defense.timestamp_window_secs, c.defense.token_ttl_secs),
            (4, 10, 60)
        );
        assert_eq!(c.defense.nonce_ttl_secs(), 70, "a nonce outlives the token and the window");
        assert_eq!(c.eligibility.blacklist_file.as_deref(), Some("phone.blacklist"));
        assert_eq!((c.eligibility.min_level, c.eligibility.regions.len()), (2, 1));
        assert!(!c.eligibility.is_open());

        let bad = format!("{GOOD}\n[defense]\npow_bits = 40\n");
        expect_err(&bad, 17, "defense.pow_bits", "between 0 and 28");
        let bad = format!("{GOOD}\n[defense]\ntimestamp_window_secs = 0\n");
        expect_err(&bad, 17, "defense.timestamp_window_secs", "between 1 and 300");
        let bad = format!("{GOOD}\n[defense]\ncaptcha = \"human\"\n");
        expect_err(&bad, 17, "captcha", "unknown variant");
        let bad = format!("{GOOD}\n[eligibility]\nblacklist_file = \" \"\n");
        expect_err(&bad, 17, "eligibility.blacklist_file", "not be empty");
    }

    #[test]
    fn the_shipped_demo_campaign_parses_with_every_defense_on() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/campaigns/demo.toml");
        let c = Campaign::load(&file).unwrap();
        assert_eq!(c.id, "demo");
        assert_eq!(c.defense.captcha, crate::defense::CaptchaKind::Pow);
        assert!(c.limits.user_per_sec > 0 && c.limits.device_per_sec > 0);
        assert!(!c.eligibility.is_open());
        assert_eq!(c.global_limits.len(), 1, "the demo turns a global limit on");
    }

    #[test]
    fn global_limits_parse_and_each_bad_field_names_its_line() {
        use crate::global_limit::{LimitBy, OnError};
        assert!(parse(GOOD).unwrap().global_limits.is_empty(), "none by default");
        let rules = "\n[[global_limit]]\nby = \"user\"\nmax = 10\nwindow_secs = 10\non_error = \"open\"\n\n\
                     [[global_limit]]\nby = \"ip\"\nmax = 100\nwindow_secs = 1\non_error = \"closed\"\n";
        let c = parse(&format!("{GOOD}{rules}")).unwrap();
        assert_eq!(c.global_limits.len(), 2);
        assert_eq!(
            (c.global_limits[0].by, c.global_limits[0].max, c.global_limits[0].window_secs),
            (LimitBy::User, 10, 10)
        );
        assert_eq!((c.global_limits[1].by, c.global_limits[1].on_error), (LimitBy::Ip, OnError::Closed));
        assert_eq!(c.limits.global_timeout_ms, 50);

        let one = |by: &str, max: &str, window: &str, on_error: &str| {
            format!(
                "{GOOD}\n[[global_limit]]\nby = {by}\nmax = {max}\nwindow_secs = {window}\non_error = {on_error}\n"
            )
        };
        expect_err(&one("\"user\"", "0", "10", "\"open\""), 18, "global_limit.max", "between 1 and");
        expect_err(&one("\"user\"", "5", "7200", "\"open\""), 19, "global_limit.window_secs", "3600");
        expect_err(&one("\"planet\"", "5", "10", "\"open\""), 17, "by", "unknown variant");
        expect_err(&one("\"user\"", "5", "10", "\"maybe\""), 20, "on_error", "unknown variant");
        let twice = format!(
            "{}\n[[global_limit]]\nby = \"user\"\nmax = 1\nwindow_secs = 1\non_error = \"open\"\n",
            one("\"user\"", "5", "10", "\"open\"")
        );
        expect_err(&twice, 23, "global_limit.by", "one rule per dimension");
        // With buckets, a rule by ip, device or campaign is split over them (a user rule is not).
        let bucketed = |by: &str, max: &str| {
            one(by, max, "10", "\"open\"").replace("stock = 100", "stock = 100\nbuckets = 4")
        };
        expect_err(&bucketed("\"ip\"", "3"), 19, "global_limit.max", "at least 4");
        assert!(parse(&bucketed("\"ip\"", "4")).is_ok());
        assert!(parse(&bucketed("\"user\"", "1")).is_ok(), "a user counts in their home bucket only");
        let slow = GOOD.replace("ip_per_sec = 20", "global_timeout_ms = 5000");
        expect_err(&slow, 14, "limits.global_timeout_ms", "between 1 and 1000");
        // Found at its key, not at a comment naming it earlier in the file.
        let noted =
            slow.replace("[limits]", "# global_timeout_ms: how long the global limits may take\n[limits]");
        expect_err(&noted, 15, "limits.global_timeout_ms", "between 1 and 1000, found 5000");
    }
}
