//! The `splicer` binary: command line, configuration loading, logging and signals.
//!
//! # Layout
//! - `main`: the CLI (`run`, `check`, `hash-password`, `--version`) and start-up.
//! - `logs`: where the log and the access lines go, and their reopening on SIGUSR2;
//!   `access_line`: the Squid and combined formats of the access lines.
//! - `notify`: systemd's readiness protocol (`Type=notify`).
//! - `manpage`: `splicer man`, the man page generated from the command line.
//! - the proxy itself lives in `splicer-proxy`; the relay engines in `splicer-relay`.
#![forbid(unsafe_code)]
// A panic is not an error path: product code handles what it can and names why it cannot
// (each exception to these is allowed where it stands, with the invariant it rests on).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// Every dependency is used (checked for the binary itself, whose tests have dev-dependencies
// too; CI runs clippy with -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use splicer_proxy::{Config, Server};

mod access_line;
mod logs;
mod manpage;
mod notify;
use tracing_subscriber::EnvFilter;

/// What the binary was built with: the kernel engines or not.
#[cfg(feature = "bpf")]
const FEATURES: &str = "bpf (sockmap, ipsplice)";
#[cfg(not(feature = "bpf"))]
const FEATURES: &str = "no bpf (copy and pipe only)";

/// `splicer --version`: the version, the commit and the features.
fn long_version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        format!(
            "{} (commit {}; features: {FEATURES})",
            env!("CARGO_PKG_VERSION"),
            env!("SPLICER_COMMIT")
        )
    })
}

#[derive(Parser)]
#[command(
    name = "splicer",
    version = long_version(),
    about = "A split-connection TCP proxy that splices in the kernel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy (without --config: SOCKS5 on 127.0.0.1:1080, HTTP on 127.0.0.1:3128).
    Run {
        #[arg(long, short, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Validate a configuration file and exit.
    Check {
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
    },
    /// Read a password from standard input (up to the end of its first line) and print its
    /// Argon2id hash, for a `[[users]]` entry's `password`. It never echoes: type it after
    /// `read -rs P` and pass it with `printf %s "$P" | splicer hash-password`, or pipe it
    /// from a password manager.
    HashPassword,
    /// Print the man page (roff), as the Debian package installs it: `splicer man | man -l -`.
    #[command(hide = true)]
    Man,
}

/// The password on standard input: its first line, without the line's end.
fn read_password() -> anyhow::Result<Vec<u8>> {
    use std::io::BufRead;
    let mut line = Vec::new();
    std::io::stdin()
        .lock()
        .read_until(b'\n', &mut line)
        .context("cannot read the password from standard input")?;
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    anyhow::ensure!(!line.is_empty(), "no password on standard input");
    // What a SOCKS5 login can carry (RFC 1929) is what a user may have.
    anyhow::ensure!(line.len() <= 255, "a password is at most 255 bytes");
    Ok(line)
}

/// Reads and checks a configuration file: what `run` would refuse, `check` refuses (both
/// come through here). Every problem is reported, one a line, with its line in the file.
fn load(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let config = Config::from_toml(&text).map_err(|e| {
        let text = e.to_string();
        let lines: Vec<String> = text
            .lines()
            .map(|l| format!("{}: {l}", path.display()))
            .collect();
        anyhow::anyhow!("{}", lines.join("\n"))
    })?;
    // The logger's own parser, which `run` meets first.
    EnvFilter::try_new(&config.log.level)
        .map_err(|e| anyhow::anyhow!("{}: log.level: {e}", path.display()))?;
    Ok(config)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Man => {
            use std::io::Write;
            std::io::stdout().write_all(&manpage::render::<Cli>()?)?;
            Ok(())
        }
        Command::HashPassword => {
            let hash = splicer_proxy::credentials::hash_password(&read_password()?)?;
            println!("{hash}");
            Ok(())
        }
        Command::Check { config } => {
            let c = load(&config)?;
            let fronts: Vec<String> = c.all_listen_addresses().map(|a| a.to_string()).collect();
            println!(
                "{}: OK (listening on {}; engine {})",
                config.display(),
                fronts.join(", "),
                c.relay.engine
            );
            Ok(())
        }
        Command::Run { config: path } => {
            let config = match &path {
                Some(p) => load(p)?,
                None => Config::default(),
            };
            let files = logs::init(&config)?;
            match splicer_sys::process::raise_nofile_limit() {
                Ok(n) => tracing::debug!(nofile = n, "open-file limit"),
                Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .global_queue_interval(GLOBAL_QUEUE_INTERVAL)
                .build()?;
            runtime.block_on(run(config, path, files))
        }
    }
}

