//! Small tools: acquire, release and status of one lock, for scripts and for looking around.

use std::time::Duration;

use redquorum::{Client, LockOptions};

use super::{EXIT_OK, exit_code};

pub(super) async fn acquire(client: &Client, name: &str, ttl: Duration, wait: Duration) -> u8 {
    match client
        .acquire(name, &LockOptions::new(ttl).wait(wait))
        .await
    {
        Ok(lock) => {
            // The token on stdout alone, so that `TOKEN=$(redquorum acquire ...)` works.
            println!("{}", lock.token());
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
            println!(
                "lock {:?}: {}",
                info.name,
                if info.held { "held" } else { "free" }
            );
            for node in &info.nodes {
                let state = match &node.ttl {
                    Ok(Some(ttl)) => {
                        format!("held, expires in {}", humantime::format_duration(*ttl))
                    }
                    Ok(None) => "free".to_owned(),
                    Err(e) => format!("unknown ({e})"),
                };
                println!("  {:<24} {state}", node.node);
            }
            EXIT_OK
        }
        Err(e) => {
            tracing::error!("{e}");
            exit_code(&e)
        }
    }
}
