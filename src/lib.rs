//! redquorum: quorum locks (Redlock) over N independent Redis masters.
//!
//! A lock is held when a strict majority of the masters hold a key for it with the holder's
//! random token. Every operation goes to all masters at once and returns as soon as the vote is
//! decided; every call to a master has its own short deadline, so a dead, paused or reconnecting
//! master costs little; validity is measured on the monotonic clock with an allowance for clock
//! drift.
//!
//! ```no_run
//! use std::time::Duration;
//! use redquorum::{Client, LockOptions};
//!
//! # async fn run() -> Result<(), redquorum::Error> {
//! let client = Client::new([
//!     "redis://10.0.0.1:6379",
//!     "redis://10.0.0.2:6379",
//!     "redis://10.0.0.3:6379",
//! ])?;
//! let mut lock = client.acquire("nightly-report", &LockOptions::new(Duration::from_secs(30))).await?;
//! // ... work, checking lock.remaining() or extending before it runs out ...
//! lock.extend(Duration::from_secs(30)).await?;
//! lock.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Safety notes
//!
//! The lock is exclusive as long as the masters keep their keys for the TTL: a master that
//! restarts without persistence forgets the locks it held (redquorum quarantines such a master
//! until every lock it may have granted has expired, by the records the other masters keep),
//! and a master whose clock jumps forward
//! expires them early. A holder that
//! is paused (GC, swapping) past its validity may act after someone else took the lock; the
//! defence is the fencing token, [`Lock::fence`], which grows with every acquisition of a name
//! and which the protected resource checks on every write ([`fencing`]).
//!
//! # Layout
//!
//! Layers, each using only those before it (`docs/architecture.md` draws them):
//!
//! - `error`, [`config`] (settings, defaults and limits), `quorum` (pure vote counting and
//!   validity maths), `metrics` (the metric names the library records).
//! - `node`: one master, its connection and its Lua scripts (`lua/`), and where a lock name
//!   lives on it.
//! - `fanout`: one operation on all masters at once.
//! - `waiters`: what the masters tell waiting callers (pub/sub), with polling as the fallback.
//! - `cluster`: what a client's locks share (nodes, settings, fencing proposals, waiters) and
//!   giving grants back; `deployment`: the deployment marker and the quarantine of a master
//!   that lost its data.
//! - `lock`: acquire, extend and release, and the [`Lock`] handle; `guard`: background renewal
//!   and the lost-lock signal ([`LockGuard`]); `doctor`: the check of a deployment.
//! - `client`: the [`Client`], every public operation in one place.
//! - [`fencing`]: the protected resource's side of fencing tokens, for the resource's code.
//!
//! The `redquorum` binary (the HTTP coordinator, `run`, `doctor`, `bench`) is the
//! `redquorum-cli` package; this crate is the library alone.

mod client;
mod cluster;
pub mod config;
mod deployment;
mod doctor;
mod error;
mod fanout;
pub mod fencing;
mod guard;
mod lock;
pub mod metrics;
mod multi;
mod node;
mod quorum;
pub mod slot;
mod waiters;

pub use client::{Client, ClientBuilder, LockInfo, NodeLockState};
pub use config::options::LockOptions;
pub use config::{LockKind, Owner};
pub use doctor::{DoctorReport, NodeCheck, Problem, Severity};
pub use error::{Error, NodeFailure, NodeFailureKind, Operation, Result};
pub use guard::{GuardStatus, LockGuard, LockState, LockWatch, RenewOptions, RenewalStop};
pub use lock::Lock;
pub use multi::{MultiGuard, MultiLock};
pub use node::NodeHealth;

// The README's examples are compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// So are those of the safety argument.
#[cfg(doctest)]
#[doc = include_str!("../docs/safety.md")]
struct SafetyDoctests;
