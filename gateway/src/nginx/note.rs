//! The words every part of the import shares: the [`Note`] on a directive, Nginx's sizes
//! and TOML's strings (Nginx's times are the conf's: `crate::conf::upstream::nginx_ms`).

use super::parse::{Directive, Place};

/// What could not be mapped as it is, at its place.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// Where the directive is.
    pub at: Place,
    /// The directive's name.
    pub directive: String,
    /// Mapped with another meaning (said how), else not mapped at all.
    pub mapped: bool,
    /// Why.
    pub why: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.mapped { "mapped differently" } else { "not mapped" };
        write!(f, "{}: {}: {what}: {}", self.at, self.directive, self.why)
    }
}

/// Notes `d`: `mapped` with another meaning (said in `why`), else not mapped at all.
pub(super) fn note(notes: &mut Vec<Note>, d: &Directive, mapped: bool, why: &str) {
    notes.push(Note { at: d.at.clone(), directive: d.name.clone(), mapped, why: why.to_string() });
}

/// Nginx's size: `1024`, `512k`, `10m`, `1g` → bytes.
pub(super) fn bytes(t: &str) -> Option<i64> {
    let (n, mult) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1024),
        'm' | 'M' => (&t[..t.len() - 1], 1024 * 1024),
        'g' | 'G' => (&t[..t.len() - 1], 1024 * 1024 * 1024),
        _ => (t, 1),
    };
    n.parse::<i64>().ok()?.checked_mul(mult)
}

/// A TOML string.
pub(super) fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn nginx_sizes() {
        assert_eq!(super::bytes("8m"), Some(8 << 20));
        assert_eq!(super::bytes("512k"), Some(512 << 10));
        assert_eq!(super::bytes("x"), None);
        assert_eq!(super::bytes("99999999999g"), None, "too large: refused, not wrapped");
    }
}
