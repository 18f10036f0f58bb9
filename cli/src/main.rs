//! The `redquorum` binary: parses arguments, sets up logging and hands over to the command.

mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = commands::Cli::parse();
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
