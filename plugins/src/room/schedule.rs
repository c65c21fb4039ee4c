//! The serving schedule (pure).

use protocol::waiting_room as conf;

/// Who is served when: `rate` positions per second from the start, at most `max_active` within
/// any `session_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Positions per second.
    pub rate: u64,
    /// Admitted at once, if capped.
    pub max_active: Option<u64>,
    /// How long an admission lasts, in ms.
    pub session_ms: i64,
}

impl Schedule {
    /// The schedule of a campaign's room.
    pub fn of(room: &conf::WaitingRoom) -> Self {
        Self {
            rate: room.admit_per_sec.max(1),
            max_active: room.max_active,
            session_ms: i64::from(room.session_secs.max(1)) * 1000,
        }
    }

    /// The serving position `elapsed_ms` after the start: positions up to it are admitted (or
    /// were). `floor(rate · t)`, capped so that at most `max_active` positions are admitted
    /// within any session: in the k-th session window, at most `(k + 1) · max_active` in all.
    pub fn serving(&self, elapsed_ms: i64) -> u64 {
        if elapsed_ms <= 0 {
            return 0;
        }
        let t = elapsed_ms as u128;
        let flat = (u128::from(self.rate) * t / 1000).min(u128::from(u64::MAX));
        let Some(m) = self.max_active else { return flat as u64 };
        let s = self.session_ms as u128;
        let (k, into) = (t / s, t % s);
        let capped = k * u128::from(m) + (u128::from(self.rate) * into / 1000).min(u128::from(m));
        flat.min(capped).min(u128::from(u64::MAX)) as u64
    }

    /// When position `p` (from 1) is served, in ms after the start: the least `t` with
    /// `serving(t) >= p`.
    pub fn served_at(&self, p: u64) -> i64 {
        let p = u128::from(p.max(1));
        let r = u128::from(self.rate);
        let flat = (1000 * p).div_ceil(r);
        let at = match self.max_active {
            None => flat,
            Some(m) => {
                let (m, s) = (u128::from(m), self.session_ms as u128);
                let k = (p - 1) / m;
                let into = (1000 * (p - k * m)).div_ceil(r);
                let capped = if into < s { k * s + into } else { (k + 1) * s };
                flat.max(capped)
            }
        };
        at.min(i64::MAX as u128) as i64
    }
}
