//! `redquorum-peers`: redquorum side by side with rslock (the fastest Rust Redlock client we
//! know of) and a bare redis-rs fan-out, in one run on the same five local masters.
//!
//! Each repeat runs, one after the other: the bare fan-outs' uncontended pairs (on redis-rs,
//! multi-thread and current-thread runtime; on bare sockets, multi-thread), redquorum's two
//! scenarios (default runtime, then current-thread), and rslock's, each in a task of a fresh
//! runtime. Figures are medians over the repeats; compare them only within one run. Each
//! run also reads what its pairs, or its critical sections, cost the masters' CPUs and the
//! client's: on a machine whose few CPUs run both, that cost is what its rate follows; and,
//! under contention, what the runtime's threads did (`runtime_counts.rs`) and what each of
//! their wake-ups brought the clients (`wake_ups.rs`).

#![warn(clippy::print_stderr)]

mod contenders;
mod report;
mod runtime_counts;
mod scenarios;
mod wake_ups;
mod wire;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use contenders::Contender;
use redquorum_testkit::{LocalNodes, MastersCpu};
use report::Row;

/// What a run does; every figure can be set with `--name value`.
#[derive(Debug, Clone)]
struct Settings {
    repeat: usize,
    pairs: usize,
    warm_up: usize,
    workers: usize,
    seconds: f64,
    ttl: Duration,
    retry: Duration,
}

const USAGE: &str = "usage: redquorum-peers [--repeat 3] [--pairs 2000] [--warm-up 200] [--workers 8] [--seconds 10] [--ttl-ms 10000] [--retry-ms 10]";

fn settings() -> Result<Settings, String> {
    let mut s = Settings {
        repeat: 3,
        pairs: 2000,
        warm_up: 200,
        workers: 8,
        seconds: 10.0,
        ttl: Duration::from_secs(10),
        retry: Duration::from_millis(10),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            return Err(USAGE.to_owned());
        };
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a whole number\n{USAGE}"))
        };
        match flag.as_str() {
            "--repeat" => s.repeat = number(value)?.max(1) as usize,
            "--pairs" => s.pairs = number(value)?.max(1) as usize,
            "--warm-up" => s.warm_up = number(value)? as usize,
            "--workers" => s.workers = number(value)?.max(1) as usize,
            "--seconds" => {
                s.seconds = value
                    .parse::<f64>()
                    .ok()
                    .filter(|v| *v > 0.0 && *v <= 600.0)
                    .ok_or_else(|| format!("--seconds: {value:?} is not in (0, 600]\n{USAGE}"))?;
            }
            "--ttl-ms" => s.ttl = Duration::from_millis(number(value)?.max(1)),
            "--retry-ms" => s.retry = Duration::from_millis(number(value)?.max(1)),
            _ => return Err(USAGE.to_owned()),
        }
    }
    Ok(s)
}

/// A fresh runtime per figure: multi-thread with a worker per core, or a single thread; its
/// threads' parks and wake-ups counted (see `wake_ups.rs`).
fn runtime(multi_thread: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder
        .enable_all()
        .on_thread_park(wake_ups::parking)
        .on_thread_unpark(wake_ups::unparked)
        .build()
}

/// Runs `scenario` as a task of `rt`, as application code runs, rather than on the thread that
/// blocks on the runtime (whose every wake-up would come from another thread).
fn in_task<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    scenario: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    rt.block_on(rt.spawn(scenario))
        .map_err(|e| format!("a scenario failed: {e}"))
}

