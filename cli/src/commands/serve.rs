//! `redquorum serve`: the HTTP coordinator, from flags, environment and config file.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use redquorum_cli::server::{
    AppOptions, BearerToken, ConnectionLimits, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    ServiceLimits,
};
use redquorum_testkit::LocalNodes;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::config::Config;
use super::stop::stop_requested;
use super::{EXIT_OK, EXIT_SOFTWARE, NodeArgs, build, usage};

/// Default address of the API.
const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7700);

/// Shortest idle timeout accepted: a client on a slow network needs some time to send a
/// request.
const MIN_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest idle timeout accepted.
const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    nodes: NodeArgs,
    /// Address of the API [default: 127.0.0.1:7700].
    #[arg(long, env = "REDQUORUM_LISTEN")]
    listen: Option<SocketAddr>,
    /// Serve /metrics on this address instead of the API's.
    #[arg(long, env = "REDQUORUM_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// File holding the bearer token clients must send (REDQUORUM_AUTH_TOKEN takes precedence).
    #[arg(long, env = "REDQUORUM_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
    /// How long a client may keep the server waiting: for the head of its next request on an
    /// open connection (an idle connection is closed after it), and for a request's body
    /// [default: 75s].
    #[arg(long, env = "REDQUORUM_IDLE_TIMEOUT", value_parser = humantime::parse_duration)]
    idle_timeout: Option<Duration>,
    #[command(flatten)]
    limits: LimitArgs,
    /// Serve on a non-loopback address without a bearer token.
    #[arg(long, env = "REDQUORUM_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    /// Start local redis-server masters and use them (for trying redquorum out).
    #[arg(long)]
    dev: bool,
    /// How many masters --dev starts.
    #[arg(long, default_value_t = 3, requires = "dev")]
    dev_nodes: usize,
}

/// How much one coordinator takes on at once; past a limit, a request is refused at once.
#[derive(Debug, clap::Args)]
struct LimitArgs {
    /// Connections open at once [default: 4096].
    #[arg(long, env = "REDQUORUM_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Sessions open at once [default: 1000].
    #[arg(long, env = "REDQUORUM_MAX_SESSIONS")]
    max_sessions: Option<usize>,
    /// Acquires waiting at once (wait_ms above 0) [default: 1000].
    #[arg(long, env = "REDQUORUM_MAX_WAITING")]
    max_waiting: Option<usize>,
    /// Acquires waiting at once for one name [default: 100].
    #[arg(long, env = "REDQUORUM_MAX_WAITING_PER_NAME")]
    max_waiting_per_name: Option<usize>,
}

impl LimitArgs {
    /// The limits from the flags, else the file, else the defaults; each at least 1.
    fn resolve(&self, config: &Config) -> Result<(usize, ServiceLimits), String> {
        let defaults = ServiceLimits::default();
        let pick = |flag: Option<usize>, file: Option<usize>, default: usize, what: &str| match flag
            .or(file)
            .unwrap_or(default)
        {
            0 => Err(format!("--max-{what} must be at least 1")),
            n => Ok(n),
        };
        let connections = pick(
            self.max_connections,
            config.max_connections,
            DEFAULT_MAX_CONNECTIONS,
            "connections",
        )?;
        let limits = ServiceLimits {
            sessions: pick(
                self.max_sessions,
                config.max_sessions,
                defaults.sessions,
                "sessions",
            )?,
            waiting: pick(
                self.max_waiting,
                config.max_waiting,
                defaults.waiting,
                "waiting",
            )?,
            waiting_per_name: pick(
                self.max_waiting_per_name,
                config.max_waiting_per_name,
                defaults.waiting_per_name,
                "waiting-per-name",
            )?,
        };
        Ok((connections, limits))
    }
}

/// Raises the process's soft limit on open descriptors towards what `connections` take (three
/// each at most, and some for the masters and the process), within the hard limit; warns when
/// even that is short, as accepting then fails before the connection limit is reached.
fn make_room_for(connections: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let wanted = u64::try_from(connections)
        .unwrap_or(u64::MAX)
        .saturating_mul(3)
        + 256;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= wanted {
        return;
    }
    let raised = wanted.min(hard);
    if setrlimit(Resource::RLIMIT_NOFILE, raised, hard).is_err() || raised < wanted {
        tracing::warn!(
            "the process may open {} descriptors, short of the {wanted} that {connections} connections may take: lower --max-connections or raise the limit (ulimit -n)",
            raised.max(soft)
        );
    }
}

