//! `gateway --conf conf/server.toml [--lua-dir lua] [--check] [--upgrade]`, or
//! `gateway import-nginx nginx.conf [--out server.toml]`

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
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Read an nginx.conf (and its includes) and write the gateway's conf for what maps: the
    /// conf on stdout (or --out), a note per directive not mapped, or mapped differently, with
    /// its file:line:col on stderr.
    ImportNginx {
        /// The nginx.conf.
        file: PathBuf,
        /// Write the conf here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
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
    if let Some(Command::ImportNginx { file, out }) = &cli.command {
        return import_nginx(file, out.as_deref());
    }
    let opts = gateway::server::Options { lua_dir: cli.lua_dir, conf: cli.conf, upgrade: cli.upgrade };
    if cli.check {
        println!("{}", gateway::server::check(&opts)?);
        return Ok(());
    }
    gateway::server::run(&opts)
}

fn import_nginx(file: &std::path::Path, out: Option<&std::path::Path>) -> anyhow::Result<()> {
    let import = gateway::nginx::import_file(file).map_err(anyhow::Error::msg)?;
    for note in &import.notes {
        eprintln!("{note}");
    }
    let differently = import.notes.iter().filter(|n| n.mapped).count();
    eprintln!(
        "import-nginx: {} routes; {} directives not mapped, {differently} mapped differently (above)",
        import.toml.matches("[[route]]").count(),
        import.notes.len() - differently
    );
    match out {
        Some(path) => std::fs::write(path, &import.toml)?,
        None => print!("{}", import.toml),
    }
    Ok(())
}
