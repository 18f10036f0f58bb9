//! Small tools: acquire, release and status of one lock, for scripts and for looking around.

use std::time::Duration;

use redquorum::{Client, LockOptions};

use super::{EXIT_OK, exit_code};

fn client(nodes: &[String]) -> Result<Client, u8> {
    Client::new(nodes.iter().cloned()).map_err(|e| {
        tracing::error!("{e}");
        exit_code(&e)
    })
}

pub(super) async fn acquire(nodes: &[String], name: &str, ttl: Duration, wait: Duration) -> u8 {
    let client = match client(nodes) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client
        .acquire(name, &LockOptions::new(ttl).wait(wait))
        .await
    {
        Ok(lock) => {
            // The token on stdout alone, so that `TOKEN=$(redquorum acquire ...)` works.
            println!("{}", lock.token());
            tracing::info!(lock = name, valid_for = %humantime::format_duration(lock.remaining()), "acquired");
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

pub(super) async fn release(nodes: &[String], name: &str, token: &str) -> u8 {
    let client = match client(nodes) {
        Ok(c) => c,
        Err(code) => return code,
    };
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

pub(super) async fn status(nodes: &[String], name: &str) -> u8 {
    let client = match client(nodes) {
        Ok(c) => c,
        Err(code) => return code,
    };
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
