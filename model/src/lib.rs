//! A model of redquorum's protocol, checked exhaustively for small sizes with
//! [stateright](https://docs.rs/stateright).
//!
//! Masters run what the Lua scripts do (`scripts/`, one file per script, named after it),
//! clients run the library's attempts, votes, hand-overs, releases and markings with the
//! readings they took on each connection, and the model checker chooses every interleaving:
//! calls run late or never, connections break with calls on them, published messages come
//! late, twice or never, masters take snapshots and crash, coming back empty, from their
//! snapshot or with every write, and validity windows end in any order. Time is not
//! modelled: a holder counts its lock valid while its attempt's window is open, and a key
//! expires only once the window of the attempt it was granted for has ended (see
//! [`ids::Window`]). Fencing proposals come from a clock that is ahead of every token
//! granted before (the assumption under which tokens grow on masters that lose their data;
//! `docs/safety.md`).
//!
//! Every reachable state must have the properties of [`system::Protocol`]'s `properties`:
//! mutual exclusion (one mutex holder, one writer and no reader beside it, no more than P
//! permits) and fencing tokens that grow with every exclusive hold.
//!
//! Layout: `ids` (values), `master` (a master's keys and restarts), `scripts` (the Lua
//! scripts as transitions), `net` (calls and messages), `client` (a client's connections and
//! readings), `rules` (the protocol's versions), `setup` (what a check covers), `system`
//! (the model itself).

pub mod checks;
pub mod client;
pub mod ids;
pub mod master;
pub mod net;
pub mod rules;
pub mod scripts;
pub mod setup;
pub mod system;

pub use rules::Rules;
pub use setup::{Faults, Kind, Session, Setup};
pub use system::{Action, Protocol, State};
