//! Doctor's verdict: the problems of each master and of the deployment, from the readings.

use std::collections::HashMap;
use std::time::Duration;

use super::{DoctorReport, NodeCheck, Problem, Severity};
use crate::config::defaults;

/// Turns the readings into problems, per master and for the deployment, for a client with
/// these settings: with `quarantine_off` (a quarantine of 0s) the client counts the votes of
/// masters that lost their data and are not yet quarantined, so doctor does too, and only
/// warns of them.
pub(super) fn assess(
    mut nodes: Vec<NodeCheck>,
    quorum: usize,
    require_durable: bool,
    quarantine_off: bool,
) -> DoctorReport {
    // The first address of each server, by run id.
    let mut first: HashMap<String, String> = HashMap::new();
    // Unmarked masters beside marked ones lost their data; with none marked, the deployment
    // is new and the first acquire marks them all.
    let lost_data = nodes.iter().any(|n| n.marked == Some(true));
    let mut usable = 0;
    for node in &mut nodes {
        let mut problems = Vec::new();
        let mut votes = node.reachable;
        if !node.reachable {
            problems.push(Problem::new(
                Severity::Error,
                "unreachable",
                format!(
                    "cannot be reached ({}); it cannot vote: check the address, the password and the network",
                    node.error.as_deref().unwrap_or("no reason given")
                ),
            ));
        }
        if let Some(role) = node.role.as_deref().filter(|r| *r != "master") {
            votes = false;
            problems.push(Problem::new(
                Severity::Error,
                "replica",
                format!(
                    "is a replica (role:{role}), not a master: it takes no writes of its own and copies another server's keys, so it is not an independent vote; list independent masters only"
                ),
            ));
        }
        if let Some(run_id) = &node.run_id {
            match first.get(run_id) {
                Some(other) => {
                    votes = false;
                    problems.push(Problem::new(
                        Severity::Error,
                        "same_server",
                        format!(
                            "is the same server as {other} (same run_id): one server would be counted as two votes; list each master once"
                        ),
                    ));
                }
                None => {
                    first.insert(run_id.clone(), node.node.clone());
                }
            }
        }
        if let Some(policy) = node
            .maxmemory_policy
            .as_deref()
            .filter(|p| *p != "noeviction")
        {
            problems.push(Problem::new(
                Severity::Error,
                "eviction",
                format!(
                    "maxmemory-policy is {policy}: volatile-* and allkeys-* policies can evict a lock key before its TTL, and another client then takes the lock; set maxmemory-policy noeviction"
                ),
            ));
        }
        if node.reachable && !node.durable {
            let how = match (node.aof_enabled, node.appendfsync.as_deref()) {
                (Some(true), None) => "AOF is on but appendfsync cannot be read (CONFIG GET is refused to this user), so durability cannot be confirmed".to_owned(),
                (Some(true), Some(fsync)) => format!("AOF runs with appendfsync {fsync}, which can lose the last writes"),
                _ => "AOF is off".to_owned(),
            };
            // Locks survive it (the master is quarantined once it lost its data), fencing
            // tokens do not: an error unless the caller accepts that
            // (`DoctorReport::allowing_non_durable`).
            let consequence = if require_durable {
                votes = false;
                "durable masters are required, so its votes are not counted"
            } else {
                "a restart or flush loses its locks (it is then quarantined for the longest TTL in use) and its fencing counters, so fencing tokens may go back once it counts again"
            };
            problems.push(Problem::new(
                Severity::Error,
                "not_durable",
                format!("{how}: {consequence}; run it with appendonly yes and appendfsync always"),
            ));
        }
        if !node.acl_missing.is_empty() {
            votes = false;
            let user = node.acl_user.as_deref().unwrap_or("<user>");
            let denied: Vec<String> = node
                .acl_missing
                .iter()
                .map(|m| match m.chars().next() {
                    Some('~') => format!("access to keys {m}"),
                    Some('&') => format!("access to channels {m}"),
                    _ => m.clone(),
                })
                .collect();
            let grant: Vec<String> = node
                .acl_missing
                .iter()
                .map(|m| match m.chars().next() {
                    Some('~' | '&') => m.clone(),
                    _ => format!("+{}", m.to_ascii_lowercase()),
                })
                .collect();
            problems.push(Problem::new(
                Severity::Error,
                "acl",
                format!(
                    "the ACL denies the client {} (user {user}); every call that needs it fails: ACL SETUSER {user} {}",
                    denied.join(", "),
                    grant.join(" ")
                ),
            ));
        }
        if let Some(offset) = node.clock_offset_micros {
            let limit = defaults::CLOCK_OFFSET_WARNING;
            if offset.unsigned_abs() > u64::try_from(limit.as_micros()).unwrap_or(u64::MAX) {
                problems.push(Problem::new(
                    Severity::Warning,
                    "clock",
                    format!(
                        "its clock is {} {} the local clock (more than {}): fencing-token proposals start from the clocks (a client behind the others needs extra round trips) and waiters' places in line lapse by them, so queue fairness suffers; held locks stay safe, but a clock this far off suggests one that may also step: run NTP on every host",
                        humantime::format_duration(Duration::from_millis(offset.unsigned_abs() / 1000)),
                        if offset > 0 { "ahead of" } else { "behind" },
                        humantime::format_duration(limit)
                    ),
                ));
            }
        }
        // A quarantined master refuses every grant itself, whatever the client's setting. An
        // unmarked one is marked by the next acquire: in quarantine by a client with quarantine
        // on, without by one with it off, which then counts its vote; it may grant a lock it
        // granted to another holder before it lost its data, which is what the warning says.
        const COUNTED_ANYWAY: &str = "; with quarantine off (0s) this client marks it without quarantine and counts its vote, and it may grant a lock that another holder still holds";
        if let Some(left) = node.quarantined_for {
            votes = false;
            problems.push(Problem::new(
                Severity::Warning,
                "quarantined",
                format!(
                    "it lost its data (a restart without persistence, or a flush) while the deployment was in use: it grants nothing for {} more, until every lock it may have granted has expired elsewhere",
                    humantime::format_duration(Duration::from_secs(left.as_secs().max(1))),
                ),
            ));
        } else if node.marked == Some(false) && lost_data {
            votes &= quarantine_off;
            problems.push(Problem::new(
                Severity::Warning,
                "unmarked",
                format!(
                    "it carries no deployment marker while other masters do: it lost its data, and the next acquire puts it in quarantine for the longest TTL in use{}",
                    if quarantine_off { COUNTED_ANYWAY } else { "" }
                ),
            ));
        }
        if votes {
            usable += 1;
        }
        node.problems = problems;
    }
    let mut problems = Vec::new();
    if usable < quorum {
        problems.push(Problem::new(
            Severity::Error,
            "quorum",
            format!(
                "only {usable} of {} masters can vote now, and a lock needs {quorum}: no lock can be taken until the problems above are fixed",
                nodes.len()
            ),
        ));
    }
    let safe = nodes
        .iter()
        .flat_map(|n| &n.problems)
        .chain(&problems)
        .all(|p| p.severity != Severity::Error);
    DoctorReport {
        nodes,
        problems,
        quorum,
        usable,
        safe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy(node: &str, run_id: &str) -> NodeCheck {
        NodeCheck {
            reachable: true,
            redis_version: Some("7.0.15".into()),
            role: Some("master".into()),
            run_id: Some(run_id.into()),
            aof_enabled: Some(true),
            appendfsync: Some("always".into()),
            durable: true,
            maxmemory_policy: Some("noeviction".into()),
            rtt: Some(Duration::from_micros(200)),
            clock_offset_micros: Some(-150),
            ..NodeCheck::unchecked(node)
        }
    }

    fn codes(report: &DoctorReport) -> Vec<&str> {
        report.all_problems().map(|(_, p)| p.code).collect()
    }

    #[test]
    fn a_healthy_deployment_is_safe() {
        let nodes = vec![
            healthy("a:1", "x"),
            healthy("b:1", "y"),
            healthy("c:1", "z"),
        ];
        let report = assess(nodes, 2, true, false);
        assert!(report.safe, "{report:?}");
        assert_eq!(report.usable, 3);
        assert!(codes(&report).is_empty());
    }

    #[test]
    fn each_misconfiguration_is_found() {
        let mut replica = healthy("b:1", "y");
        replica.role = Some("slave".into());
        let twice = healthy("c:1", "x");
        let mut lru = healthy("d:1", "w");
        lru.maxmemory_policy = Some("allkeys-lru".into());
        let mut acl = healthy("e:1", "v");
        acl.acl_missing = vec!["EVALSHA".into()];
        let mut clock = healthy("f:1", "u");
        clock.clock_offset_micros = Some(-3_000_000);
        let down = NodeCheck::unchecked("g:1");
        let nodes = vec![healthy("a:1", "x"), replica, twice, lru, acl, clock, down];
        let report = assess(nodes, 4, false, false);
        assert!(!report.safe);
        assert_eq!(
            codes(&report),
            [
                "replica",
                "same_server",
                "eviction",
                "acl",
                "clock",
                "unreachable",
                "quorum"
            ]
        );
        // The first address of a server counts; the second does not.
        assert!(report.nodes[0].problems.is_empty());
        assert!(report.nodes[2].problems[0].message.contains("a:1"));
        assert!(report.nodes[5].problems[0].message.contains("behind"));
        assert_eq!(report.nodes[5].problems[0].severity, Severity::Warning);
        assert_eq!(report.usable, 3, "a, the eviction and the clock ones vote");
    }

    #[test]
    fn durability_is_an_error_unless_accepted() {
        let mut plain = healthy("a:1", "x");
        plain.aof_enabled = Some(false);
        plain.durable = false;
        let report = assess(vec![plain.clone()], 1, false, false);
        assert!(!report.safe);
        assert_eq!(codes(&report), ["not_durable"]);
        let accepted = report.allowing_non_durable();
        assert!(accepted.safe);
        assert_eq!(accepted.nodes[0].problems[0].severity, Severity::Warning);
        // Required and missing: its vote is lost, and then the quorum too, accepted or not.
        let report = assess(vec![plain], 1, true, false).allowing_non_durable();
        assert!(!report.safe);
        assert_eq!(codes(&report), ["not_durable", "quorum"]);
    }
}
