//! The chaos runner: brings up the compose project, injects faults, records and checks a history.
fn main() {}
