//! Who is in the crowd besides plain buyers, and what one attempt of each sends: hot users (one
//! user, many attempts at once), early birds (before the window opens), bots (a bad signature, a
//! replayed nonce, a stale timestamp, a rotated device id) and the resale wave (after unpaid
//! orders closed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::client::{nonce, Queued, Reply, SignedOrder, Ticket};
use crate::resend::{jittered, uniform, Rule};

/// The kind of an attempt: who sends it and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A user's signed order.
    Buyer,
    /// One of a hot user's many concurrent attempts.
    Hot,
    /// An order sent before the window opened.
    Early,
    /// A bot: the signature does not match.
    BotBadSignature,
    /// A bot: a buyer's signed request sent again as it was (to the other gateway when there
    /// are two): a safe retry, which must get the first answer (`QUEUED_SAME_ID` when that was
    /// QUEUED with the same request id), never a second reservation (`QUEUED_AFTER_<code>`: the
    /// buyer's own request was answered `<code>` and reserved nothing, the copy reserved once).
    BotResend,
    /// A bot: the buyer's nonce reused in a newly signed request (a later timestamp): REPLAY.
    BotReplay,
    /// A bot: signed, but its timestamp is ten minutes old.
    BotStale,
    /// A bot: a token used from another device id than it was issued to.
    BotDevice,
    /// After unpaid orders closed: a user who got nothing tries again.
    Resale,
    /// The flood's scripts ([`fires_at_t0`]): accounts of the crowd that send their token
    /// request at the very start instant, then their orders, as a script would. Not bots: every
    /// request is well formed; what they try to gain is a place at the head of the line.
    Script,
}

impl Kind {
    /// Name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Buyer => "buyer",
            Kind::Hot => "hot user",
            Kind::Early => "early bird",
            Kind::BotBadSignature => "bot: bad signature",
            Kind::BotResend => "bot: resent request",
            Kind::BotReplay => "bot: reused nonce",
            Kind::BotStale => "bot: stale timestamp",
            Kind::BotDevice => "bot: rotated device",
            Kind::Resale => "resale",
            Kind::Script => "script at T-0",
        }
    }

    /// Whether this is a bot's request (must never reserve anything).
    pub fn is_bot(self) -> bool {
        matches!(
            self,
            Kind::BotBadSignature | Kind::BotResend | Kind::BotReplay | Kind::BotStale | Kind::BotDevice
        )
    }

    /// The bot kinds that use a bot account of their own (resend and replay reuse a buyer's).
    pub const OWN_ACCOUNT_BOTS: [Kind; 3] = [Kind::BotBadSignature, Kind::BotStale, Kind::BotDevice];
}

/// The user name of bot `i` of `kind` (bot accounts are named `bot-...`: the checks look for
/// anything they hold).
pub fn bot_user(kind: Kind, i: u32) -> String {
    let tag = match kind {
        Kind::BotBadSignature => "sig",
        Kind::BotStale => "stale",
        _ => "dev",
    };
    format!("bot-{tag}-{i}")
}

/// Whether the flood's user `i` is one of the scripts that fire at T−0: `percent` of the crowd,
/// spread evenly through it ([`spread`]).
pub fn fires_at_t0(i: u32, percent: u32) -> bool {
    spread(i, percent)
}

/// Whether user `i` is one of `percent` of a crowd, spread evenly through it (user `i` is one
/// when `i · percent mod 100 < percent`).
pub fn spread(i: u32, percent: u32) -> bool {
    (u64::from(i) * u64::from(percent.min(100))) % 100 < u64::from(percent.min(100))
}

/// Whether buyer `user` (`user-<i>`) is one of the `percent` who give up on an answer the page
/// would resend (`TRY_LATER`, `SERVICE_DEGRADED`), spread evenly through the crowd.
pub fn gives_up(user: &str, percent: u32) -> bool {
    let i = user.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    spread(i, percent)
}

/// How an attempt's requests go out: within the crowd's requests in flight (a place taken per
/// request, none while a buyer waits to resend), and whether its buyer resends as the page does.
#[derive(Debug, Default)]
pub struct Pace {
    /// The crowd's places for requests in flight (none: unbounded, as the flood's accounts).
    pub gate: Option<Arc<Semaphore>>,
    /// A place already taken for the attempt's first request.
    pub first: Option<OwnedSemaphorePermit>,
    /// Percentage of buyers who give up on an answer the page would resend ([`gives_up`]).
    pub give_up_percent: u32,
}

impl Pace {
    /// A place for one request (the one taken for the first, else a new one).
    async fn place(&mut self) -> Option<OwnedSemaphorePermit> {
        if let Some(p) = self.first.take() {
            return Some(p);
        }
        self.gate.clone()?.acquire_owned().await.ok()
    }
}