/// Empties every master between figures, so that no figure inherits another's keys.
fn flush(urls: &[String]) -> Result<(), String> {
    for url in urls {
        let mut c = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .map_err(|e| e.to_string())?;
        redis::cmd("FLUSHALL")
            .query::<()>(&mut c)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Every row of a run.
struct Rows {
    redquorum: Row,
    redquorum_current_thread: Row,
    rslock: Row,
    bare: Row,
    bare_current_thread: Row,
    wire: Row,
    scripts: Row,
}

impl Rows {
    /// In the order of the table.
    fn all(&self) -> [&Row; 7] {
        [
            &self.redquorum,
            &self.redquorum_current_thread,
            &self.rslock,
            &self.bare,
            &self.bare_current_thread,
            &self.wire,
            &self.scripts,
        ]
    }
}

/// Both scenarios for one kind of client on one runtime: uncontended pairs on one client made
/// by `make`, then `s.workers` clients taking one name in turn.
fn both_scenarios(
    s: &Settings,
    urls: &[String],
    masters: &MastersCpu,
    multi_thread: bool,
    row: &mut Row,
    make: impl Fn() -> Result<Contender, String>,
) -> Result<(), String> {
    flush(urls)?;
    let rt = runtime(multi_thread).map_err(|e| e.to_string())?;
    let one = make()?;
    row.uncontended.push(in_task(
        &rt,
        scenarios::uncontended(one, s.warm_up, s.pairs, masters.clone()),
    )?);
    flush(urls)?;
    let many = (0..s.workers)
        .map(|_| make())
        .collect::<Result<Vec<_>, _>>()?;
    let run_for = Duration::from_secs_f64(s.seconds);
    row.contended.push(in_task(
        &rt,
        scenarios::contended(many, run_for, masters.clone()),
    )?);
    Ok(())
}

/// How a bare fan-out reaches the masters, and what it sends.
#[derive(Clone, Copy)]
enum FanOut {
    /// `SET NX PX` and compare-and-delete, on redis-rs's multiplexed connections.
    RedisRs,
    /// The same commands on bare sockets.
    Sockets,
    /// redquorum's acquire and release scripts, on bare sockets.
    SocketsWithScripts,
}

fn run(s: &Settings, urls: &[String], masters: &MastersCpu) -> Result<Rows, String> {
    let mut rows = Rows {
        redquorum: Row::new("redquorum", "default (fair)"),
        redquorum_current_thread: Row::new("redquorum", "current-thread runtime"),
        rslock: Row::new("rslock 0.10", "default"),
        bare: Row::new("bare redis-rs fan-out", "multi-thread"),
        bare_current_thread: Row::new("bare redis-rs fan-out", "current-thread"),
        wire: Row::new("bare sockets fan-out, no client library", "multi-thread"),
        scripts: Row::new(
            "bare sockets fan-out sending redquorum's scripts",
            "multi-thread",
        ),
    };
    for repeat in 1..=s.repeat {
        tell(format_args!("repeat {repeat} of {}", s.repeat));
        for (row, multi, fan_out) in [
            (&mut rows.bare, true, FanOut::RedisRs),
            (&mut rows.bare_current_thread, false, FanOut::RedisRs),
            (&mut rows.wire, true, FanOut::Sockets),
            (&mut rows.scripts, true, FanOut::SocketsWithScripts),
        ] {
            flush(urls)?;
            let (urls, ttl, warm_up, pairs) = (urls.to_vec(), s.ttl, s.warm_up, s.pairs);
            let masters = masters.clone();
            let rt = runtime(multi).map_err(|e| e.to_string())?;
            let figure = in_task(&rt, async move {
                let bare = match fan_out {
                    FanOut::RedisRs => Contender::bare(&urls, ttl).await?,
                    FanOut::Sockets => Contender::wire(&urls, ttl).await?,
                    FanOut::SocketsWithScripts => Contender::scripts(&urls, ttl).await?,
                };
                Ok::<_, String>(scenarios::uncontended(bare, warm_up, pairs, masters).await)
            })??;
            row.uncontended.push(figure);
        }
        for (row, multi) in [
            (&mut rows.redquorum, true),
            (&mut rows.redquorum_current_thread, false),
        ] {
            both_scenarios(s, urls, masters, multi, row, || {
                Contender::redquorum(urls, s.ttl, s.retry)
            })?;
        }
        both_scenarios(s, urls, masters, true, &mut rows.rslock, || {
            Ok(Contender::rslock(urls, s.ttl, s.retry))
        })?;
    }
    Ok(rows)
}

/// Writes one line of progress or a complaint to stderr, dropping it when nobody reads stderr
/// (`eprintln!` would panic there, and the exit code would no longer say what happened).
fn tell(line: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "-h" || a == "--help") {
        let _ = writeln!(std::io::stdout().lock(), "{USAGE}");
        return ExitCode::SUCCESS;
    }
    let s = match settings() {
        Ok(s) => s,
        Err(message) => {
            tell(format_args!("{message}"));
            return ExitCode::from(64);
        }
    };
    let nodes = match LocalNodes::start(5) {
        Ok(nodes) => nodes,
        Err(e) => {
            tell(format_args!(
                "could not start five local redis-server masters: {e}"
            ));
            return ExitCode::from(69);
        }
    };
    let rows = match run(&s, &nodes.urls(), &nodes.masters_cpu()) {
        Ok(rows) => rows,
        Err(e) => {
            tell(format_args!("{e}"));
            return ExitCode::FAILURE;
        }
    };
    let (ratios, met) = report::ratios(
        &rows.redquorum,
        &rows.redquorum_current_thread,
        &rows.rslock,
        &rows.bare,
        &rows.wire,
        &rows.scripts,
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "N=5 local masters; {} repeats, medians; uncontended {} pairs after {} warm-up; contended {} workers for {} s, TTL {} ms, retry jitter {} ms\n",
        s.repeat,
        s.pairs,
        s.warm_up,
        s.workers,
        s.seconds,
        s.ttl.as_millis(),
        s.retry.as_millis()
    );
    let _ = writeln!(out, "{}", report::table(&rows.all()));
    let _ = writeln!(out, "{}", report::cpu_table(&rows.all()));
    let _ = writeln!(out, "{}", report::runtime_table(&rows.all()));
    let _ = writeln!(out, "{}", report::wake_up_table(&rows.all()));
    let _ = write!(out, "{ratios}");
    let _ = writeln!(
        out,
        "{}",
        if met {
            "all goals met"
        } else {
            "some goals SHORT"
        }
    );
    if rows.all().iter().all(|row| row.sound()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