/// How often (in tasks run) a worker of the runtime takes a task from the shared queue
/// before its own. One wake-up of the reactor can make more connections ready than a
/// worker's own queue holds (256); tokio moves the newer half of that queue to the shared
/// one, which a worker otherwise looks at only every few dozen tasks (tuned to about
/// 200 µs of work), while the connections left in its own queue are served, become ready
/// again and go back in ahead of them. At 1,000 kept-alive clients of cache hits that
/// starved the moved connections: p99 40–52 ms against nginx's 25–27 on the same load.
/// Looking at the shared queue every second task serves them in turn (p99 26 ms, the rate
/// unchanged; docs/benchmarks.md, "Cache hits at 1,000 clients: the tail"). The queue is
/// empty under lighter loads, and looking at it then is one atomic load.
const GLOBAL_QUEUE_INTERVAL: u32 = 2;

async fn run(config: Config, path: Option<PathBuf>, files: logs::Files) -> anyhow::Result<()> {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = env!("SPLICER_COMMIT"),
        features = FEATURES,
        engine = %config.relay.engine,
        "splicer starting"
    );
    use tokio::signal::unix::{signal, SignalKind};
    // SIGHUP: the configuration file read again and, when it passes every check, swapped in
    // (the server logs what changed); the log files reopened, as logrotate's `kill -HUP`
    // expects. Watched before anything else starts: its default action ends the process.
    let (reload_tx, reloads) = tokio::sync::mpsc::channel(4);
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            let files = files.clone();
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    files.reopen();
                    let Some(path) = &path else {
                        tracing::warn!(
                            "SIGHUP: running the built-in configuration, no file to read again"
                        );
                        continue;
                    };
                    tracing::info!(file = %path.display(), "SIGHUP: reading the configuration");
                    match load(path) {
                        Ok(config) => {
                            let _ = reload_tx.send(config).await;
                        }
                        Err(e) => {
                            splicer_proxy::metrics::events().reloaded(false);
                            tracing::error!(
                                "configuration reload refused: {e}; the running configuration is kept"
                            );
                        }
                    }
                }
            });
        }
        Err(e) => tracing::warn!("cannot watch SIGHUP: {e}"),
    }
    // SIGUSR2: reopen the log files (logrotate's `postrotate`).
    match signal(SignalKind::user_defined2()) {
        Ok(mut usr2) => {
            tokio::spawn(async move {
                while usr2.recv().await.is_some() {
                    files.reopen();
                }
            });
        }
        Err(e) => tracing::warn!("cannot watch SIGUSR2: {e}"),
    }
    // Watched before READY=1: a service manager may stop the service as soon as it is
    // ready, and a SIGTERM that came before the watch killed the process undrained, without
    // STOPPING=1 (the service test saw it once in CI).
    let stop = stop_signals();
    let server = Server::bind(config).await?;
    // Listening: a `Type=notify` service is started (systemd's READY=1).
    notify::send("READY=1\nSTATUS=listening");
    // SIGUSR1: the relay's counters, without stopping.
    let relay = server.relay();
    tokio::spawn(async move {
        match signal(SignalKind::user_defined1()) {
            Ok(mut usr1) => {
                while usr1.recv().await.is_some() {
                    splicer_proxy::server::log_relay_counters(&relay);
                }
            }
            Err(e) => tracing::warn!("cannot watch SIGUSR1: {e}"),
        }
    });
    server
        .run(
            async {
                stop.await;
                notify::send("STOPPING=1\nSTATUS=draining open connections");
            },
            reloads,
        )
        .await;
    Ok(())
}

/// Watches SIGINT and SIGTERM from this call on; the future resolves on the first.
fn stop_signals() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let (term, int) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = int.recv() => tracing::info!("SIGINT received"),
                _ = term.recv() => tracing::info!("SIGTERM received"),
            },
            (Ok(mut term), Err(e)) => {
                tracing::warn!("cannot watch SIGINT: {e}");
                term.recv().await;
                tracing::info!("SIGTERM received");
            }
            (Err(e), Ok(mut int)) => {
                tracing::warn!("cannot watch SIGTERM: {e}");
                int.recv().await;
                tracing::info!("SIGINT received");
            }
            (Err(e), Err(_)) => {
                tracing::warn!("cannot watch SIGTERM or SIGINT: {e}");
                std::future::pending::<()>().await;
            }
        }
    }
}
