//! Command-line interface: the subcommands, their arguments, and their exit codes.
#![allow(clippy::print_stdout)]

mod demo;
mod tools;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

/// Success.
pub(crate) const EXIT_OK: u8 = 0;
/// The lock could not be had (held elsewhere or no quorum): try again later (EX_TEMPFAIL).
pub(crate) const EXIT_TEMPFAIL: u8 = 75;
/// Bad arguments (EX_USAGE).
pub(crate) const EXIT_USAGE: u8 = 64;
/// The token does not hold the lock (it expired, or the token is wrong).
pub(crate) const EXIT_NOT_HELD: u8 = 3;
/// Something else failed (EX_SOFTWARE).
pub(crate) const EXIT_SOFTWARE: u8 = 70;

/// Quorum locks over N independent Redis masters.
#[derive(Debug, Parser)]
#[command(name = "redquorum", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Log format on stderr (the level comes from RUST_LOG, default "info").
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    pub(crate) log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Human,
    Json,
}

/// Where the masters are.
#[derive(Debug, clap::Args)]
struct NodeArgs {
    /// Comma-separated node URLs: redis://[user:password@]host[:port][/db] or rediss://...
    #[arg(long, env = "REDQUORUM_NODES", value_delimiter = ',', required = true)]
    nodes: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start local redis-server masters, show a lock's life on them, and measure it.
    Demo {
        /// How many masters to start.
        #[arg(long, default_value_t = 5)]
        masters: usize,
        /// Uncontended acquire+release pairs to time.
        #[arg(long, default_value_t = 5000)]
        pairs: u32,
    },
    /// Take a lock and print its token; it stays held until its TTL (or `release`).
    Acquire {
        #[command(flatten)]
        nodes: NodeArgs,
        /// The lock's name.
        #[arg(long)]
        lock: String,
        /// How long the lock lives unless extended (e.g. 500ms, 30s, 2m).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// How long to keep trying (0s: one attempt).
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        wait: Duration,
    },
    /// Release a lock with the token `acquire` printed.
    Release {
        #[command(flatten)]
        nodes: NodeArgs,
        /// The lock's name.
        #[arg(long)]
        lock: String,
        /// The holder's token.
        #[arg(long, env = "REDQUORUM_TOKEN")]
        token: String,
    },
    /// Show whether a lock is held and each node's remaining TTL (never the holder's token).
    Status {
        #[command(flatten)]
        nodes: NodeArgs,
        /// The lock's name.
        #[arg(long)]
        lock: String,
    },
}

pub(crate) fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

pub(crate) async fn run(cli: Cli) -> ExitCode {
    let code = match cli.command {
        Command::Demo { masters, pairs } => demo::run(masters, pairs).await,
        Command::Acquire {
            nodes,
            lock,
            ttl,
            wait,
        } => tools::acquire(&nodes.nodes, &lock, ttl, wait).await,
        Command::Release { nodes, lock, token } => {
            tools::release(&nodes.nodes, &lock, &token).await
        }
        Command::Status { nodes, lock } => tools::status(&nodes.nodes, &lock).await,
    };
    ExitCode::from(code)
}

/// The exit code for a library error.
pub(crate) fn exit_code(error: &redquorum::Error) -> u8 {
    use redquorum::Error;
    match error {
        Error::InvalidArgument { .. } => EXIT_USAGE,
        Error::Contended { .. } | Error::QuorumUnavailable { .. } | Error::Timeout { .. } => {
            EXIT_TEMPFAIL
        }
        Error::LockLost { .. } | Error::NotHeld { .. } => EXIT_NOT_HELD,
        _ => EXIT_SOFTWARE,
    }
}
