//! Small tools: acquire, release and status of one lock, for scripts and for looking around.

use std::time::Duration;

use redquorum::{Client, LockOptions};

use super::out::say;
use super::{EXIT_OK, EXIT_SOFTWARE, exit_code};

pub(super) async fn acquire(client: &Client, name: &str, ttl: Duration, wait: Duration) -> u8 {
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

pub(super) async fn release(client: &Client, name: &str, token: &str) -> u8 {
    match client.release_token(name, token).await {
        Ok(()) => {
            tracing::info!(lock = name, "released");
            EXIT_OK
        }
        Err(e) => {
            tracing::error!("{e}");
            exit_code(&e)
        }
    }
}

pub(super) async fn status(client: &Client, name: &str) -> u8 {
    match client.inspect(name).await {
        Ok(info) => {
            let mut written = say!(
                "lock {:?}: {}",
                info.name,
                if info.held { "held" } else { "free" }
            );
            for node in &info.nodes {
                if written.is_err() {
                    break;
                }
                let state = match &node.ttl {
                    Ok(Some(ttl)) => {
                        format!("held, expires in {}", humantime::format_duration(*ttl))
                    }
                    Ok(None) => "free".to_owned(),
                    Err(e) => format!("unknown ({e})"),
                };
                written = say!("  {:<24} {state}", node.node);
            }
            match written {
                Ok(()) => EXIT_OK,
                Err(e) => {
                    tracing::error!("{e}");
                    EXIT_SOFTWARE
                }
            }
        }
        Err(e) => {
            tracing::error!("{e}");
            exit_code(&e)
        }
    }
}
