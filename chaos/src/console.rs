//! The runner's own output: report lines on stdout, progress and complaints on stderr, written
//! so that a reader that has gone (`| head`, a closed terminal) ends the output, never the run.
//!
//! `println!` and `eprintln!` panic when their write fails; a panic in the middle of a scenario
//! would skip its tear-down and leave its compose project running.

use std::io::Write;

/// Writes one line of the report to stdout and says whether it got there, so that a caller
/// printing a listing can stop at the first line nobody reads.
pub(crate) fn say(line: std::fmt::Arguments) -> std::io::Result<()> {
    writeln!(std::io::stdout().lock(), "{line}")
}

/// Writes one line of progress or a complaint to stderr. A line that cannot be written is
/// dropped: the run's history and reports go to files, and its exit code is its verdict.
pub(crate) fn tell(line: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// `eprintln!` that drops what it cannot write instead of panicking (see [`tell`]).
macro_rules! tell {
    ($($arg:tt)*) => {
        $crate::console::tell(format_args!($($arg)*))
    };
}
