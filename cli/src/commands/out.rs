//! A command's results on stdout, written so that a reader that has gone away (`| head` that
//! has exited: a pipe with no reader) ends the command with an error it reports, where
//! `println!` would panic. A stdout closed before the process started is not one of these: the
//! Rust runtime reopens it on /dev/null, where every write succeeds (`acquire` checks for it).

use std::fmt;
use std::io::{self, Write};

/// Writes `text` and a newline to stdout, and flushes it so that a failed write shows here.
pub(super) fn line(text: fmt::Arguments<'_>) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_fmt(text)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write to stdout: {e}")))
}

/// `println!` that returns the write's error instead of panicking on it.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::commands::out::line(format_args!($($arg)*))
    };
}
pub(super) use say;
