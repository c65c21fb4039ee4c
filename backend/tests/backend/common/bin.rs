//! Running the `order-writer` binary of this build against an [`Env`]: its configuration file
//! and its command line.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::Env;

/// The `order-writer` binary of this build.
pub const BIN: &str = env!("CARGO_BIN_EXE_order-writer");

/// Writes an `order-writer.toml` for `env` (a free listen port, writer batches of `batch`)
/// and returns its path.
pub fn write_conf(env: &Env, batch: usize) -> std::path::PathBuf {
    let port = fixtures::stack::free_port();
    let text = format!(
        r#"listen = "127.0.0.1:{port}"
redis_url = "{redis}"
postgres_url = "{pg}"
campaigns_dir = "campaigns"
gateway_key = "env:OW_TEST_GATEWAY_KEY"
payment_key = "env:OW_TEST_PAYMENT_KEY"

[kafka]
brokers = ["{kafka}"]
topic = "{topic}"
partitions = {partitions}

[writer]
batch_size = {batch}

[sweeper]
age_secs = 6
interval_ms = 200
"#,
        redis = fixtures::stack::redis_url(),
        pg = env.pg_url,
        kafka = fixtures::stack::kafka_broker(),
        topic = env.topic,
        partitions = env.partitions,
    );
    let path = env.dir.join("order-writer.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `order-writer --conf <conf> <args>`, with the keys the conf refers to in its environment.
pub fn command(conf: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--conf")
        .arg(conf)
        .args(args)
        .env("OW_TEST_GATEWAY_KEY", String::from_utf8_lossy(super::GATEWAY_KEY).to_string())
        .env("OW_TEST_PAYMENT_KEY", String::from_utf8_lossy(super::PAYMENT_KEY).to_string());
    cmd
}

/// Starts `order-writer --conf <conf> <args>` (warnings on stderr). The process is killed
/// when the handle is dropped, so a failing test leaves no writer behind.
pub fn spawn(conf: &Path, args: &[&str]) -> Running {
    Running(
        command(conf, args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

/// A started `order-writer`, killed (SIGKILL) and reaped on drop unless it already ended.
pub struct Running(Child);

impl From<Child> for Running {
    fn from(child: Child) -> Running {
        Running(child)
    }
}

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // std sends no signal to a child it has already reaped.
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
