//! `parity`: each fixture of `e2e/parity/` (an nginx.conf `http` body with `@LISTEN@`, `@UP1@`,
//! `@UP1B@`, `@UP2@`, `@SLOW@` and `@DEAD@` for addresses) run by a real Nginx and, through
//! `gateway import-nginx`, by the gateway, both in front of the same stand-in upstreams (they
//! answer with what they received: method, URI, Host, the fixtures' headers, the body's hash;
//! `@SLOW@` after 1 s; `@DEAD@` refuses), and `@STATIC@`, a folder of files both serve
//! (`static_files`, every mtime 2024-01-01 00:00:00 UTC so a fixture can name their `ETag`s),
//! `@MIME_TYPES@`, this Nginx's own `mime.types`; every request of the fixture in each of its forms
//! (`e2e::parity::variants`) sent to both; their answers compared, and their `combined` access
//! lines (both write one; the gateway's `[access_log]` from the import of Nginx's). Prints each
//! difference and `parity: N of M identical`; exits 1 below `--min-percent` (of the answers).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::Parser;
use e2e::parity::{self, Request};
use ring::digest;

#[derive(Parser)]
#[command(about = "The gateway beside a real Nginx, request by request")]
struct Args {
    /// The fixtures' folder.
    #[arg(long, default_value = "e2e/parity")]
    fixtures: PathBuf,
    /// The gateway binary.
    #[arg(long)]
    gateway: PathBuf,
    /// Nginx.
    #[arg(long, default_value = "nginx")]
    nginx: PathBuf,
    /// Where each fixture's files go (confs, logs, import notes).
    #[arg(long)]
    work: PathBuf,
    /// Fail below this share of identical answers.
    #[arg(long, default_value_t = 98.0)]
    min_percent: f64,
}

/// A child ended when dropped: SIGTERM (Nginx's master then stops its workers), SIGKILL after 5 s.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        for _ in 0..50 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&args.fixtures)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "conf"))
        .collect();
    fixtures.sort();
    let (mut same, mut all, mut log_same, mut log_all) = (0, 0, 0, 0);
    for f in &fixtures {
        let ((s, n), (ls, ln)) = fixture(&args, f).await?;
        (same, all, log_same, log_all) = (same + s, all + n, log_same + ls, log_all + ln);
    }
    let percent = 100.0 * same as f64 / all.max(1) as f64;
    println!("access log: {log_same} of {log_all} combined lines identical (time aside; bytes of error pages and compressed bodies aside)");
    println!("parity: {same} of {all} identical ({percent:.1} %, {} fixtures)", fixtures.len());
    std::process::exit(if all > 0 && percent >= args.min_percent { 0 } else { 1 });
}

/// One fixture: its servers up, its corpus sent to both; (identical, sent) of the answers and
/// of the access lines.
async fn fixture(args: &Args, path: &Path) -> anyhow::Result<((usize, usize), (usize, usize))> {
    let name = path.file_stem().unwrap_or_default().to_string_lossy().to_string();
    let work = args.work.join(&name);
    std::fs::create_dir_all(work.join("tmp"))?;
    // Absolute: Nginx reads the paths of its conf relative to its prefix (-p).
    let work = work.canonicalize()?;
    let text = std::fs::read_to_string(path)?;
    let ups = [echo("up1", 0).await?, echo("up1", 0).await?, echo("up2", 0).await?, echo("slow", 1).await?];
    let dead = free_port()?;
    let (nport, gport) = (free_port()?, free_port()?);
    let addrs =
        [format!("127.0.0.1:{nport}"), ups[1].clone(), ups[0].clone(), ups[2].clone(), ups[3].clone()];
    let body = fill(&text, &addrs, dead, args, &work)?;
    let conf = work.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(&work, &body))?;
    let nginx_log = std::fs::File::create(work.join("nginx.stderr"))?;
    let _nginx =
        Proc(Command::new(&args.nginx).arg("-p").arg(&work).arg("-c").arg(&conf).stderr(nginx_log).spawn()?);
    let import = Command::new(&args.gateway)
        .arg("import-nginx")
        .arg(&conf)
        .arg("--out")
        .arg(work.join("server.toml"))
        .output()?;
    std::fs::write(work.join("import.log"), &import.stderr)?;
    anyhow::ensure!(
        import.status.success(),
        "{name}: import-nginx failed: {}",
        String::from_utf8_lossy(&import.stderr)
    );
    let (nlog, glog) = (work.join("nginx-access.log"), work.join("gateway-access.log"));
    let toml = std::fs::read_to_string(work.join("server.toml"))?
        .replace(&format!("listen = \"127.0.0.1:{nport}\""), &format!("listen = \"127.0.0.1:{gport}\""))
        .replace(&nlog.display().to_string(), &glog.display().to_string());
    std::fs::write(work.join("server.toml"), toml)?;
    let log = std::fs::File::create(work.join("gateway.log"))?;
    let _gateway = Proc(
        Command::new(&args.gateway)
            .arg("--conf")
            .arg(work.join("server.toml"))
            .stderr(log)
            .stdout(Stdio::null())
            .spawn()?,
    );
    for port in [nport, gport] {
        wait_port(port).await.map_err(|e| anyhow::anyhow!("{name}: {e} (logs in {})", work.display()))?;
    }
    let mut corpus: Vec<Request> =
        parity::base_requests(&text, &name).iter().flat_map(parity::variants).collect();
    corpus.retain(|r| !r.target.is_empty());
    let alike = send_corpus(nport, gport, &corpus).await;
    let same = alike.iter().flatten().count();
    println!("{name}: {same} of {} identical", corpus.len());
    let logs = compare_logs(&name, &nlog, &glog, &corpus, &alike).await?;
    Ok(((same, corpus.len()), logs))
}

