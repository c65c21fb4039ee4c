//! `log_format` and `access_log` of `http` → the gateway's `[access_log]` (one log for the
//! whole gateway): `combined` or a named format's template with its `escape=`; a variable the
//! gateway's templates do not have is noted at its directive, never dropped.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::note::{note, q, Note};
use super::parse::Directive;
use crate::access_log::{Escape, LogTemplate};

/// A `log_format` that maps: its template and escaping as the gateway writes them.
struct Format {
    template: String,
    escape: &'static str,
}

/// The `[access_log]` table for `http`'s directives (`None`: no log, or none that maps).
pub(super) fn access_log(http: &[Directive], notes: &mut Vec<Note>) -> Option<String> {
    let mut formats: BTreeMap<&str, Option<Format>> = BTreeMap::new();
    for d in http.iter().filter(|d| d.name == "log_format") {
        if let Some(name) = d.args.first() {
            formats.insert(name, log_format(d, notes));
        } else {
            note(notes, d, false, "a name and a format were expected");
        }
    }
    let mut table = None;
    for d in http.iter().filter(|d| d.name == "access_log") {
        if table.is_some() {
            note(notes, d, false, "the gateway writes one access log: the first `access_log` of http is it");
            continue;
        }
        table = Some(one_log(d, &formats, notes));
    }
    table.flatten()
}

/// `log_format NAME [escape=default|json|none] STRING...`: the strings joined, checked.
fn log_format(d: &Directive, notes: &mut Vec<Note>) -> Option<Format> {
    let mut args = &d.args[1..];
    let mut escape = ("default", Escape::Default);
    if let Some(word) = args.first().and_then(|a| a.strip_prefix("escape=")) {
        match Escape::parse(word) {
            Some(e) => escape = (e.name(), e),
            None => {
                note(notes, d, false, "escape= takes default, json or none");
                return None;
            }
        }
        args = &args[1..];
    }
    let template = args.concat();
    if template.is_empty() {
        note(notes, d, false, "a format string was expected");
        return None;
    }
    match LogTemplate::parse(&template, escape.1) {
        Ok(_) => Some(Format { template, escape: escape.0 }),
        Err(e) => {
            note(notes, d, false, &format!("{} (at byte {} of the format)", e.message, e.offset));
            None
        }
    }
}

/// One `access_log PATH [FORMAT [params]]` or `access_log off` of `http`.
fn one_log(d: &Directive, formats: &BTreeMap<&str, Option<Format>>, notes: &mut Vec<Note>) -> Option<String> {
    let path = d.args.first()?;
    if path == "off" {
        return None;
    }
    if path.starts_with("syslog:") {
        note(notes, d, false, "syslog is not built: the gateway writes a file or stdout");
        return None;
    }
    let mut out = format!("\n[access_log]\noutput = {}\n", q(path));
    match d.args.get(1).map(String::as_str) {
        None | Some("combined") => {}
        Some(name) => match formats.get(name) {
            Some(Some(f)) => {
                let _ = writeln!(out, "template = {}", q(&f.template));
                if f.escape != "default" {
                    let _ = writeln!(out, "escape = {}", q(f.escape));
                }
            }
            Some(None) => {
                note(notes, d, false, &format!("its format {name:?} did not map (noted at it)"));
                return None;
            }
            None => {
                note(notes, d, false, &format!("no log_format {name:?} in http"));
                return None;
            }
        },
    }
    if d.args.len() > 2 {
        note(
            notes,
            d,
            true,
            "buffer=, flush=, gzip and if= are not mapped: the gateway's writer takes the lines every 100 ms",
        );
    }
    if !path.starts_with('/') {
        note(notes, d, true, "a relative path is from the server file's folder (Nginx's: its prefix)");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    /// The `[access_log]` table and the notes (`LINE:COL: …`) of an import of `http`.
    fn import(http: &str) -> (Option<String>, Vec<String>) {
        let dir = std::env::temp_dir().join(format!("import-log-{}-{}", std::process::id(), http.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nginx.conf");
        std::fs::write(&file, format!("http {{\n{http}\n}}\n")).unwrap();
        let out = crate::nginx::import_file(&file).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let table = out.toml.find("\n[access_log]").map(|at| out.toml[at..].to_string());
        let prefix = format!("{}:", file.display());
        (table, out.notes.iter().map(|n| n.to_string().replace(&prefix, "")).collect())
    }

    #[test]
    fn combined_a_named_format_and_off() {
        let (t, n) = import("access_log /var/log/nginx/access.log;");
        assert_eq!(t.as_deref(), Some("\n[access_log]\noutput = \"/var/log/nginx/access.log\"\n"));
        assert!(n.is_empty(), "{n:?}");
        let (t, n) = import(
            "log_format j escape=json '{\"ip\":\"$remote_addr\",'\n  '\"ua\":\"$http_user_agent\"}';\n\
             access_log /l/a.log j buffer=32k;",
        );
        let template = r#"template = "{\"ip\":\"$remote_addr\",\"ua\":\"$http_user_agent\"}""#;
        assert_eq!(
            t.unwrap(),
            format!("\n[access_log]\noutput = \"/l/a.log\"\n{template}\nescape = \"json\"\n")
        );
        assert_eq!(n, ["4:1: access_log: mapped differently: buffer=, flush=, gzip and if= are not mapped: the gateway's writer takes the lines every 100 ms"]);
        assert_eq!(import("access_log off;"), (None, vec![]));
    }

    #[test]
    fn what_does_not_map_is_noted_at_its_line() {
        let (t, n) =
            import("log_format m '$remote_addr $connection';\naccess_log /a.log m;\naccess_log /b.log;");
        assert_eq!(t, None);
        assert_eq!(n.len(), 3, "{n:?}");
        assert!(n[0].starts_with("2:1: log_format: not mapped: unknown variable $connection"), "{n:?}");
        assert!(n[0].ends_with("(at byte 13 of the format)"), "{n:?}");
        assert!(n[1].starts_with("3:1: access_log: not mapped: its format \"m\" did not map"), "{n:?}");
        assert!(n[2].starts_with("4:1: access_log: not mapped: the gateway writes one"), "{n:?}");
        let (_, n) = import("log_format m escape=xml '$status';");
        assert!(n[0].contains("escape= takes default, json or none"), "{n:?}");
        let (_, n) = import("access_log syslog:server=x;");
        assert!(n[0].contains("syslog is not built"), "{n:?}");
        let (_, n) = import("access_log /a.log nope;");
        assert!(n[0].contains("no log_format \"nope\""), "{n:?}");
        let (t, n) = import("access_log logs/access.log combined;");
        assert!(t.unwrap().contains("output = \"logs/access.log\""));
        assert!(n[0].contains("mapped differently: a relative path"), "{n:?}");
        // A server's or a location's own log.
        let (_, n) = import("server { listen 80; access_log off; location / { return 204; } }");
        assert!(n[0].starts_with("2:21: access_log: not mapped: the gateway writes one access log"), "{n:?}");
    }
}
