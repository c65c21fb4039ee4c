//! Who may buy: a campaign's blacklist and eligible set (files of one user id a line, loaded
//! before the sale) and its rules on the account (age, level, region, from the login JWT's
//! claims, carried by the campaign token). Refusals are `NOT_ELIGIBLE`.

use std::collections::HashSet;
use std::path::Path;

use protocol::codes::Code;
use protocol::defense::Eligibility as Rules;

use crate::denial::Denial;
use crate::issue::auth::Login;

/// A campaign's eligibility, lists loaded.
#[derive(Debug, Clone, Default)]
pub struct Eligibility {
    rules: Rules,
    blacklist: HashSet<String>,
    eligible: Option<HashSet<String>>,
}

/// Reads a list file: one user id a line; blank lines and `#` comments skipped.
fn read_list(dir: &Path, file: &str) -> Result<HashSet<String>, String> {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(parse_list(&text))
}

/// The user ids of a list file's text.
pub fn parse_list(text: &str) -> HashSet<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn not_eligible(message: &'static str) -> Denial {
    Denial::new(Code::NotEligible, message)
}

impl Eligibility {
    /// Loads the lists of `rules`, relative to `dir` (the campaign file's folder).
    pub fn load(dir: &Path, rules: &Rules) -> Result<Self, String> {
        let blacklist =
            rules.blacklist_file.as_deref().map(|f| read_list(dir, f)).transpose()?.unwrap_or_default();
        let eligible = rules.eligible_file.as_deref().map(|f| read_list(dir, f)).transpose()?;
        Ok(Self { rules: rules.clone(), blacklist, eligible })
    }

    /// From rules and lists already in memory.
    pub fn new(rules: Rules, blacklist: HashSet<String>, eligible: Option<HashSet<String>>) -> Self {
        Self { rules, blacklist, eligible }
    }

    /// `Ok` when `login` may buy at `now` (unix seconds).
    pub fn check(&self, login: &Login, now: i64) -> Result<(), Denial> {
        if self.blacklist.contains(&login.user) {
            return Err(not_eligible("this account may not buy in this campaign"));
        }
        if self.eligible.as_ref().is_some_and(|set| !set.contains(&login.user)) {
            return Err(not_eligible("this account is not on the campaign's list of buyers"));
        }
        let r = &self.rules;
        if r.min_level > 0 && login.level.unwrap_or(0) < r.min_level {
            return Err(not_eligible("this account's level is below the campaign's minimum"));
        }
        if r.min_account_age_days > 0 {
            let min_secs = i64::from(r.min_account_age_days) * 86_400;
            if login.registered_at.is_none_or(|at| now - at < min_secs) {
                return Err(not_eligible("this account is younger than the campaign allows"));
            }
        }
        if !r.regions.is_empty() && !login.region.as_ref().is_some_and(|g| r.regions.contains(g)) {
            return Err(not_eligible("this campaign is not open to this account's region"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(user: &str) -> Login {
        Login { user: user.into(), level: Some(3), region: Some("CN-SH".into()), registered_at: Some(0) }
    }

    #[test]
    fn lists_and_rules_each_refuse() {
        let now = 400 * 86_400;
        let open = Eligibility::default();
        assert!(open.check(&Login { user: "x".into(), ..Login::default() }, now).is_ok());

        let rules = Rules {
            min_level: 2,
            min_account_age_days: 30,
            regions: vec!["CN-SH".into()],
            ..Rules::default()
        };
        let e = Eligibility::new(
            rules,
            parse_list("bad # a bot\n\n  worse \n"),
            Some(parse_list("u1\nbad\nlow\n")),
        );
        assert!(e.check(&login("u1"), now).is_ok());
        let code = |l: Login| e.check(&l, now).unwrap_err().code;
        assert_eq!(code(login("bad")), Code::NotEligible, "blacklisted");
        assert_eq!(code(login("worse")), Code::NotEligible, "blacklisted, trimmed");
        assert_eq!(code(login("u2")), Code::NotEligible, "not on the eligible list");
        assert_eq!(code(Login { level: Some(1), ..login("u1") }), Code::NotEligible, "level");
        assert_eq!(code(Login { level: None, ..login("u1") }), Code::NotEligible, "no level claim");
        assert_eq!(
            code(Login { registered_at: Some(now - 86_400), ..login("u1") }),
            Code::NotEligible,
            "too young"
        );
        assert_eq!(code(Login { region: Some("US".into()), ..login("u1") }), Code::NotEligible, "region");
    }
}
