//! `gateway --conf conf/server.toml [--lua-dir lua] [--check] [--upgrade]`

use std::path::PathBuf;

use clap::Parser;

/// The flash-sale edge: a reverse proxy in place of Nginx, with the reservation at the edge.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// The server file (TOML).
    #[arg(long, default_value = "conf/server.toml")]
    conf: PathBuf,
    /// Read the Lua scripts from this folder instead of the ones compiled in.
    #[arg(long)]
    lua_dir: Option<PathBuf>,
    /// Validate the conf and the scripts, print a summary and exit.
    #[arg(long)]
    check: bool,
    /// Zero-downtime upgrade: take the listening sockets of the running gateway over the
    /// upgrade socket (`[shutdown] upgrade_sock`), then send the old one SIGQUIT.
    #[arg(long)]
    upgrade: bool,
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One readable line (file:line:col: field ...), no backtrace.
            eprintln!("gateway: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    protocol::logging::init();
    let cli = Cli::parse();
    let opts = gateway::server::Options { lua_dir: cli.lua_dir, conf: cli.conf, upgrade: cli.upgrade };
    if cli.check {
        println!("{}", gateway::server::check(&opts)?);
        return Ok(());
    }
    gateway::server::run(&opts)
}
