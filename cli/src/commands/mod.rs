//! Command-line interface: the subcommands, their arguments, and their exit codes.

mod bench;
mod config;
mod demo;
mod doctor;
mod help;
mod out;
mod run;
mod serve;
mod stop;
mod tools;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use help::{DOCTOR_HELP, RUN_HELP, SERVE_HELP};

/// Success.
pub(crate) const EXIT_OK: u8 = 0;
/// The lock could not be had (held elsewhere, or no answer in time): try again later
/// (EX_TEMPFAIL).
pub(crate) const EXIT_TEMPFAIL: u8 = 75;
/// No quorum of masters can grant the lock: too many are down, quarantined, replicas or
/// misconfigured, as the message says, master by master (EX_UNAVAILABLE).
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;
/// Bad arguments (EX_USAGE).
pub(crate) const EXIT_USAGE: u8 = 64;
/// The token does not hold the lock (it expired, or the token is wrong).
pub(crate) const EXIT_NOT_HELD: u8 = 3;
/// Something else failed (EX_SOFTWARE).
pub(crate) const EXIT_SOFTWARE: u8 = 70;
/// `run`: the lock was lost while the command ran, and the command was terminated.
pub(crate) const EXIT_LOCK_LOST: u8 = 76;
/// `doctor`: the deployment is not safe for the options given (EX_CONFIG).
pub(crate) const EXIT_UNSAFE: u8 = 78;
/// `run`: the command could not be started (not executable).
pub(crate) const EXIT_CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub(crate) const EXIT_NOT_FOUND: u8 = 127;

/// Quorum locks over N independent Redis masters.
#[derive(Debug, Parser)]
#[command(name = "redquorum", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Log format on stderr (the level comes from RUST_LOG, default "info").
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    pub(crate) log_format: LogFormat,

    /// Worker threads of the async runtime: 0 for one per CPU; 1 runs everything on one
    /// thread, which is faster when the masters share the machine's few cores.
    #[arg(long, env = "REDQUORUM_THREADS", default_value_t = 0, global = true,
          value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub(crate) threads: u16,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Human,
    Json,
}

impl LogFormat {
    /// The value of `--log-format` that gives this format.
    fn as_arg(self) -> &'static str {
        match self {
            LogFormat::Human => "human",
            LogFormat::Json => "json",
        }
    }
}

/// Where the masters are (`--nodes`, else `REDQUORUM_NODES`, else the config file's `nodes`)
/// and how the client treats them.
#[derive(Debug, clap::Args)]
struct NodeArgs {
    /// Comma-separated node URLs: redis://[user:password@]host[:port][/db] or rediss://...
    // The value may carry passwords: never echo it in --help.
    #[arg(
        long,
        env = "REDQUORUM_NODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    nodes: Vec<String>,
    /// A TOML file with `nodes = ["redis://...", ...]`, used when neither --nodes nor
    /// REDQUORUM_NODES is given.
    #[arg(long, env = "REDQUORUM_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Longest TTL accepted (default 24h).
    #[arg(long, env = "REDQUORUM_MAX_TTL", value_parser = humantime::parse_duration)]
    max_ttl: Option<Duration>,
    /// How long a master that lost its data (restarted without persistence, or flushed) grants
    /// nothing (default: the longest TTL asked for in the deployment, which the masters
    /// record). 0s turns quarantine off, which lets such a master vote for a second holder.
    #[arg(long, env = "REDQUORUM_QUARANTINE", value_parser = humantime::parse_duration)]
    quarantine: Option<Duration>,
    /// Count only nodes that run AOF with appendfsync always (--require-durable=false, or
    /// REDQUORUM_REQUIRE_DURABLE=false, turns off a config file's `require_durable = true`).
    // An Option, so that an explicit false from the flag or the environment beats the file.
    #[arg(
        long,
        env = "REDQUORUM_REQUIRE_DURABLE",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    require_durable: Option<bool>,
    /// A PEM file of the certificate authorities that rediss:// nodes' certificates must chain
    /// to (a private CA), instead of the web's root authorities.
    #[arg(long, env = "REDQUORUM_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
}

impl NodeArgs {
    /// The config file, if one was named.
    fn config(&self) -> Result<config::Config, String> {
        match &self.config {
            Some(path) => config::Config::load(path),
            None => Ok(config::Config::default()),
        }
    }

