//! Small tools: acquire, release and status of one lock, for scripts and for looking around.

use std::time::Duration;

use redquorum::config::limits;
use redquorum::{Client, LockInfo, LockKind, LockOptions, Owner};

use super::out::say;
use super::run::held::RunsLocks;
use super::{EXIT_OK, EXIT_SOFTWARE, exit_code, usage};

/// The environment variable in which `run` tells its command the kind of lock it holds, read
/// by `status` and `release` when no kind flag is given.
pub(super) const KIND_ENV: &str = "REDQUORUM_KIND";

/// The kind of lock `status` and `release` look at: a mutex, as `acquire` takes, unless a flag
/// says otherwise, or, with none, `REDQUORUM_KIND` (set by `run` for its command).
#[derive(Debug, clap::Args)]
pub(super) struct KindArgs {
    /// A reader's share of a read-write lock (as `run --read` takes).
    #[arg(long, conflicts_with_all = ["write", "permits", "owner"])]
    read: bool,
    /// The writer's share of a read-write lock (as `run --write` takes).
    #[arg(long, conflicts_with_all = ["permits", "owner"])]
    write: bool,
    /// One of P permits of a semaphore (as `run --permits P` takes).
    #[arg(long, value_name = "P", conflicts_with = "owner",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(limits::MAX_PERMITS)))]
    permits: Option<u32>,
    /// A reentrant lock held by this owner (as a plain `run` takes, owned by its
    /// REDQUORUM_OWNER).
    #[arg(long, value_name = "ID")]
    owner: Option<String>,
}

impl KindArgs {
    /// The kind the flags name, else `REDQUORUM_KIND`'s when `name` is one of the run's locks
    /// (a line of `REDQUORUM_LOCK`: another lock, taken by `acquire` inside the command, is a
    /// mutex); `None` when neither says.
    fn kind(&self, name: &str) -> Result<Option<LockKind>, String> {
        let owner = |id: &str| Owner::from_id(id).map_err(|e| format!("not a valid owner id: {e}"));
        Ok(Some(if self.read {
            LockKind::Read
        } else if self.write {
            LockKind::Write
        } else if let Some(permits) = self.permits {
            LockKind::semaphore(permits)
        } else if let Some(id) = &self.owner {
            LockKind::Reentrant(owner(id)?)
        } else {
            let runs_name = RunsLocks::from_env().line_of(name).is_some();
            let Some(value) = std::env::var_os(KIND_ENV).filter(|_| runs_name) else {
                return Ok(None);
            };
            let value = value.to_string_lossy();
            match parse_kind(&value) {
                Some(KindName::Reentrant) => {
                    let id = std::env::var("REDQUORUM_OWNER").map_err(|_| {
                        format!("{KIND_ENV}=reentrant needs REDQUORUM_OWNER, the lock's owner")
                    })?;
                    LockKind::Reentrant(owner(&id)?)
                }
                Some(KindName::Other(kind)) => kind,
                None => {
                    return Err(format!(
                        "{KIND_ENV}={value:?} is not a lock kind (mutex, reentrant, read, write, semaphore:P)"
                    ));
                }
            }
        }))
    }
}

/// A kind as `REDQUORUM_KIND` names it: `reentrant` names no owner.
enum KindName {
    Reentrant,
    Other(LockKind),
}

fn parse_kind(value: &str) -> Option<KindName> {
    Some(KindName::Other(match value {
        "mutex" => LockKind::Mutex,
        "reentrant" => return Some(KindName::Reentrant),
        "read" => LockKind::Read,
        "write" => LockKind::Write,
        other => {
            let permits: u32 = other.strip_prefix("semaphore:")?.parse().ok()?;
            LockKind::semaphore(permits)
        }
    }))
}

/// `kind` as `REDQUORUM_KIND` names it (a reentrant lock's owner is in REDQUORUM_OWNER).
pub(super) fn kind_name(kind: &LockKind) -> String {
    match kind {
        LockKind::Semaphore { permits } => format!("semaphore:{permits}"),
        other => other.as_str().to_owned(),
    }
}

pub(super) async fn acquire(client: &Client, name: &str, ttl: Duration, wait: Duration) -> u8 {
    // Writes to /dev/null succeed, so the check below after the acquire would not catch it.
    if stdout_is_dev_null() {
        return usage(
            "stdout is /dev/null (or was closed, which the process finds reopened on /dev/null): nobody would get the lock's token, so no lock was taken; redirect it to a file to keep the token",
        );
    }
    match client
        .acquire(name, &LockOptions::new(ttl).wait(wait))
        .await
    {
        Ok(lock) => {
            // The token on stdout alone, so that `TOKEN=$(redquorum acquire ...)` works. A
            // token nobody reads would leave the lock held until its TTL with no way to release
            // it, so it is given back.
            if let Err(e) = say!("{}", lock.token()) {
                tracing::error!(lock = name, "{e}: the lock is released again");
                if let Err(e) = lock.release().await {
                    tracing::error!(lock = name, "and its release failed: {e}");
                }
                return EXIT_SOFTWARE;
            }
            tracing::info!(
                lock = name,
                fence = lock.fence(),
                valid_for = %humantime::format_duration(lock.remaining()),
                "acquired"
            );
            // Dropping a lock leaves it held until its TTL, which is what this tool promises.
            drop(lock);
            EXIT_OK
        }
        Err(e) => {
            tracing::error!("{e}");
            exit_code(&e)
        }
    }
}

