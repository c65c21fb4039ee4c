//! A route that serves files from a folder in place of proxying: Nginx's `root` or `alias`,
//! `index`, `try_files` and `default_type` (served by `crate::files`).

use std::path::PathBuf;

use protocol::conf::ConfError;
use toml::Spanned;

use super::matching::Location;
use super::{Checker, RawRoute};

/// How a route maps its paths to files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// The folder, resolved at load (symlinks followed): no file outside it is served.
    pub dir: PathBuf,
    /// For `alias`: the route's prefix, replaced by the folder; `None` for `root` (the folder
    /// followed by the whole path, as Nginx's `root`).
    pub alias_of: Option<String>,
    /// The files tried for a path ending in `/` (Nginx's `index`; default `index.html`).
    pub index: Vec<String>,
    /// Nginx's `try_files`: the candidates (`$uri`, `$uri/`, a path), then the last one: a path
    /// served in their place, or `=CODE`. Empty: none.
    pub try_files: Vec<String>,
    /// The type of a file whose extension the built-in table does not know.
    pub default_type: String,
}

/// Reads the route's file keys (`None` when it has neither `root` nor `alias`).
pub(super) fn check(
    c: &Checker<'_>,
    prefix: &str,
    r: &RawRoute,
    location: &Location,
) -> Result<Option<Files>, ConfError> {
    let f = |name: &str| format!("{prefix}.{name}");
    let (folder, alias_of) = match (&r.root, &r.alias) {
        (Some(_), Some(a)) => return Err(c.err(a.span(), &f("alias"), "give `root` or `alias`, not both")),
        (Some(root), None) => (root, None),
        (None, Some(alias)) => match location.prefix() {
            Some(p) if !matches!(location, Location::Exact(_)) => (alias, Some(p.to_string())),
            _ => return Err(c.err(
                alias.span(),
                &f("alias"),
                "`alias` replaces a prefix path: use it on `path = \"/prefix/\"` (or `^~`), or use `root`",
            )),
        },
        (None, None) => {
            for (key, given) in [
                ("index", r.index.as_ref().map(|v| v.span())),
                ("try_files", r.try_files.as_ref().map(|v| v.span())),
                ("default_type", r.default_type.as_ref().map(|v| v.span())),
            ] {
                if let Some(span) = given {
                    return Err(c.err(span, &f(key), "serves files: give `root` or `alias` too"));
                }
            }
            return Ok(None);
        }
    };
    let field = if alias_of.is_some() { f("alias") } else { f("root") };
    let dir = c.base().join(folder.get_ref());
    let dir = match std::fs::canonicalize(&dir) {
        Ok(d) if d.is_dir() => d,
        Ok(_) => return Err(c.err(folder.span(), &field, format!("{} is not a folder", dir.display()))),
        Err(e) => return Err(c.err(folder.span(), &field, format!("cannot open {}: {e}", dir.display()))),
    };
    let index = match &r.index {
        Some(list) => names(c, &f("index"), list)?,
        None => vec!["index.html".to_string()],
    };
    let try_files = match &r.try_files {
        Some(list) => try_files(c, &f("try_files"), list)?,
        None => Vec::new(),
    };
    let default_type = match &r.default_type {
        Some(t) if http::HeaderValue::from_str(t.get_ref()).is_ok() && !t.get_ref().is_empty() => {
            t.get_ref().clone()
        }
        Some(t) => return Err(c.err(t.span(), &f("default_type"), "not a header value")),
        None => "application/octet-stream".to_string(),
    };
    Ok(Some(Files { dir, alias_of, index, try_files, default_type }))
}

/// `index`: file names (no `/`, not `.` or `..`).
fn names(
    c: &Checker<'_>,
    field: &str,
    list: &Spanned<Vec<Spanned<String>>>,
) -> Result<Vec<String>, ConfError> {
    let mut out = Vec::new();
    for n in list.get_ref() {
        let name = n.get_ref();
        if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('$') {
            return Err(c.err(n.span(), field, format!("{name:?} is not a file name (no `/`, no variable)")));
        }
        out.push(name.clone());
    }
    Ok(out)
}