    /// A client builder from flags and environment, falling back on the config file.
    fn builder(&self, config: &config::Config) -> Result<redquorum::ClientBuilder, String> {
        let nodes = if !self.nodes.is_empty() {
            self.nodes.clone()
        } else if !config.nodes.is_empty() {
            config.nodes.clone()
        } else {
            return Err("no nodes given: pass --nodes URL[,URL...], set REDQUORUM_NODES, or point --config / REDQUORUM_CONFIG at a TOML file with `nodes = [...]`".to_owned());
        };
        let mut builder = redquorum::Client::builder().nodes(nodes).require_durable(
            self.require_durable
                .or(config.require_durable)
                .unwrap_or(false),
        );
        if let Some(max) = self.max_ttl.or(config.max_ttl) {
            builder = builder.max_ttl(max);
        }
        if let Some(period) = self.quarantine.or(config.quarantine) {
            builder = builder.quarantine(period);
        }
        if let Some(path) = self.tls_ca.as_ref().or(config.tls_ca.as_ref()) {
            let pem =
                std::fs::read(path).map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
            builder = builder.tls_root_certificates(pem);
        }
        Ok(builder)
    }

    /// The client, or the exit code after logging why there is none.
    fn client(&self) -> Result<redquorum::Client, u8> {
        let config = self.config().map_err(|m| usage(&m))?;
        build(self.builder(&config).map_err(|m| usage(&m))?)
    }
}

/// Builds a client, or logs why not and gives the exit code.
fn build(builder: redquorum::ClientBuilder) -> Result<redquorum::Client, u8> {
    builder.build().map_err(|e| {
        tracing::error!("{e}");
        exit_code(&e)
    })
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP lock coordinator (see docs/http-api.md), with Prometheus /metrics.
    #[command(after_long_help = SERVE_HELP)]
    Serve(serve::ServeArgs),
    /// Start local redis-server masters, show a lock's life on them, and measure it. SIGINT or
    /// SIGTERM stops the masters too (exit code 130 or 143).
    Demo {
        /// How many masters to start (1 to 31, as many as a client supports).
        // Checked here, before any master is started: a client refused 32 only after the
        // demo had started them all.
        #[arg(long, default_value_t = 5,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
                  .range(1..=redquorum::config::limits::MAX_NODES as u64))]
        masters: usize,
        /// Uncontended acquire+release pairs to time (at least 1).
        #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..))]
        pairs: u32,
    },
    /// Measure: round-trip floor, uncontended latency (N=3, N=5), 64-task throughput,
    /// contended handoff and the HTTP service, each next to its ratio to the floor.
    Bench {
        /// Masters to use (comma-separated); by default five local redis-server masters are
        /// started, and stopped afterwards or on SIGINT or SIGTERM (exit code 130 or 143);
        /// killed outright, the process takes them with it.
        #[arg(
            long,
            env = "REDQUORUM_BENCH_NODES",
            value_delimiter = ',',
            hide_env_values = true
        )]
        nodes: Vec<String>,
        /// Sequential pairs per uncontended figure.
        #[arg(long, default_value_t = 3000)]
        pairs: usize,
        /// Seconds each of the throughput and handoff figures runs.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Where to write the JSON lines.
        #[arg(long, default_value = "target/bench/bench.jsonl")]
        json: std::path::PathBuf,
    },
    /// Take a lock and print its token; it stays held until its TTL (or `release`). A stdout
    /// that is /dev/null (or closed) is refused before the lock is taken: the token would be
    /// lost.
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
    /// Release a lock with the token `acquire` printed (a mutex), or a `run`'s lock from inside
    /// its command (REDQUORUM_TOKEN, of the kind in REDQUORUM_KIND), or of the kind a flag
    /// gives.
    Release {
        #[command(flatten)]
        nodes: NodeArgs,
        /// The lock's name.
        #[arg(long)]
        lock: String,
        /// The holder's token.
        // Whoever has it can release the lock: never echo it in --help (inside a `run`, the
        // environment holds the run's token).
        #[arg(long, env = "REDQUORUM_TOKEN", hide_env_values = true)]
        token: String,
        #[command(flatten)]
        kind: tools::KindArgs,
    },
    /// Run a command while holding a lock, renewed in the background; release it when the
    /// command exits, and exit with the command's exit code.
    #[command(after_long_help = RUN_HELP)]
    Run {
        #[command(flatten)]
        nodes: NodeArgs,
        #[command(flatten)]
        locks: run::RunLocks,
        /// How long the lock lives on the nodes without renewal (renewed every TTL/3).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// How long to wait for the lock before giving up without running the command.
        #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
        wait: Duration,
        /// After the lock is lost and the command got SIGTERM, how long before SIGKILL.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        kill_after: Duration,
        /// The command and its arguments, best after `--`. Everything from the command's
        /// first word on is the command's, but that word itself may not start with '-':
        /// a mistyped flag (`--tll 5s`) is refused as one, before any lock is taken, instead
        /// of being run as the command.
        #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Check the masters before trusting them: reachable, independent masters, persistence,
    /// eviction policy, ACL permissions, round trip, clock offset and quarantine.
    #[command(after_long_help = DOCTOR_HELP)]
    Doctor {
        #[command(flatten)]
        nodes: NodeArgs,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Accept masters without AOF `appendfsync always` (a warning, not an error): locks
        /// stay safe, since a master that loses its data is quarantined, but fencing tokens
        /// may go back once such a master counts again.
        #[arg(long)]
        allow_non_durable: bool,
    },
    /// Show whether a lock is held and each node's remaining TTL (never the holder's token).
    /// Without a kind flag (or REDQUORUM_KIND, which `run` sets for its command), the name is
    /// looked up as a mutex or reentrant lock, a read-write lock and a semaphore, and shown as
    /// each kind that holds it.
    Status {
        #[command(flatten)]
        nodes: NodeArgs,
        /// The lock's name.
        #[arg(long)]
        lock: String,
        #[command(flatten)]
        kind: tools::KindArgs,
    },
}