/// Sends every request to Nginx, then to the gateway, and compares the answers: for each,
/// `Some(whether its body's bytes are the same in both access lines)` when identical.
async fn send_corpus(nport: u16, gport: u16, corpus: &[Request]) -> Vec<Option<bool>> {
    let mut alike = Vec::with_capacity(corpus.len());
    for req in corpus {
        let n = parity::send(&format!("127.0.0.1:{nport}"), req).await;
        let g = parity::send(&format!("127.0.0.1:{gport}"), req).await;
        let diff = parity::differences(&n, &g);
        if diff.is_empty() {
            alike.push(Some(matches!(n.status, 200 | 206) && !n.headers.contains_key("content-encoding")));
        } else {
            println!("differs: {}: {}", req.label, diff.join("; "));
            alike.push(None);
        }
    }
    alike
}

/// The two servers' `combined` access lines, request by request: for each request whose
/// answers were identical (`alike`: `Some(whether its body's bytes count)`), every field but the
/// time; (identical, compared).
async fn compare_logs(
    name: &str,
    nginx: &Path,
    gateway: &Path,
    corpus: &[Request],
    alike: &[Option<bool>],
) -> anyhow::Result<(usize, usize)> {
    // The gateway's writer takes its lines every 100 ms.
    let read = |p: &Path| {
        std::fs::read_to_string(p).unwrap_or_default().lines().map(String::from).collect::<Vec<_>>()
    };
    let mut lines = (read(nginx), read(gateway));
    for _ in 0..20 {
        if lines.1.len() >= corpus.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        lines = (read(nginx), read(gateway));
    }
    let (n, g) = lines;
    if n.len() != corpus.len() || g.len() != corpus.len() {
        println!(
            "{name}: access lines not compared: {} (nginx), {} (gateway) for {} requests",
            n.len(),
            g.len(),
            corpus.len()
        );
        return Ok((0, 0));
    }
    let (mut same, mut compared) = (0, 0);
    for (i, bytes) in alike.iter().enumerate() {
        let Some(bytes) = bytes else { continue };
        compared += 1;
        let diff = parity::log_differences(&n[i], &g[i], *bytes);
        if diff.is_empty() {
            same += 1;
        } else {
            println!("access line differs: {}: {}", corpus[i].label, diff.join("; "));
        }
    }
    println!("{name}: access lines {same} of {compared} identical");
    Ok((same, compared))
}

/// The fixture's text with its placeholders filled: `addrs` are `@LISTEN@`, `@UP1B@`, `@UP1@`,
/// `@UP2@`, `@SLOW@`; `dead` is `@DEAD@`'s port; `@STATIC@` and `@MIME_TYPES@` when used.
fn fill(text: &str, addrs: &[String; 5], dead: u16, args: &Args, work: &Path) -> anyhow::Result<String> {
    let mut body = text.to_string();
    for (place, addr) in ["@LISTEN@", "@UP1B@", "@UP1@", "@UP2@", "@SLOW@"].iter().zip(addrs) {
        body = body.replace(place, addr);
    }
    body = body.replace("@DEAD@", &format!("127.0.0.1:{dead}"));
    if body.contains("@STATIC@") {
        body = body.replace("@STATIC@", &static_files(work)?.display().to_string());
    }
    if body.contains("@MIME_TYPES@") {
        body = body.replace("@MIME_TYPES@", &mime_types(&args.nginx)?);
    }
    Ok(body)
}

