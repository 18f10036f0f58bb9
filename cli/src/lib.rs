//! The parts of the `redquorum` binary that tests and other programs call directly: the HTTP
//! coordinator behind `redquorum serve` ([`server`]) and the benchmark behind `redquorum bench`
//! ([`bench`](mod@bench)). The locks themselves are the `redquorum` library's.

pub mod bench;
pub mod server;