impl Cli {
    /// The log level when RUST_LOG does not say: the measuring commands keep quiet, because
    /// per-request logs would be measured too.
    pub(crate) fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Bench { .. } | Command::Demo { .. } => "error",
            _ => "info",
        }
    }
}

pub(crate) fn init_tracing(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        // An event that cannot be written (stderr's reader gone, as in `2>&1 | head`) is
        // dropped: by default the subscriber reports that with `eprintln!` to the same stderr,
        // which panics, and the command would end with 101 instead of its own exit code.
        .log_internal_errors(false);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(target_os = "linux")]
pub(crate) use run::{LAUNCHER, launch};

pub(crate) async fn run(cli: Cli) -> ExitCode {
    let log_format = cli.log_format;
    let code = match cli.command {
        Command::Serve(args) => serve::serve(args).await,
        Command::Demo { masters, pairs } => demo::run(masters, pairs).await,
        Command::Bench {
            nodes,
            pairs,
            seconds,
            json,
        } => {
            let opts = redquorum_cli::bench::BenchOptions {
                nodes,
                pairs,
                throughput_for: Duration::from_secs(seconds),
                handoff_for: Duration::from_secs(seconds),
                ..redquorum_cli::bench::BenchOptions::default()
            };
            bench::run(opts, json).await
        }
        Command::Acquire {
            nodes,
            lock,
            ttl,
            wait,
        } => match nodes.client() {
            Ok(client) => flushed(&client, tools::acquire(&client, &lock, ttl, wait)).await,
            Err(code) => code,
        },
        Command::Release {
            nodes,
            lock,
            token,
            kind,
        } => match nodes.client() {
            Ok(client) => flushed(&client, tools::release(&client, &lock, &kind, &token)).await,
            Err(code) => code,
        },
        Command::Doctor {
            nodes,
            json,
            allow_non_durable,
        } => match nodes.client() {
            Ok(client) => doctor::run(&client, json, allow_non_durable).await,
            Err(code) => code,
        },
        Command::Status { nodes, lock, kind } => match nodes.client() {
            Ok(client) => tools::status(&client, &lock, &kind).await,
            Err(code) => code,
        },
        Command::Run {
            nodes,
            locks,
            ttl,
            wait,
            kill_after,
            command,
        } => match (locks.lock_set(), nodes.client()) {
            (Ok(set), Ok(client)) => {
                let running = run::run(&client, &set, ttl, wait, kill_after, &command, log_format);
                flushed(&client, running).await
            }
            (Err(message), _) => usage(&message),
            (_, Err(code)) => code,
        },
    };
    ExitCode::from(code)
}

/// `command`'s exit code, once what it left on its way to the masters has been answered: an
/// operation returns when its vote is decided, and this process exits right after, before a
/// release (or a give-back) to the slowest master has gone out on a connection still being
/// made, which would leave the lock's key there until its TTL.
async fn flushed(client: &redquorum::Client, command: impl std::future::Future<Output = u8>) -> u8 {
    let code = command.await;
    client.flush().await;
    code
}

fn usage(message: &str) -> u8 {
    tracing::error!("{message}");
    EXIT_USAGE
}

/// The exit code for a library error.
pub(crate) fn exit_code(error: &redquorum::Error) -> u8 {
    use redquorum::Error;
    match error {
        Error::InvalidArgument { .. } => EXIT_USAGE,
        Error::QuorumUnavailable { .. } => EXIT_UNAVAILABLE,
        Error::Contended { .. } | Error::ExtendUncertain { .. } | Error::Timeout { .. } => {
            EXIT_TEMPFAIL
        }
        Error::LockLost { .. } | Error::NotHeld { .. } => EXIT_NOT_HELD,
        _ => EXIT_SOFTWARE,
    }
}
