//! One invariant of a sale and whether it held: what every judge (the report's, the undersell
//! judge's, the flood's) answers.

use serde::Serialize;

/// One invariant and whether it held.
#[derive(Debug, Serialize)]
pub struct Verdict {
    /// What was checked.
    pub name: &'static str,
    /// Whether it held.
    pub ok: bool,
    /// The figures behind it.
    pub detail: String,
}