/// `try_files`: at least two entries; each a path from `/` or `$uri` (then what follows), with
/// no `..` and no other variable; the last may be `=CODE` (a status 200..599).
fn try_files(
    c: &Checker<'_>,
    field: &str,
    list: &Spanned<Vec<Spanned<String>>>,
) -> Result<Vec<String>, ConfError> {
    let items = list.get_ref();
    if items.len() < 2 {
        return Err(c.err(
            list.span(),
            field,
            "needs the candidates and the last resort: [\"$uri\", \"$uri/\", \"/index.html\"] (or \"=404\")",
        ));
    }
    for (i, item) in items.iter().enumerate() {
        let t = item.get_ref();
        let last = i + 1 == items.len();
        if let Some(code) = t.strip_prefix('=') {
            match code.parse::<u16>() {
                Ok(200..=599) if last => continue,
                _ => {
                    return Err(c.err(
                        item.span(),
                        field,
                        "`=CODE` is the last entry, CODE between 200 and 599",
                    ))
                }
            }
        }
        let rest = t.strip_prefix("$uri").unwrap_or(t);
        let from_uri = rest.len() < t.len();
        let ok = (from_uri || t.starts_with('/'))
            && !rest.contains('$')
            && !rest.split('/').any(|s| s == ".." || s == ".")
            && !rest.contains('?');
        if !ok {
            return Err(c.err(
                item.span(),
                field,
                format!("{t:?}: a path from / or $uri, without other variables, `..` or a query"),
            ));
        }
    }
    Ok(items.iter().map(|s| s.get_ref().clone()).collect())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// A folder with a `static/` folder and a file `f`, for the server file `s.toml` in it.
    fn base() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gateway-conf-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("static")).unwrap();
        std::fs::write(dir.join("f"), "").unwrap();
        dir
    }

    /// Lines: 1 [server], 2 listen, 3 [[route]], 4 name, 5 path, then `extra`'s lines.
    fn file(path: &str, extra: &str) -> String {
        format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\n[[route]]\nname = \"r\"\npath = \"{path}\"\n{extra}\n"
        )
    }

    fn parse(text: &str) -> Result<crate::conf::ServerConf, protocol::conf::ConfError> {
        crate::conf::parse_server(&base().join("s.toml"), text)
    }

    fn refused(text: &str, line: usize, field: &str, words: &str) {
        let file = base().join("s.toml");
        protocol::conf::assert_refused(parse(text), &file.display().to_string(), line, field, words);
    }

    #[test]
    fn a_files_route_reads_its_folder_and_defaults() {
        let c = parse(&file("/", "root = \"static\"")).unwrap();
        let f = c.routes[0].files.clone().unwrap();
        assert_eq!(f.dir, base().join("static").canonicalize().unwrap(), "from the server file's folder");
        assert_eq!(
            (f.index, f.alias_of, f.default_type.as_str()),
            (vec!["index.html".to_string()], None, "application/octet-stream")
        );
        assert!(c.routes[0].pool.is_none());
        let c = parse(&file(
            "/assets/",
            "alias = \"static\"\nindex = [\"home.html\"]\ntry_files = [\"$uri\", \"$uri/\", \"=404\"]\ndefault_type = \"text/plain\"",
        ))
        .unwrap();
        let f = c.routes[0].files.clone().unwrap();
        assert_eq!(f.alias_of.as_deref(), Some("/assets/"));
        assert_eq!(f.try_files, ["$uri", "$uri/", "=404"]);
        assert_eq!(f.index, ["home.html"]);
    }

    #[test]
    fn bad_files_keys_are_refused_at_their_place() {
        refused(&file("/", "root = \"nowhere\""), 6, "route[0].root", "cannot open");
        refused(&file("/", "root = \"f\""), 6, "route[0].root", "not a folder");
        refused(&file("/", "root = \"static\"\nalias = \"static\""), 7, "route[0].alias", "not both");
        refused(&file("~ x", "alias = \"static\""), 6, "route[0].alias", "replaces a prefix path");
        refused(&file("= /x", "alias = \"static\""), 6, "route[0].alias", "replaces a prefix path");
        refused(
            &file("/", "root = \"static\"\nupstreams = [\"127.0.0.1:1\"]"),
            7,
            "route[0].upstreams",
            "serves files",
        );
        refused(&file("/", "root = \"static\"\nreturn = \"204\""), 6, "route[0].root", "answers itself");
        refused(
            &file("/", "index = [\"a\"]\nupstreams = [\"127.0.0.1:1\"]"),
            6,
            "route[0].index",
            "give `root`",
        );
        refused(&file("/", "root = \"static\"\nindex = [\"a/b\"]"), 7, "route[0].index", "not a file name");
        refused(
            &file("/", "root = \"static\"\ntry_files = [\"$uri\"]"),
            7,
            "route[0].try_files",
            "last resort",
        );
        for bad in ["$args", "x", "/a/../b", "$uri?x", "=99", "=404\", \"/x"] {
            refused(
                &file("/", &format!("root = \"static\"\ntry_files = [\"{bad}\", \"/i\"]")),
                7,
                "route[0].try_files",
                "",
            );
        }
        refused(
            &file("/", "root = \"static\"\ndefault_type = \"\""),
            7,
            "route[0].default_type",
            "header value",
        );
    }
}
