//! The undersell judge (seed: 只保证不超卖，不做少卖和丢消息对账 is the pitfall): a sale must sell its
//! stock to the buyers who ask for it. Units left unsold at the end of the burst (its resends
//! done) while buyers who asked went home with only retryable refusals (`TRY_LATER`,
//! `SERVICE_DEGRADED`, no answer) are undersold: each such buyer could have had one of them.
//! Nothing is undersold when the crowd wanted less than the stock (nobody was turned away) or
//! the stock is gone.

use crate::verdict::Verdict;

/// Whether `code` (an attempt's last answer, after its resends) is a refusal that says "try
/// again", not a decision: `TRY_LATER`, `SERVICE_DEGRADED`, no answer (`ERROR`, or a 503 without
/// a code), or such an answer after an unanswered try (`UNANSWERED_THEN_<code>`).
pub fn retryable(code: &str) -> bool {
    let code = code.strip_prefix("UNANSWERED_THEN_").unwrap_or(code);
    matches!(code, "TRY_LATER" | "SERVICE_DEGRADED" | "ERROR" | "HTTP_503")
}

/// Buyers every attempt of whom ended with a retryable refusal only, of `wanting` (each buyer:
/// whether that holds, [`crate::load::Outcome::wanting`]).
pub fn turned_away<'a>(wanting: impl IntoIterator<Item = &'a bool>) -> u64 {
    wanting.into_iter().filter(|&&only_retryable| only_retryable).count() as u64
}

/// Units undersold: of `left` units unsold at the burst's end, as many as buyers were
/// `turned_away` (one each; the rest nobody asked for).
pub fn undersold(left: i64, turned_away: u64) -> u64 {
    (left.max(0) as u64).min(turned_away)
}

/// The undersold units as the HTML report's card shows them, from (`left`, `turned_away`).
pub fn shown((left, turned_away): (Option<i64>, u64)) -> String {
    left.map_or("not judged".into(), |left| undersold(left, turned_away).to_string())
}

/// "Undersold = 0", judged on the units `left` in Redis at the burst's end (`None`: not read)
/// and the buyers `turned_away`.
pub fn verdict(left: Option<i64>, turned_away: u64) -> Verdict {
    let name = "undersold = 0 (no unit left unsold while buyers who asked got only retryable refusals)";
    let Some(left) = left else {
        return Verdict {
            name,
            ok: true,
            detail: format!(
                "not judged: the stock at the burst's end was not read; {turned_away} buyers turned away"
            ),
        };
    };
    let n = undersold(left, turned_away);
    Verdict {
        name,
        ok: n == 0,
        detail: format!(
            "undersold {n}: {left} units never reserved at the burst's end (its resends done), \
             {turned_away} buyers turned away with only TRY_LATER, SERVICE_DEGRADED or no answer"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_refusals_are_not_decisions() {
        for code in ["TRY_LATER", "SERVICE_DEGRADED", "ERROR", "HTTP_503", "UNANSWERED_THEN_TRY_LATER"] {
            assert!(retryable(code), "{code}");
        }
        for code in
            ["QUEUED", "SOLD_OUT", "LIMIT_REACHED", "RATE_LIMITED", "UNANSWERED_THEN_SOLD_OUT", "BAD_TOKEN"]
        {
            assert!(!retryable(code), "{code}");
        }
    }

    #[test]
    fn stock_left_while_resending_buyers_went_home_empty_fails() {
        // 4,580 units never reserved while 14,600 buyers who resent as the page does were told
        // only TRY_LATER or SERVICE_DEGRADED: every one of those units is undersold.
        let wanting = [true; 14_600].into_iter().chain([false; 45_400]).collect::<Vec<_>>();
        let away = turned_away(&wanting);
        assert_eq!(away, 14_600);
        let v = verdict(Some(4_580), away);
        assert!(!v.ok, "{}", v.detail);
        assert!(v.detail.starts_with("undersold 4580:"), "{}", v.detail);
        // More units left than buyers turned away: one each for those who asked.
        assert_eq!(undersold(31_330, 41), 41);
        assert!(!verdict(Some(1), 1).ok, "a single unit left to a single buyer turned away");
    }

    #[test]
    fn a_sold_out_sale_or_a_crowd_that_wanted_less_passes() {
        assert!(verdict(Some(0), 14_600).ok, "sold out: nothing left to sell");
        assert!(verdict(Some(500), 0).ok, "units left, but nobody asking was turned away");
        assert!(verdict(Some(-3), 10).ok, "units in flight between buckets count as none left");
        let v = verdict(None, 12);
        assert!(v.ok && v.detail.starts_with("not judged"), "{}", v.detail);
    }
}
