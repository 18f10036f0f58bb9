//! The `redquorum` binary: parses arguments, sets up logging and hands over to the command.

mod commands;

use std::process::ExitCode;

use clap::Parser;

/// An HTTP request allocates a few dozen times on its way through the server (hyper's buffers,
/// axum's boxed futures, the JSON of the body and of the answer): glibc's malloc and free were
/// 4% of the CPU of a profile of `bench`'s HTTP pairs. With mimalloc, its HTTP pairs over the
/// library's went from a median of 0.666 to 0.683 (27 readings of each, alternating).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `redquorum run` starts its command through this binary (see `commands::launch`).
    #[cfg(target_os = "linux")]
    {
        let mut args = std::env::args_os();
        if args.nth(1).is_some_and(|first| first == commands::LAUNCHER) {
            return ExitCode::from(commands::launch(args));
        }
    }
    let args = match commands::Cli::try_parse() {
        Ok(args) => args,
        Err(e) => {
            // `--help` and `--version` print to stdout and succeed; any other argument error is
            // a usage error, with the same exit code as a bad name, duration or URL (EX_USAGE),
            // where clap's own would be 2.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(commands::EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    commands::init_tracing(args.log_format, args.default_log_level());
    let mut builder = match args.threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        0 => tokio::runtime::Builder::new_multi_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(usize::from(n));
            b
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::from(commands::EXIT_SOFTWARE);
        }
    };
    runtime.block_on(commands::run(args))
}
