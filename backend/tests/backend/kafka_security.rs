//! The order writer against a secured Kafka, as a backend team's company cluster would be: the
//! stack's broker has a SASL_PLAINTEXT listener and a SASL_SSL one (its own CA), with PLAIN and
//! SCRAM-SHA-256/512 for one user. The `order-writer` binary, given `[kafka.tls]` and
//! `[kafka.sasl]` with the password by `file:` reference, creates and checks the topic and
//! produces signed records through each (PLAIN on the SASL_PLAINTEXT listener with the test
//! stack's `allow_plaintext = true`); a wrong password, a CA that did not sign the broker, a
//! plaintext client on the TLS port and PLAIN in the clear without the opt-in fail with an error
//! that says so, and produce nothing.

use crate::common;

use common::bin::{command, write_conf};
use common::Env;

fn stack_var(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: source .stack/env (e2e/stack.sh up kafka)"))
}

/// The env's conf file, its brokers replaced by `broker` and `extra` (TOML tables) appended.
fn secured_conf(env: &Env, broker: &str, extra: &str) -> std::path::PathBuf {
    let conf = write_conf(env, 10);
    let text = std::fs::read_to_string(&conf).unwrap();
    let plain = format!("brokers = [\"{}\"]", fixtures::stack::kafka_broker());
    assert!(text.contains(&plain));
    let text = text.replace(&plain, &format!("brokers = [\"{broker}\"]"));
    std::fs::write(&conf, format!("{text}\n{extra}")).unwrap();
    conf
}

/// `[kafka.sasl]` for the stack's user; PLAIN on the SASL_PLAINTEXT listener (no `tls`) opts in
/// with `allow_plaintext = true`, as a test stack must.
fn sasl(mechanism: &str, password_file: &str, tls: bool) -> String {
    let opt_in = if mechanism == "PLAIN" && !tls { "allow_plaintext = true\n" } else { "" };
    format!(
        "[kafka.sasl]\nmechanism = \"{mechanism}\"\nusername = \"{}\"\npassword = \"file:{password_file}\"\n{opt_in}",
        stack_var("SECKILL_KAFKA_SASL_USER")
    )
}

fn run(conf: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = command(conf, args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

async fn records_in_topic(env: &Env) -> i64 {
    env.end_offsets().await.iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_writer_produces_through_sasl_and_tls_with_every_mechanism() {
    let password = stack_var("SECKILL_KAFKA_SASL_PASSWORD_FILE");
    let tls = format!("[kafka.tls]\nca_file = \"{}\"\n", stack_var("SECKILL_KAFKA_CA_FILE"));
    let cases = [
        (stack_var("SECKILL_KAFKA_SASL_BROKER"), "PLAIN", String::new()),
        (stack_var("SECKILL_KAFKA_SASL_BROKER"), "SCRAM-SHA-256", String::new()),
        (stack_var("SECKILL_KAFKA_SASL_BROKER"), "SCRAM-SHA-512", String::new()),
        (stack_var("SECKILL_KAFKA_TLS_BROKER"), "PLAIN", tls.clone()),
        (stack_var("SECKILL_KAFKA_TLS_BROKER"), "SCRAM-SHA-512", tls.clone()),
    ];
    for (broker, mechanism, tls) in cases {
        let env = Env::new(10, 1, 2).await;
        let conf =
            secured_conf(&env, &broker, &format!("{tls}{}", sasl(mechanism, &password, !tls.is_empty())));
        let (ok, out) = run(&conf, &["topic", "create"]);
        assert!(ok && out.contains("already exists (2 partitions)"), "{broker} {mechanism}: {out}");
        let (ok, out) = run(&conf, &["produce", "--generate", "3", "--campaign", &env.campaign]);
        assert!(ok, "{broker} {mechanism}: {out}");
        assert_eq!(records_in_topic(&env).await, 3, "{broker} {mechanism}: three signed records acked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_or_certificate_is_refused_with_a_clear_error() {
    let env = Env::new(10, 1, 2).await;
    let dir = &env.dir;
    std::fs::write(dir.join("wrong.password"), "not-the-password\n").unwrap();
    let wrong = dir.join("wrong.password").display().to_string();
    let good = stack_var("SECKILL_KAFKA_SASL_PASSWORD_FILE");
    let sasl_broker = stack_var("SECKILL_KAFKA_SASL_BROKER");
    let tls_broker = stack_var("SECKILL_KAFKA_TLS_BROKER");

    for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
        let conf = secured_conf(&env, &sasl_broker, &sasl(mechanism, &wrong, false));
        let (ok, out) = run(&conf, &["topic", "create"]);
        assert!(!ok, "{mechanism}: a wrong password must not connect: {out}");
        assert!(out.contains(&sasl_broker) && out.to_lowercase().contains("auth"), "{mechanism}: {out}");
    }

    // A CA that did not sign the broker's certificate (made here, with openssl).
    let other_ca = dir.join("other-ca.pem");
    let status = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other"])
        .arg("-keyout")
        .arg(dir.join("other-ca.key"))
        .arg("-out")
        .arg(&other_ca)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let tls = format!("[kafka.tls]\nca_file = \"{}\"\n", other_ca.display());
    let conf = secured_conf(&env, &tls_broker, &format!("{tls}{}", sasl("SCRAM-SHA-512", &good, true)));
    let (ok, out) = run(&conf, &["topic", "create"]);
    assert!(!ok && out.contains(&tls_broker), "an unknown CA must not connect: {out}");
    assert!(out.contains("certificate") || out.contains("Certificate"), "{out}");

    // A file that is not PEM is a conf error with its place, before any connection.
    std::fs::write(dir.join("garbage.pem"), "not pem\n").unwrap();
    let tls = format!("[kafka.tls]\nca_file = \"{}\"\n", dir.join("garbage.pem").display());
    let conf = secured_conf(&env, &tls_broker, &tls);
    let (ok, out) = run(&conf, &["topic", "create"]);
    assert!(!ok && out.contains("order-writer.toml:") && out.contains("kafka.tls.ca_file"), "{out}");

    // PLAIN on the SASL_PLAINTEXT listener without the test stack's opt-in (`tls` true only to
    // leave `allow_plaintext` out): a conf error with its place, before any connection.
    let conf = secured_conf(&env, &sasl_broker, &sasl("PLAIN", &good, true));
    let (ok, out) = run(&conf, &["topic", "create"]);
    assert!(!ok && out.contains("order-writer.toml:") && out.contains("kafka.sasl.mechanism"), "{out}");
    assert!(out.contains("in the clear"), "{out}");
    assert_eq!(records_in_topic(&env).await, 0, "nothing was produced");
}
