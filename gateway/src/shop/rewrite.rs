//! A route's `rewrite`s as Nginx's rewrite module runs a location's: in order, each on the URI
//! the previous left; `last` searches the routes again with the new URI, and so does the end of
//! the rewrites after one without a flag (unless the route has a `return`: it answers); `break`
//! keeps the route; `redirect` and `permanent` (or a replacement that is a URL) answer 302 and
//! 301. The routes are searched again at most [`MAX_SEARCHES`] times; one more is a 500, as
//! Nginx's "rewrite or internal redirection cycle".

use crate::conf::{RewriteFlag, RouteConf};
use crate::reload::Active;
use crate::template::Vars;

use super::with_args;

/// How many times a request's routes may be searched again after a rewrite (Nginx's 10).
pub const MAX_SEARCHES: usize = 10;

/// The URI as rewrites left it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewritten {
    /// The path (`$uri`).
    pub path: String,
    /// The query without `?` (`$args`).
    pub args: String,
    /// A `break` rewrote it: it goes upstream as it is, the route's `replace_prefix` aside.
    pub broke: bool,
}

/// What follows a route's rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The route keeps the request (no rewrite matched, or `break`).
    Stay,
    /// Search the routes again with the new URI.
    Search,
    /// Answer with a redirect to this URL or path.
    Redirect(u16, String),
}

/// Runs `route`'s rewrites over `uri`; `base` holds the request's other variables.
pub fn run(route: &RouteConf, base: &Vars<'_>, uri: &mut Rewritten) -> Step {
    let mut changed = false;
    for rw in &route.rewrites {
        let new = {
            let Some(caps) = rw.regex.regex().captures(&uri.path) else { continue };
            let vars = Vars { uri: &uri.path, args: &uri.args, ..base.clone() };
            with_args(rw.replacement.render(&vars, Some(&caps)), &uri.args)
        };
        if let Some(status) = rw.redirect {
            return Step::Redirect(status, new);
        }
        let (path, args) = new.split_once('?').unwrap_or((&new, ""));
        (uri.path, uri.args) = (path.to_string(), args.to_string());
        changed = true;
        match rw.flag {
            RewriteFlag::Last => return Step::Search,
            RewriteFlag::Break => {
                uri.broke = true;
                return Step::Stay;
            }
            _ => {}
        }
    }
    if changed && route.answer.is_none() {
        Step::Search
    } else {
        Step::Stay
    }
}

/// Where a request's rewrites end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// At this route, with the URI they left.
    Route(usize),
    /// A redirect of this route.
    Redirect(usize, u16, String),
    /// More than [`MAX_SEARCHES`] searches: a 500 of this route.
    Cycle(usize),
    /// No route has the new URI.
    NotFound,
}

/// Runs the rewrites of the route `at` the request was found at, searching the routes of
/// `active` again (by `host`) while the rewrites say so; `vars` gives a route's variables.
pub fn search<'a>(
    active: &Active,
    host: Option<&str>,
    mut at: usize,
    uri: &mut Rewritten,
    vars: impl Fn(&RouteConf) -> Vars<'a>,
) -> End {
    let mut searches = 0;
    loop {
        let Some(route) = active.server.routes.get(at) else { return End::NotFound };
        match run(route, &vars(route), uri) {
            Step::Stay => return End::Route(at),
            Step::Redirect(status, to) => return End::Redirect(at, status, to),
            Step::Search if searches == MAX_SEARCHES => return End::Cycle(at),
            Step::Search => {
                searches += 1;
                match active.routes.find(host, &uri.path) {
                    Some(i) => at = i,
                    None => return End::NotFound,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes of `text` (a server file's `[[route]]`s after a `[server]`).
    fn routes(text: &str) -> Vec<RouteConf> {
        let file = format!("[server]\nlisten = \"127.0.0.1:8080\"\n\n{text}");
        crate::conf::parse_server(std::path::Path::new("s.toml"), &file).unwrap().routes
    }

    fn vars() -> Vars<'static> {
        Vars { scheme: "http", host: "shop.test".into(), ..Vars::default() }
    }

    fn at(path: &str, args: &str) -> Rewritten {
        Rewritten { path: path.into(), args: args.into(), broke: false }
    }

    #[test]
    fn rewrites_run_in_order_and_their_flags_decide_what_follows() {
        let r = routes(
            "[[route]]\nname = \"a\"\npath = \"/\"\nupstreams = [\"127.0.0.1:1\"]\nrewrite = [\n\
             { regex = '^/n/(.*)$', replacement = '/m/$1', flag = \"none\" },\n\
             { regex = '^/m/(.*)$', replacement = '/k/$1?z=1', flag = \"none\" },\n\
             { regex = '^/l/(.*)$', replacement = '/d/$1', flag = \"last\" },\n\
             { regex = '^/b/(.*)$', replacement = '/e/$1' },\n\
             { regex = '^/r/(.*)$', replacement = '/x/$1', flag = \"redirect\" },\n\
             { regex = '^/p/(.*)$', replacement = 'https://$host/y/$1?', flag = \"permanent\" },\n\
             { regex = '^/u/(.*)$', replacement = '$scheme://ex.test/$1', flag = \"break\" },\n]\n",
        );
        let run = |path: &str, args: &str| {
            let mut uri = at(path, args);
            (run(&r[0], &vars(), &mut uri), uri)
        };
        // Two without a flag, one after the other, then a search with the new URI and query.
        assert_eq!(run("/n/q", "a=1"), (Step::Search, at("/k/q", "z=1&a=1")));
        assert_eq!(run("/l/q", ""), (Step::Search, at("/d/q", "")));
        let broke = Rewritten { broke: true, ..at("/e/q", "a=1") };
        assert_eq!(run("/b/q", "a=1"), (Step::Stay, broke), "no flag written: break");
        assert_eq!(run("/r/q", "a=1").0, Step::Redirect(302, "/x/q?a=1".into()));
        assert_eq!(run("/p/q", "a=1").0, Step::Redirect(301, "https://shop.test/y/q".into()));
        assert_eq!(run("/u/q", "").0, Step::Redirect(302, "http://ex.test/q".into()), "a URL redirects");
        assert_eq!(run("/other", "a=1"), (Step::Stay, at("/other", "a=1")));
    }

    #[test]
    fn a_return_after_rewrites_without_flag_answers_with_the_new_uri() {
        let r = routes(
            "[[route]]\nname = \"a\"\npath = \"/\"\nreturn = \"200 $uri\"\n\
             rewrite = { regex = '^/n(.*)$', replacement = '/m$1', flag = \"none\" }\n",
        );
        let mut uri = at("/n1", "");
        assert_eq!(run(&r[0], &vars(), &mut uri), Step::Stay);
        assert_eq!(uri.path, "/m1");
    }
}
