//! Finding files as Nginx does, and what conditions and ranges make of them (the answers
//! themselves: the integration test `files` and the parity fixture `06-static`).

use std::path::{Path, PathBuf};

use http::{HeaderMap, Method};

use super::range::{decide, ranges, Part, Validators};
use super::*;

/// A folder of its own under the system's temporary folder: `index.html`, `a.css`, `sub/`
/// with an index, `empty/` without, and `nested/` with a file.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gateway-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in [
        ("index.html", "home"),
        ("a.css", "body{}"),
        ("sub/index.html", "sub"),
        ("empty/.keep", ""),
        ("nested/x.txt", "x"),
    ] {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir.canonicalize().unwrap()
}

fn files(dir: &Path, alias_of: Option<&str>, try_files: &[&str]) -> Files {
    Files {
        dir: dir.to_path_buf(),
        alias_of: alias_of.map(String::from),
        index: vec!["index.html".into()],
        try_files: try_files.iter().map(|s| s.to_string()).collect(),
        default_type: "application/octet-stream".into(),
    }
}

/// What `uri` is: `Ok(path found by)`, or the redirect's location (`"301 ..."`) or the status.
async fn what(f: &Files, uri: &str, method: Method) -> Result<String, String> {
    match find(f, uri, "q=1", &method).await {
        Found::File(_, _, by) => Ok(by),
        Found::Redirect(to) => Err(format!("301 {to}")),
        Found::Status(s) => Err(s.to_string()),
    }
}

#[tokio::test]
async fn paths_are_found_as_nginx_finds_them() {
    let dir = folder("root");
    let f = files(&dir, None, &[]);
    assert_eq!(what(&f, "/a.css", Method::GET).await, Ok("/a.css".into()));
    assert_eq!(what(&f, "/", Method::HEAD).await, Ok("/index.html".into()), "the index");
    assert_eq!(what(&f, "/sub/", Method::GET).await, Ok("/sub/index.html".into()));
    assert_eq!(what(&f, "/sub", Method::GET).await, Err("301 /sub/?q=1".into()), "a folder gets its slash");
    assert_eq!(what(&f, "/empty/", Method::GET).await, Err("403".into()), "no index, no listing");
    assert_eq!(what(&f, "/none/", Method::GET).await, Err("404".into()));
    assert_eq!(what(&f, "/missing", Method::GET).await, Err("404".into()));
    assert_eq!(what(&f, "/a.css/", Method::GET).await, Err("404".into()), "a file is not a folder");
    assert_eq!(what(&f, "/a.css", Method::POST).await, Err("405".into()), "POST up to a file: 405");
    assert_eq!(what(&f, "/missing", Method::POST).await, Err("404".into()), "as Nginx: 404 first");
    assert_eq!(what(&f, "/a.css", Method::DELETE).await, Err("405".into()));
    assert_eq!(what(&f, "/../etc/passwd", Method::GET).await, Err("404".into()), "no `..` in a path");
}

