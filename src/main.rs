//! The `redquorum` binary: parses arguments and hands over to the library.
fn main() {}