/// When the flood's user `i` of `users` sends its first token request, in ms from the start
/// instant: a script at 0; everyone else spread evenly over `spread_ms`, starting `lead_ms`
/// before the start (0: the whole flood in the first `spread_ms` of the sale).
pub fn arrival_ms(i: u32, users: u32, percent: u32, lead_ms: u64, spread_ms: u64) -> i64 {
    if fires_at_t0(i, percent) {
        return 0;
    }
    let into = u64::from(i) * spread_ms / u64::from(users.max(1));
    into as i64 - lead_ms as i64
}

/// One attempt to send.
#[derive(Debug, Clone)]
pub struct Job {
    /// The user (its ticket's key).
    pub user: String,
    /// What it sends.
    pub kind: Kind,
    /// Which gateway (index into the crowd's list); a replay goes to the next one.
    pub gateway: usize,
}

/// One answer of the gateway to one request.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The user.
    pub user: String,
    /// What was sent.
    pub kind: Kind,
    /// The answer's code (`ERROR`: transport error, `HTTP_<status>`: no code in the body).
    pub code: String,
    /// The request id and result token of a QUEUED answer.
    pub queued: Option<Queued>,
    /// Round trip (of the last request).
    pub took: Duration,
    /// When the answer came.
    pub at: Instant,
    /// The answers before the last, each of which the buyer resent as the page does.
    pub earlier: Vec<Try>,
}

/// One answer the buyer resent its order after.
#[derive(Debug, Clone)]
pub struct Try {
    /// Its code (`ERROR`: no answer).
    pub code: String,
    /// Its round trip.
    pub took: Duration,
    /// When it came.
    pub at: Instant,
}

fn code_of(reply: &Reply) -> (String, Option<Queued>) {
    let (status, body) = reply;
    if *status == 0 {
        return ("ERROR".into(), None);
    }
    match body["code"].as_str() {
        Some(code) => (code.to_string(), Queued::of(body)),
        None => (format!("HTTP_{status}"), None),
    }
}

/// Sends `order` and resends the same signed bytes as the buyer's page does ([`Rule::page`]):
/// after a network error (the gateway gone, say), `TRY_LATER` or `SERVICE_DEGRADED`, after the
/// answer's `Retry-After` with jitter, within the page's bounds. A bot sends once; a buyer who
/// gives up ([`gives_up`]) resends only when it got no answer at all.
async fn send_one(
    http: &reqwest::Client,
    base: &str,
    ticket: &Ticket,
    order: &SignedOrder,
    (user, kind): (&str, Kind),
    pace: &mut Pace,
) -> Sent {
    let signed = Instant::now();
    let gives_up = gives_up(user, pace.give_up_percent);
    let mut earlier = Vec::new();
    let mut lost = false;
    loop {
        let t = Instant::now();
        let place = pace.place().await;
        let (reply, retry_after) = ticket.send_answer(http, base, order, &[]).await;
        drop(place);
        let took = t.elapsed();
        let code = code_of(&reply).0;
        let n = earlier.len() as u32 + 1;
        let resend = !kind.is_bot() && (reply.0 == 0 || !gives_up);
        let pause =
            resend.then(|| Rule::page().pause(n, signed.elapsed(), reply.0, &code, retry_after)).flatten();
        let Some(pause) = pause else {
            let (code, queued) = after_retries(lost, code_of(&reply));
            return Sent { user: user.to_string(), kind, code, queued, took, at: Instant::now(), earlier };
        };
        lost |= reply.0 == 0;
        earlier.push(Try { code, took, at: Instant::now() });
        tokio::time::sleep(jittered(pause, uniform())).await;
    }
}

/// The code recorded for a request whose answer was `last`, after `lost`: whether an earlier
/// try got no answer. That try may have reserved a unit (a timed-out request the gateway still
/// ran): a retry answered anything but QUEUED (`SOLD_OUT` once that very unit was the last, say)
/// does not tell, so the answer is `UNANSWERED_THEN_<code>`, counted as ambiguous by the report.
fn after_retries(lost: bool, last: (String, Option<Queued>)) -> (String, Option<Queued>) {
    match last {
        (code, None) if lost && code != "ERROR" => (format!("UNANSWERED_THEN_{code}"), None),
        other => other,
    }
}

