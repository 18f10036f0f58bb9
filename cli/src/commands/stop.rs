//! The signals that ask a command to stop, SIGINT (Ctrl-C) and SIGTERM, for the commands that
//! must clean up before they exit (the masters they started, the sessions they hold).

use tokio::signal::unix::{SignalKind, signal};

/// Which signal asked the process to stop.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    Interrupt,
    Terminate,
}

impl Stop {
    /// The exit code a shell gives a process killed by this signal (128 + its number), so that
    /// whoever sent it sees the command as stopped by it.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Stop::Interrupt => 130,
            Stop::Terminate => 143,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
        }
    }
}

/// Resolves when the process gets SIGINT or SIGTERM. A signal that cannot be listened for is
/// said once in the log and left to its default action (the process ends without cleaning up).
pub(crate) async fn stop_requested() -> Stop {
    let interrupt = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => Stop::Interrupt,
            Err(e) => {
                tracing::warn!("cannot listen for SIGINT: {e}");
                std::future::pending().await
            }
        }
    };
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut term) => match term.recv().await {
                Some(()) => Stop::Terminate,
                // The runtime's signal driver is gone: no SIGTERM will be seen again.
                None => std::future::pending().await,
            },
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending().await
            }
        }
    };
    tokio::select! {
        stop = interrupt => stop,
        stop = terminate => stop,
    }
}