pub(super) async fn serve(args: ServeArgs) -> u8 {
    // The recorder must be in place before the client looks up its metric handles.
    let metrics = redquorum_cli::server::install_metrics();
    let config = match args.nodes.config() {
        Ok(c) => c,
        Err(m) => return usage(&m),
    };
    let auth = match auth_token(
        args.auth_token_file
            .as_ref()
            .or(config.auth_token_file.as_ref()),
    ) {
        Ok(token) => token,
        Err(m) => return usage(&m),
    };
    let listen = args.listen.or(config.listen).unwrap_or(DEFAULT_LISTEN);
    let idle_timeout = args
        .idle_timeout
        .or(config.idle_timeout)
        .unwrap_or(DEFAULT_IDLE_TIMEOUT);
    if !(MIN_IDLE_TIMEOUT..=MAX_IDLE_TIMEOUT).contains(&idle_timeout) {
        return usage(&format!(
            "the idle timeout must be from {} to {}, not {}",
            humantime::format_duration(MIN_IDLE_TIMEOUT),
            humantime::format_duration(MAX_IDLE_TIMEOUT),
            humantime::format_duration(idle_timeout)
        ));
    }
    let (max_connections, service_limits) = match args.limits.resolve(&config) {
        Ok(limits) => limits,
        Err(m) => return usage(&m),
    };
    make_room_for(max_connections);
    let open_ok = args.allow_unauthenticated || config.allow_unauthenticated == Some(true);
    if auth.is_none() && !listen.ip().is_loopback() && !open_ok {
        return usage(&format!(
            "refusing to serve on {listen} without authentication: set REDQUORUM_AUTH_TOKEN or --auth-token-file, listen on a loopback address, or pass --allow-unauthenticated"
        ));
    }
    let dev_nodes = if args.dev {
        let count = args.dev_nodes;
        match tokio::task::spawn_blocking(move || LocalNodes::start(count)).await {
            Ok(Ok(nodes)) => Some(nodes),
            Ok(Err(e)) => {
                tracing::error!("--dev could not start local masters: {e}");
                return EXIT_SOFTWARE;
            }
            Err(e) => {
                tracing::error!("--dev could not start local masters: {e}");
                return EXIT_SOFTWARE;
            }
        }
    } else {
        None
    };
    let builder = match &dev_nodes {
        // Fresh masters that have never held a lock: nothing to quarantine them for.
        Some(nodes) => Ok(redquorum::Client::builder()
            .nodes(nodes.urls())
            .quarantine(Duration::ZERO)),
        None => args.nodes.builder(&config),
    };
    let client = match builder.map_err(|m| usage(&m)).and_then(build) {
        Ok(c) => c,
        Err(code) => return code,
    };

    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot listen on {listen}: {e}");
            return EXIT_SOFTWARE;
        }
    };
    let metrics_listen = args.metrics_listen.or(config.metrics_listen);
    let metrics_listener = match metrics_listen {
        Some(addr) => match TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::error!("cannot listen on {addr} for metrics: {e}");
                return EXIT_SOFTWARE;
            }
        },
        None => None,
    };
    if let Some(handle) = metrics.clone() {
        // Histogram buckets are drained into their totals by upkeep; run it between scrapes.
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                handle.run_upkeep();
            }
        });
    }

    let sessions = CancellationToken::new();
    let router = redquorum_cli::server::app(
        client.clone(),
        AppOptions {
            auth: auth.clone(),
            metrics: if metrics_listener.is_none() {
                metrics.clone()
            } else {
                None
            },
            shutdown: sessions.clone(),
            limits: service_limits,
        },
    );
    let metrics_side = match (metrics_listener, metrics) {
        (Some(l), Some(handle)) => Some((
            l,
            redquorum_cli::server::metrics_router(handle, client.clone()),
        )),
        _ => None,
    };
    let addr = listener.local_addr().unwrap_or(listen);
    tracing::info!(
        nodes = ?client.nodes(),
        quorum = client.quorum(),
        auth = auth.is_some(),
        "redquorum serving on http://{addr}"
    );
    if dev_nodes.is_some() {
        tracing::info!(
            "try: curl -s -X POST http://{addr}/v1/locks/demo -d '{{\"ttl_ms\": 30000}}'"
        );
    }
    // Connections are made when first used: opened now, in the background, the first requests
    // do not pay for them (a short TTL leaves a per-node deadline of a few milliseconds, which a
    // connect and the reading of a master's identity can overrun), and the log tells at once
    // which masters cannot be reached.
    tokio::spawn(open_connections(client.clone()));
    let shutdown = async {
        stop_requested().await;
    };
    let limits = ConnectionLimits {
        idle_timeout,
        max_connections,
        ..ConnectionLimits::default()
    };
    redquorum_cli::server::serve(listener, router, metrics_side, sessions, shutdown, limits).await;
    // Stops the --dev masters.
    drop(dev_nodes);
    tracing::info!("stopped");
    EXIT_OK
}

/// Reads every master once, which connects to each, and logs those that cannot be used.
async fn open_connections(client: redquorum::Client) {
    let health = client.node_health().await;
    for node in health.iter().filter(|node| !node.usable) {
        let why = node.error.as_deref().unwrap_or("it cannot vote now");
        tracing::warn!(
            node = node.node.as_str(),
            "master not usable at start: {why}"
        );
    }
    let usable = health.iter().filter(|node| node.usable).count();
    tracing::info!("{usable} of {} masters usable", health.len());
}

/// The bearer token: REDQUORUM_AUTH_TOKEN, else the file's contents; `None` for none.
fn auth_token(file: Option<&PathBuf>) -> Result<Option<BearerToken>, String> {
    if let Ok(token) = std::env::var("REDQUORUM_AUTH_TOKEN") {
        return BearerToken::new(&token)
            .map(Some)
            .ok_or_else(|| "REDQUORUM_AUTH_TOKEN is set but empty".to_owned());
    }
    let Some(path) = file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the auth token file {}: {e}", path.display()))?;
    BearerToken::new(&text)
        .map(Some)
        .ok_or_else(|| format!("the auth token file {} is empty", path.display()))
}