/// Whether stdout is /dev/null. A stdout closed before the process started is one too: the
/// Rust runtime opens /dev/null on a closed descriptor 0, 1 or 2, so that no file the process
/// opens takes its place.
fn stdout_is_dev_null() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(stdout) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return false;
    };
    match (
        std::fs::File::from(stdout).metadata(),
        std::fs::metadata("/dev/null"),
    ) {
        (Ok(out), Ok(null)) => out.file_type().is_char_device() && out.rdev() == null.rdev(),
        _ => false,
    }
}

pub(super) async fn release(client: &Client, name: &str, kind: &KindArgs, token: &str) -> u8 {
    let kind = match kind.kind(name) {
        Ok(kind) => kind.unwrap_or(LockKind::Mutex),
        Err(message) => return usage(&message),
    };
    let token = match token_of(name, token) {
        Ok(token) => token,
        Err(message) => return usage(&message),
    };
    super::run::releases::tell_run(name, token);
    match client.release_token_as(name, &kind, token).await {
        Ok(()) => {
            tracing::info!(lock = name, kind = kind.as_str(), "released");
            EXIT_OK
        }
        Err(e) => {
            tracing::error!("{e}");
            exit_code(&e)
        }
    }
}

/// The token for `name`: `token` itself, or, when it is a multi-lock run's `REDQUORUM_TOKEN`
/// (one line per lock, in the order of `REDQUORUM_LOCK`'s names), the line of `name`'s.
fn token_of<'t>(name: &str, token: &'t str) -> Result<&'t str, String> {
    if !token.contains('\n') {
        return Ok(token);
    }
    let run = RunsLocks::from_env();
    run.line_of(name)
        .filter(|_| run.tokens() == token)
        .and_then(|line| token.lines().nth(line))
        .ok_or_else(|| {
            format!(
                "the token has several lines (a multi-lock run's REDQUORUM_TOKEN) and {name:?} is not one of the run's names in REDQUORUM_LOCK; give --lock one of them, or --token one line"
            )
        })
}

pub(super) async fn status(client: &Client, name: &str, kind: &KindArgs) -> u8 {
    let kind = match kind.kind(name) {
        Ok(kind) => kind,
        Err(message) => return usage(&message),
    };
    let infos = match kind {
        Some(kind) => client.inspect_as(name, &kind).await.map(|info| vec![info]),
        // No kind given: a name may be held as a mutex (or reentrant lock, on the same key), a
        // read-write lock or a semaphore, each apart from the others; "free" only if none is.
        None => {
            let semaphore = LockKind::semaphore(1);
            let (mutex, rw, semaphore) = futures::join!(
                client.inspect_as(name, &LockKind::Mutex),
                client.inspect_as(name, &LockKind::Read),
                client.inspect_as(name, &semaphore),
            );
            [mutex, rw, semaphore]
                .into_iter()
                .collect::<redquorum::Result<Vec<_>>>()
                .map(|all| {
                    let held: Vec<LockInfo> = all.iter().filter(|i| i.held).cloned().collect();
                    if held.is_empty() {
                        all.into_iter().take(1).collect()
                    } else {
                        held
                    }
                })
        }
    };
    let infos = match infos {
        Ok(infos) => infos,
        Err(e) => {
            tracing::error!("{e}");
            return exit_code(&e);
        }
    };
    match infos.iter().try_for_each(show) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!("{e}");
            EXIT_SOFTWARE
        }
    }
}

/// One kind's view of the lock: held or free, then each node's.
fn show(info: &LockInfo) -> std::io::Result<()> {
    // A mutex and a reentrant lock share their key: read as a reentrant lock, a mutex shows
    // as held with 0 reentrant holds.
    let family = match info.kind {
        "read" | "write" => "read-write lock",
        "semaphore" => "semaphore",
        _ => "mutex or reentrant lock",
    };
    say!(
        "lock {:?}: {} ({family})",
        info.name,
        if info.held { "held" } else { "free" }
    )?;
    for node in &info.nodes {
        let holders = match info.kind {
            "read" | "write" => format!(
                ", {} reader(s), {} writer(s){}",
                node.readers,
                node.writers,
                if node.writer_waiting {
                    ", a writer waiting"
                } else {
                    ""
                }
            ),
            "semaphore" => format!(
                ", {} of {} permits taken",
                node.holders,
                node.permits
                    .map_or_else(|| "?".to_owned(), |p| p.to_string())
            ),
            "reentrant" => format!(", {} reentrant hold(s)", node.holds),
            _ => String::new(),
        };
        let state = match &node.ttl {
            Ok(Some(ttl)) => format!(
                "held, expires in {}{holders}",
                humantime::format_duration(*ttl)
            ),
            Ok(None) => "free".to_owned(),
            Err(e) => format!("unknown ({e})"),
        };
        say!("  {:<24} {state}", node.node)?;
    }
    Ok(())
}