#[tokio::test]
async fn try_files_and_alias() {
    let dir = folder("try");
    let spa = files(&dir, None, &["$uri", "$uri/", "/index.html"]);
    assert_eq!(what(&spa, "/a.css", Method::GET).await, Ok("/a.css".into()));
    assert_eq!(what(&spa, "/deep/link", Method::GET).await, Ok("/index.html".into()), "the fallback");
    assert_eq!(
        what(&spa, "/sub", Method::GET).await,
        Err("301 /sub/?q=1".into()),
        "`$uri/` found: the path without its slash (Nginx's), a folder's 301"
    );
    let strict = files(&dir, None, &["$uri", "=404"]);
    assert_eq!(what(&strict, "/nope", Method::PUT).await, Err("404".into()), "try_files before the method");
    assert_eq!(what(&strict, "/sub/", Method::GET).await, Err("404".into()), "$uri: not a folder");
    let alias = files(&dir, Some("/static/"), &[]);
    assert_eq!(what(&alias, "/static/a.css", Method::GET).await, Ok("/static/a.css".into()));
    assert_eq!(what(&alias, "/static/", Method::GET).await, Ok("/static/index.html".into()));
    let bare = files(&dir, Some("/static"), &[]);
    assert_eq!(what(&bare, "/static/a.css", Method::GET).await, Ok("/static/a.css".into()));
    assert_eq!(what(&bare, "/staticx", Method::GET).await, Err("404".into()), "not Nginx's sibling folder");
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_out_of_the_folder_is_refused() {
    let dir = folder("links");
    let outside = folder("outside");
    std::os::unix::fs::symlink(outside.join("a.css"), dir.join("out.css")).unwrap();
    std::os::unix::fs::symlink(dir.join("a.css"), dir.join("in.css")).unwrap();
    let f = files(&dir, None, &[]);
    assert_eq!(what(&f, "/out.css", Method::GET).await, Err("403".into()));
    assert_eq!(what(&f, "/in.css", Method::GET).await, Ok("/in.css".into()), "inside: followed");
}

#[test]
fn ranges_as_nginx_parses_them() {
    assert_eq!(ranges("bytes=0-9", 100), Part::Range(0, 10));
    assert_eq!(ranges("BYTES=90-", 100), Part::Range(90, 100));
    assert_eq!(ranges("bytes=-5", 100), Part::Range(95, 100));
    assert_eq!(ranges("bytes=-500", 100), Part::Range(0, 100), "a suffix past the start: all of it");
    assert_eq!(ranges("bytes=0-999", 100), Part::Range(0, 100), "cut at the end");
    assert_eq!(ranges("bytes= 1 - 2 ", 100), Part::Range(1, 3), "spaces around the parts");
    assert_eq!(ranges("bytes=100-", 100), Part::Unsatisfiable);
    assert_eq!(ranges("bytes=-0", 100), Part::Unsatisfiable);
    assert_eq!(ranges("bytes=5-1", 100), Part::Unsatisfiable);
    assert_eq!(ranges("bytes=x", 100), Part::Unsatisfiable);
    assert_eq!(ranges("bytes=0-1,", 100), Part::Unsatisfiable);
    assert_eq!(ranges("bytes=99999999999999999999-", 100), Part::Unsatisfiable);
    assert_eq!(ranges("items=0-1", 100), Part::Whole, "another unit: ignored");
    assert_eq!(ranges("bytes=0-", 0), Part::Whole, "an empty file whole");
    assert_eq!(ranges("bytes=0-1,4-5", 100), Part::Ranges(vec![(0, 2), (4, 6)]));
    assert_eq!(ranges("bytes=0-99,0-99", 100), Part::Whole, "ranges adding up past the file: whole");
}

#[test]
fn conditions_as_nginx_decides_them() {
    let v = Validators { mtime: 1_704_067_200, len: 22 };
    assert_eq!(v.etag(), "\"65920080-16\"");
    let with = |pairs: &[(&str, &str)]| {
        let mut h = HeaderMap::new();
        for (k, val) in pairs {
            h.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), val.parse().unwrap());
        }
        decide(&h, &v)
    };
    let date = "Mon, 01 Jan 2024 00:00:00 GMT";
    let later = "Fri, 01 Jan 2100 00:00:00 GMT";
    assert_eq!(with(&[]), Part::Whole);
    assert_eq!(with(&[("if-modified-since", date)]), Part::NotModified);
    assert_eq!(with(&[("if-modified-since", later)]), Part::Whole, "exact, Nginx's default");
    assert_eq!(with(&[("if-none-match", "\"x\", W/\"65920080-16\"")]), Part::NotModified);
    assert_eq!(with(&[("if-none-match", "*")]), Part::NotModified);
    assert_eq!(with(&[("if-none-match", "\"x\"")]), Part::Whole);
    assert_eq!(
        with(&[("if-none-match", "\"x\""), ("if-modified-since", date)]),
        Part::Whole,
        "both must hold"
    );
    assert_eq!(with(&[("if-match", "\"x\"")]), Part::Failed);
    assert_eq!(with(&[("if-match", "\"65920080-16\"")]), Part::Whole);
    assert_eq!(with(&[("if-unmodified-since", "Sun, 31 Dec 2023 00:00:00 GMT")]), Part::Failed);
    assert_eq!(with(&[("if-unmodified-since", "not a date")]), Part::Failed, "Nginx's -1");
    assert_eq!(with(&[("if-unmodified-since", later)]), Part::Whole);
    assert_eq!(with(&[("range", "bytes=0-1"), ("if-range", "\"x\"")]), Part::Whole);
    assert_eq!(with(&[("range", "bytes=0-1"), ("if-range", "\"65920080-16\"")]), Part::Range(0, 2));
    assert_eq!(with(&[("range", "bytes=0-1"), ("if-range", date)]), Part::Range(0, 2));
    assert_eq!(with(&[("range", "bytes=0-1"), ("if-modified-since", date)]), Part::NotModified);
}

#[test]
fn a_multipart_body_is_as_long_as_it_says() {
    let (kind, pieces, len) = multipart("text/css", &[(0, 2), (4, 6)], 22);
    let boundary = kind.strip_prefix("multipart/byteranges; boundary=").unwrap();
    assert_eq!(boundary.len(), 20);
    let text: u64 = pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.len() as u64,
            Piece::Span(a, b) => b - a,
        })
        .sum();
    assert_eq!(text, len);
    assert!(matches!(&pieces[0], Piece::Text(t) if t.ends_with("Content-Range: bytes 0-1/22\r\n\r\n")));
}
