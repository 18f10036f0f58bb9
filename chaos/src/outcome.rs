//! What one scenario of a run produced: its verdict and why, the findings, and the history.

use std::time::Duration;

use crate::checker::{Analysis, Verdict};
use crate::history::Event;
use crate::scenario::Scenario;

/// What one scenario produced.
#[derive(Debug, Clone)]
pub(crate) struct ScenarioOutcome {
    /// The scenario.
    pub(crate) scenario: Scenario,
    /// Its seed (the run's seed mixed with its position).
    pub(crate) seed: u64,
    /// The judgement.
    pub(crate) verdict: Verdict,
    /// Why (what differed, or why inconclusive).
    pub(crate) reasons: Vec<String>,
    /// The findings.
    pub(crate) analysis: Analysis,
    /// Wall time, set-up and tear-down included.
    pub(crate) duration: Duration,
    /// The history, for the timeline.
    pub(crate) events: Vec<Event>,
    /// The compose project's name.
    pub(crate) project: String,
}