fn nginx_conf(work: &Path, body: &str) -> String {
    let w = work.display();
    format!(
        "worker_processes 1;\ndaemon off;\npid {w}/nginx.pid;\nerror_log {w}/error.log warn;\n\
         events {{ worker_connections 256; }}\nhttp {{\n  access_log {w}/nginx-access.log;\n  \
         client_body_temp_path {w}/tmp/body;\n  proxy_temp_path {w}/tmp/proxy;\n  \
         fastcgi_temp_path {w}/tmp/fastcgi;\n  uwsgi_temp_path {w}/tmp/uwsgi;\n  scgi_temp_path {w}/tmp/scgi;\n\
         {body}\n}}\n"
    )
}

/// The mtime of every file of `@STATIC@`: 2024-01-01 00:00:00 UTC (`ETag` `"65920080-<size hex>"`).
const STATIC_MTIME: u64 = 1_704_067_200;

/// `@STATIC@`: a folder under `work` with a page, a style sheet, a script, PNG bytes, a file
/// past 256 KB, one without extension, a subfolder with `index.html`, one without, and the
/// folders the fixture's locations name; every mtime [`STATIC_MTIME`].
fn static_files(work: &Path) -> anyhow::Result<PathBuf> {
    let dir = work.join("static");
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
    let big: Vec<u8> = (0..300 * 1024).map(|i: u32| (i % 253) as u8).collect();
    let files: [(&str, &[u8]); 11] = [
        ("index.html", b"<html><body>home</body></html>\n"),
        ("style.css", b"body { color: #333; }\n"),
        ("app.js", b"console.log('shop');\n"),
        ("logo.png", png),
        ("big.bin", &big),
        ("readme", b"no extension\n"),
        ("sub/index.html", b"<html>sub</html>\n"),
        ("nodex/note.txt", b"a folder without index\n"),
        ("app/main.js", b"main();\n"),
        ("strict/ok.txt", b"ok\n"),
        ("strict/deeper/x.txt", b"x\n"),
    ];
    let when = std::time::UNIX_EPOCH + Duration::from_secs(STATIC_MTIME);
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
        std::fs::write(&path, bytes)?;
        std::fs::File::options().write(true).open(&path)?.set_modified(when)?;
    }
    Ok(dir)
}

/// The `mime.types` beside this Nginx's own nginx.conf (its `--conf-path`).
fn mime_types(nginx: &Path) -> anyhow::Result<String> {
    let v = Command::new(nginx).arg("-V").output()?;
    let text = String::from_utf8_lossy(&v.stderr);
    let conf = text.split_whitespace().find_map(|a| a.strip_prefix("--conf-path="));
    let conf = conf.ok_or_else(|| anyhow::anyhow!("{} -V names no --conf-path", nginx.display()))?;
    Ok(Path::new(conf).with_file_name("mime.types").display().to_string())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn wait_port(port: u16) -> anyhow::Result<()> {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("nothing listens on {port} after 10 s")
}

/// A stand-in upstream answering, after `delay_secs`, with what it received; `X-Secret` in
/// every answer (for `proxy_hide_header`). Its address.
async fn echo(name: &'static str, delay_secs: u64) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| async move {
        tokio::time::sleep(Duration::from_secs(delay_secs)).await;
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, 4 << 20).await.unwrap_or_default();
        let h = |k: &str| parts.headers.get(k).and_then(|v| v.to_str().ok()).map(String::from);
        let seen = serde_json::json!({
            "up": name, "method": parts.method.as_str(), "uri": parts.uri.to_string(), "host": h("host"),
            "x-outer": h("x-outer"), "x-inner": h("x-inner"), "x-removed": h("x-removed"),
            "x-client": h("x-client"),
            "body_sha256": hex::encode(digest::digest(&digest::SHA256, &bytes)),
        });
        let path = parts.uri.path();
        // The type by the path's extension (for the gzip fixture's `gzip_types`); `/tiny` paths
        // answer a body below `gzip_min_length`'s default.
        let kind = [
            (".css", "text/css"),
            (".html", "text/html"),
            (".js", "application/javascript"),
            (".png", "image/png"),
        ]
        .into_iter()
        .find(|(ext, _)| path.ends_with(ext))
        .map_or("application/json", |(_, t)| t);
        let body = if path.contains("/tiny") { "tiny".to_string() } else { seen.to_string() };
        ([("x-secret", "s"), ("content-type", kind)], body)
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}
