//! A files route (`root`, `alias`, `try_files`) through the binary, on raw requests: types,
//! validators, 304, ranges (206, 416), HEAD, 405, a folder's 301, 404, paths that would
//! leave the folder refused, and a route limit.

use fixtures::raw_http::{send, Answer, Request};

use crate::support::*;

/// The folder served: a page, a style sheet, a file past 256 KB, a subfolder with an index, a
/// symlink to a file outside.
fn folder() -> (std::path::PathBuf, Vec<u8>) {
    let dir = temp_dir("files-");
    let big: Vec<u8> = (0..300 * 1024).map(|i: u32| (i % 251) as u8).collect();
    std::fs::create_dir_all(dir.join("www/sub")).unwrap();
    std::fs::write(dir.join("www/index.html"), "<p>home</p>").unwrap();
    std::fs::write(dir.join("www/a.css"), "body { color: red }").unwrap();
    std::fs::write(dir.join("www/big.bin"), &big).unwrap();
    std::fs::write(dir.join("www/sub/index.html"), "<p>sub</p>").unwrap();
    std::fs::write(dir.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), dir.join("www/out.txt")).unwrap();
    (dir, big)
}

async fn ask(gw: &Gateway, method: &str, target: &str, headers: &[(&str, &str)]) -> Answer {
    let req = Request {
        label: target.into(),
        method: method.into(),
        host: Some("shop.test".into()),
        target: target.into(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        body: Vec::new(),
        preface: Vec::new(),
    };
    send(gw.url("").trim_start_matches("http://"), &req).await
}

#[tokio::test]
async fn a_files_route_answers_as_nginx() {
    let (dir, big) = folder();
    let www = dir.join("www");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = 1\n\n[[route]]\nname = \"files\"\npath = \"/\"\n\
         root = {www:?}\nadd_header = {{ \"X-Added\" = \"yes\" }}\n\n\
         [[route]]\nname = \"app\"\npath = \"/app/\"\nalias = {www:?}\ntry_files = [\"$uri\", \"/app/index.html\"]\n\n\
         [[route]]\nname = \"limited\"\npath = \"/limited/\"\nalias = {www:?}\nlimit_req = {{ zone = \"ip\" }}\n\n\
         [[limit_req_zone]]\nname = \"ip\"\nkey = \"$binary_remote_addr\"\nrate = \"1r/m\"\n"
    );
    let gw = Gateway::start_text(&text).await;
    let a = ask(&gw, "GET", "/a.css", &[]).await;
    assert_eq!((a.status, a.body.as_slice()), (200, &b"body { color: red }"[..]), "{}", gw.log());
    let h = |a: &Answer, k: &str| a.headers.get(k).cloned().unwrap_or_default();
    assert_eq!(
        (h(&a, "content-type"), h(&a, "content-length"), h(&a, "x-added")),
        ("text/css".into(), "19".into(), "yes".into())
    );
    let (etag, modified) = (h(&a, "etag"), h(&a, "last-modified"));
    let mtime = std::fs::metadata(www.join("a.css")).unwrap().modified().unwrap();
    let secs = mtime.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(etag, format!("\"{secs:x}-13\""), "Nginx's ETag");
    assert!(modified.ends_with(" GMT"), "{modified}");

    let head = ask(&gw, "HEAD", "/a.css", &[]).await;
    assert_eq!((head.status, h(&head, "content-length"), head.body.len()), (200, "19".into(), 0));
    for cond in [("If-None-Match", etag.as_str()), ("If-Modified-Since", modified.as_str())] {
        let a = ask(&gw, "GET", "/a.css", &[cond]).await;
        assert_eq!((a.status, h(&a, "etag"), a.body.len()), (304, etag.clone(), 0), "{cond:?}");
    }
    assert_eq!(ask(&gw, "GET", "/a.css", &[("If-None-Match", "\"other\"")]).await.status, 200);

    let part = ask(&gw, "GET", "/big.bin", &[("Range", "bytes=10-19")]).await;
    assert_eq!((part.status, h(&part, "content-range")), (206, format!("bytes 10-19/{}", big.len())));
    assert_eq!(part.body, &big[10..20]);
    let none = ask(&gw, "GET", "/big.bin", &[("Range", "bytes=999999-")]).await;
    assert_eq!((none.status, h(&none, "content-range")), (416, format!("bytes */{}", big.len())));
    let whole = ask(&gw, "GET", "/big.bin", &[]).await;
    assert!(whole.status == 200 && whole.body == big, "streamed whole: {} bytes", whole.body.len());

    assert_eq!(ask(&gw, "GET", "/missing.css", &[]).await.status, 404);
    assert_eq!(ask(&gw, "DELETE", "/a.css", &[]).await.status, 405);
    assert_eq!(ask(&gw, "POST", "/a.css", &[]).await.status, 405);
    let sub = ask(&gw, "GET", "/sub?x=1", &[]).await;
    assert_eq!((sub.status, h(&sub, "location")), (301, "/sub/?x=1".into()));
    assert_eq!(ask(&gw, "GET", "/sub/", &[]).await.body, b"<p>sub</p>");
    assert_eq!(ask(&gw, "GET", "/app/deep/link", &[]).await.body, b"<p>home</p>", "try_files' fallback");
    assert_eq!(ask(&gw, "GET", "/app/a.css", &[]).await.body, b"body { color: red }", "alias");

    // Out of the folder: `..` above / (as sent, encoded, behind an encoded slash) is a 400
    // before any route; a symlink to a file outside answers 403.
    for target in
        ["/../secret.txt", "/%2e%2e/secret.txt", "/sub/..%2F..%2Fsecret.txt", "/app/..%2f..%2fsecret.txt"]
    {
        let a = ask(&gw, "GET", target, &[]).await;
        assert!(matches!(a.status, 400 | 404), "{target}: {}", a.status);
        assert!(!String::from_utf8_lossy(&a.body).contains("secret"), "{target}");
    }
    assert_eq!(ask(&gw, "GET", "/out.txt", &[]).await.status, 403);
    // A files route's limit_req, as a proxied route's: 1 a minute, then Nginx's 503.
    assert_eq!(ask(&gw, "GET", "/limited/a.css", &[]).await.status, 200);
    assert_eq!(ask(&gw, "GET", "/limited/a.css", &[]).await.status, 503);
    remove_unless_failed(&dir);
}