/// Sends one job: one request (with the page's resends), or two for a replay (the buyer's,
/// then the bot's copy of it), each within `pace`.
pub async fn attempt(
    http: &reqwest::Client,
    gateways: &[String],
    job: &Job,
    ticket: &Ticket,
    pace: &mut Pace,
) -> Vec<Sent> {
    let base = &gateways[job.gateway % gateways.len()];
    let now = chrono::Utc::now().timestamp();
    let who = (job.user.as_str(), job.kind);
    match job.kind {
        Kind::Buyer | Kind::Hot | Kind::Early | Kind::Resale | Kind::Script => {
            let order = ticket.sign(1, now, &nonce());
            vec![send_one(http, base, ticket, &order, who, pace).await]
        }
        Kind::BotBadSignature => {
            let mut order = ticket.sign(1, now, &nonce());
            order.signature = tamper(&order.signature);
            vec![send_one(http, base, ticket, &order, who, pace).await]
        }
        Kind::BotStale => {
            let order = ticket.sign(1, now - 600, &nonce());
            vec![send_one(http, base, ticket, &order, who, pace).await]
        }
        Kind::BotDevice => {
            let mut rotated = ticket.clone();
            rotated.device = format!("rotated-{}", nonce());
            let order = ticket.sign(1, now, &nonce());
            vec![send_one(http, base, &rotated, &order, who, pace).await]
        }
        Kind::BotResend | Kind::BotReplay => {
            let order = ticket.sign(1, now, &nonce());
            let first = send_one(http, base, ticket, &order, (&job.user, Kind::Buyer), pace).await;
            let other = &gateways[(job.gateway + 1) % gateways.len()];
            let mut again = if job.kind == Kind::BotResend {
                send_one(http, other, ticket, &order, who, pace).await
            } else {
                let reused = ticket.sign(1, now + 1, &order.nonce);
                send_one(http, other, ticket, &reused, who, pace).await
            };
            let id = |s: &Sent| s.queued.as_ref().map(|q| q.request_id.clone());
            if again.code == "QUEUED" && again.queued.is_some() && id(&again) == id(&first) {
                // The first answer again: no new reservation.
                again.code = "QUEUED_SAME_ID".into();
                again.queued = None;
            } else if again.code == "QUEUED" && first.code != "QUEUED" {
                // The copy reserved where the buyer's own request had not (its nonce was never
                // spent: answered before reserve.lua ran). One reservation for one signed request,
                // shown apart; a copy of a request that was QUEUED reserving again stays QUEUED.
                again.code = format!("QUEUED_AFTER_{}", first.code);
            }
            vec![first, again]
        }
    }
}

/// The signature with its first hex digit changed.
fn tamper(signature: &str) -> String {
    let mut s: Vec<char> = signature.chars().collect();
    if let Some(c) = s.first_mut() {
        *c = if *c == '0' { '1' } else { '0' };
    }
    s.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tampered_signature_differs_in_one_digit() {
        assert_eq!(tamper("0abc"), "1abc");
        assert_eq!(tamper("fabc"), "0abc");
    }

    #[test]
    fn a_retry_after_a_lost_answer_that_reserved_nothing_is_ambiguous() {
        let q = Queued { request_id: "r".into(), result_token: "t".into() };
        let sold_out = ("SOLD_OUT".to_string(), None);
        assert_eq!(after_retries(true, sold_out.clone()).0, "UNANSWERED_THEN_SOLD_OUT");
        assert_eq!(after_retries(false, sold_out.clone()), sold_out, "answered at once: as it came");
        let queued = ("QUEUED".to_string(), Some(q));
        assert_eq!(after_retries(true, queued.clone()), queued, "a QUEUED retry tells");
        assert_eq!(after_retries(true, ("ERROR".into(), None)).0, "ERROR");
    }

    #[test]
    fn only_bots_are_bots() {
        assert!(Kind::BotReplay.is_bot() && Kind::BotResend.is_bot() && Kind::BotDevice.is_bot());
        assert!(!Kind::Hot.is_bot() && !Kind::Early.is_bot() && !Kind::Resale.is_bot());
        assert!(bot_user(Kind::BotStale, 3).starts_with("bot-"));
        assert!(!Kind::Script.is_bot(), "a script's requests are well formed");
    }

    #[test]
    fn the_scripts_are_their_share_of_the_crowd_spread_through_it() {
        for percent in [0, 7, 10, 25, 100] {
            let n = (0..10_000).filter(|&i| fires_at_t0(i, percent)).count() as u32;
            assert_eq!(n, percent * 100, "{percent}%");
        }
        // Spread: every block of ten users holds one script at 10 %, not the first tenth.
        assert!((0..100).all(|b| (b * 10..b * 10 + 10).filter(|&i| fires_at_t0(i, 10)).count() == 1));
        assert!(!fires_at_t0(1, 10) && fires_at_t0(0, 10) && fires_at_t0(10, 10));
    }

    #[test]
    fn the_scripts_fire_at_the_start_instant_and_the_crowd_over_its_spread() {
        let users = 1000;
        let at: Vec<i64> = (0..users).map(|i| arrival_ms(i, users, 10, 0, 1000)).collect();
        assert!((0..users).filter(|&i| fires_at_t0(i, 10)).all(|i| at[i as usize] == 0));
        let others: Vec<i64> = (0..users).filter(|&i| !fires_at_t0(i, 10)).map(|i| at[i as usize]).collect();
        assert!(others.iter().all(|&t| (0..1000).contains(&t)), "within the first second");
        assert!(*others.iter().max().unwrap() >= 990, "to its end");
        assert!(others.windows(2).all(|w| w[0] <= w[1]), "in user order, evenly");
        // With a lead the crowd comes earlier; the scripts stay at the start instant.
        assert_eq!(arrival_ms(1, users, 10, 1000, 1000), -999);
        assert_eq!(arrival_ms(0, users, 10, 1000, 1000), 0);
        assert!((0..users).all(|i| arrival_ms(i, users, 10, 1000, 1000) < 1));
    }
}
