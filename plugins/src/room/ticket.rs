//! The ticket (pure).

use crate::denial::Denial;
use protocol::codes::Code;
use protocol::scripts::RoomPlace;
use ring::hmac;

/// A queue ticket: bound to its campaign, user and device, signed, expiring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The campaign (signed, not written in the ticket: the route names it).
    pub campaign: String,
    /// The buyer.
    pub user: String,
    /// The device it was given to.
    pub device: String,
    /// Where the buyer stands.
    pub place: RoomPlace,
    /// Issued at, unix seconds.
    pub issued_at: i64,
    /// Expires at, unix seconds.
    pub expires_at: i64,
    /// The admission it promised, unix ms, when that is later than its position's turn (a wait
    /// padded to [`MIN_PROMISE_MS`](super::MIN_PROMISE_MS)): the buyer is not admitted before it.
    pub promised_ms: Option<i64>,
}

fn bad_ticket(message: &'static str) -> Denial {
    Denial::new(Code::BadTicket, message)
}

impl Ticket {
    /// What the tag signs: every field, the user and device length-prefixed.
    /// (A ticket without a promise signs what it did before there were promises.)
    fn message(&self) -> String {
        let mut m = format!(
            "ticket\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.campaign,
            self.user.len(),
            self.user,
            self.device.len(),
            self.device,
            self.place.as_stored(),
            self.issued_at,
            self.expires_at
        );
        if let Some(promised) = self.promised_ms {
            m.push_str(&format!("\npromised {promised}"));
        }
        m
    }

    /// The ticket as handed out: `{place}.{issued}.{expires}.{hex user}.{hex device}.{hex tag}`,
    /// with `.{promised ms}` after `{expires}` when it keeps a promise.
    pub fn sign(&self, key: &hmac::Key) -> String {
        let tag = hmac::sign(key, self.message().as_bytes());
        let promised = self.promised_ms.map(|p| format!(".{p}")).unwrap_or_default();
        format!(
            "{}.{}.{}{promised}.{}.{}.{}",
            self.place.as_stored(),
            self.issued_at,
            self.expires_at,
            hex::encode(&self.user),
            hex::encode(&self.device),
            hex::encode(tag.as_ref())
        )
    }

    /// Checks a presented ticket for `campaign`, `user` and `device` at `now` (unix seconds):
    /// `BAD_TICKET` when it is malformed, forged or for another campaign (its tag does not
    /// verify), for another user or device, or expired.
    pub fn verify(
        key: &hmac::Key,
        token: &[u8],
        campaign: &str,
        user: &str,
        device: &str,
        now: i64,
    ) -> Result<Ticket, Denial> {
        let forged = || bad_ticket("the queue ticket is not valid for this campaign: ask again without it");
        let text = std::str::from_utf8(token).map_err(|_| forged())?;
        if text.len() > 1024 {
            return Err(forged());
        }
        let parts: Vec<&str> = text.split('.').collect();
        let (place, issued, expires, promised, u, d, tag) = match parts.as_slice() {
            [place, issued, expires, u, d, tag] => (place, issued, expires, None, u, d, tag),
            [place, issued, expires, promised, u, d, tag] => {
                (place, issued, expires, Some(promised), u, d, tag)
            }
            _ => return Err(forged()),
        };
        let number = |s: &str| {
            (!s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<i64>().ok())
                .flatten()
        };
        let text_of = |h: &str| hex::decode(h).ok().and_then(|b| String::from_utf8(b).ok());
        let ticket = Ticket {
            campaign: campaign.to_string(),
            place: RoomPlace::parse(place).ok_or_else(forged)?,
            issued_at: number(issued).ok_or_else(forged)?,
            expires_at: number(expires).ok_or_else(forged)?,
            user: text_of(u).ok_or_else(forged)?,
            device: text_of(d).ok_or_else(forged)?,
            promised_ms: match promised {
                Some(p) => Some(number(p).ok_or_else(forged)?),
                None => None,
            },
        };
        let tag = hex::decode(tag).map_err(|_| forged())?;
        hmac::verify(key, ticket.message().as_bytes(), &tag).map_err(|_| forged())?;
        if ticket.user != user {
            return Err(bad_ticket("the queue ticket is another user's"));
        }
        if ticket.device != device {
            return Err(bad_ticket("the queue ticket was given to another device (x-device-id)"));
        }
        if now > ticket.expires_at {
            return Err(bad_ticket("the queue ticket has expired: ask again without it"));
        }
        Ok(ticket)
    }
}
