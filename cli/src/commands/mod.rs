//! Command-line interface: the subcommands, their arguments, and their exit codes.

mod bench;
mod config;
mod demo;
mod doctor;
mod out;
mod run;
mod run_releases;
mod serve;
mod stop;
mod tools;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

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

const SERVE_HELP: &str = "\
Try it with nothing configured (starts 3 local redis-server masters, stopped on exit):
  redquorum serve --dev
  curl -s -X POST localhost:7700/v1/locks/demo -d '{\"ttl_ms\": 30000}'

Settings come from flags, else environment variables, else the --config TOML file, else
defaults. The bearer token comes from REDQUORUM_AUTH_TOKEN, else --auth-token-file. Without
a token the server only listens on loopback addresses, unless --allow-unauthenticated.
SIGINT or SIGTERM: stop accepting, end sessions by releasing their locks, finish requests in
flight, exit (and stop the --dev masters).";

const DOCTOR_HELP: &str = "\
Example, with the options the clients will use:
  redquorum doctor --nodes redis://a:6379,redis://b:6379,redis://c:6379 --max-ttl 5m

Errors (unsafe): a master unreachable, a replica, the same server listed twice, a
maxmemory-policy other than noeviction, a command or key prefix the ACL denies, fewer masters
able to vote than the quorum, and a master without durable persistence (appendonly yes and
appendfsync always), which --allow-non-durable makes a warning (with --require-durable such a
master cannot vote either). Warnings (safe): a clock more than 1s off, a master that lost its
data after a restart (in quarantine, when it cannot vote; or without the deployment marker,
when it votes only with --quarantine 0s).

Exit codes:
  0    safe for the options given (warnings may be printed)
  78   not safe: at least one error
  64   bad arguments (node URLs, durations)";

const RUN_HELP: &str = "\
Example: serialise a nightly job across machines, waiting up to 5 minutes for the lock:
  redquorum run --nodes redis://a:6379,redis://b:6379,redis://c:6379 \\
      --lock nightly-backup --ttl 30s --wait 5m -- /usr/local/bin/backup --full

Kinds: by default the lock is reentrant, owned by REDQUORUM_OWNER: a `redquorum run` of the
same name inside the command (which inherits REDQUORUM_OWNER) re-enters it instead of waiting
for it, and every other run waits. --read and --write take a read-write lock (any number of
readers at once, or one writer; a waiting writer holds back new readers); --permits P takes
one of P permits of a semaphore (at most P commands at once; every run of the name must give
the same P).
  redquorum run --lock reports --read -- ./export-report
  redquorum run --lock reports --write -- ./rebuild-reports
  redquorum run --lock gpu --permits 2 -- ./train
Several --lock: every name is held (of the one kind given), taken all or nothing in the names'
byte order, so that runs over overlapping names cannot deadlock:
  redquorum run --lock account:17 --lock account:4 -- ./transfer 17 4 100

The command sees REDQUORUM_LOCK (the name), REDQUORUM_TOKEN (the holder's token),
REDQUORUM_FENCE (the fencing token, to send with every write to the protected resource),
REDQUORUM_OWNER (the owner id: commands under one run count as one holder of its reentrant
locks; it is a capability, so keep it out of logs) and REDQUORUM_KIND (reentrant, read, write
or semaphore:P; `redquorum status` and `redquorum release` of a name in REDQUORUM_LOCK default
to it, so that `redquorum release --lock NAME` inside the command releases the run's lock;
the run, told through the file in REDQUORUM_RUN_RELEASES, lets the command run on without it).
With several --lock, REDQUORUM_LOCK, REDQUORUM_TOKEN and REDQUORUM_FENCE hold one line per
lock, in the order they were taken; `redquorum release --lock NAME` takes NAME's line.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM sent to redquorum are passed on
to the command (redquorum does not die of them); the lock is released after the command exits,
and redquorum exits with the command's code. Before the lock is taken, any of them ends the
wait: the command is not run, and redquorum exits with 128+N. At a terminal, where the command shares the
terminal's foreground process group, Ctrl-C (SIGINT) and Ctrl-\\ (SIGQUIT) reach the command
from the terminal itself and are not passed on again (nor is a SIGINT or SIGQUIT sent to
redquorum alone then). If redquorum itself is killed (SIGKILL), the command's process is
killed too (on Linux, by a parent-death signal; processes it started go only if it takes them
with it), since nothing renews the lock any more.

If the lock is lost while the command runs (a majority of nodes unreachable for longer than
the lock's validity), the command gets SIGTERM, then SIGKILL after --kill-after. Unless
redquorum runs in the foreground of a terminal (cron, CI, in the background, whatever stdin
is), the command runs in its own process group, and these signals go to the whole group (a
shell's children too), followed by SIGCONT, so that a stopped command acts on them.

Nodes: --nodes, else REDQUORUM_NODES, else `nodes = [...]` in the TOML file named by
--config or REDQUORUM_CONFIG.

Exit codes:
  the command's own    the command ran (128+N if it was killed by signal N)
  75                   the lock was not obtained within --wait; the command was not run
  69                   no quorum of masters can grant it (down, quarantined, replicas,
                       misconfigured: the message names each); the command was not run
  76                   the lock was lost while the command ran; the command was terminated
  64                   bad arguments (names, durations, node URLs)
  126, 127             the command could not be executed / was not found
  70                   any other failure";

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
