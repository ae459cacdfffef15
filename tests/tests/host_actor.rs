//! The host as a test actor (`confboot_tests::host_actor`): the host's
//! moves applied to the boot flows of a real bootstrapper process (init,
//! join, rejoin, recover), and to the host's own TDX and SEV-SNP guests
//! (`host_actor::variants`), each (move, step) judged. The normal suite runs
//! a short selection (every move at least once, every flow at least once);
//! `CONFBOOT_HOST_ACTOR=all` runs every (move, step) pair
//! (`scripts/host_actor.sh`, figures in RELIABILITY.md). Any FAILURE (a
//! secret the host saw, data lost, a wrong cluster) fails the test.

use confboot_tests::host_actor::{Flow, HostActor, cases, report};

/// FAILUREs the harness found in the product, each to be fixed by another
/// change (the item named): the flows, the move as the tables name
/// it, and what the host wins. Any other FAILURE fails the
/// test. In the suite's short run a listed case that no longer fails fails
/// the test too (remove it here then), so the list only shrinks.
const KNOWN_FAILURES: &[(&[&str], &str, &str)] = &[(
    &["init", "join", "rejoin", "recover"],
    "swap disks",
    "a member bootstraps on another member's disk (its data, its state) and the cluster \
         does not know: nothing binds a disk to the node it belongs to (issue 41, items 4 and 9)",
)];

#[test]
fn the_host_as_an_actor_never_gets_a_secret_data_or_a_wrong_cluster() {
    let mode = std::env::var("CONFBOOT_HOST_ACTOR").unwrap_or_default();
    let mut actor = HostActor::start();
    if mode == "refs" {
        for flow in Flow::ALL {
            println!("== {}\n{}", flow.name(), actor.reference(flow).join("\n"));
        }
        return;
    }
    // `only:TEXT`: every case whose "flow | step | move" contains TEXT.
    let only = mode.strip_prefix("only:");
    let full = matches!(mode.as_str(), "all" | "list") || only.is_some();
    let mut chosen = cases(&mut actor, !full);
    if let Some(text) = only {
        chosen.retain(|(f, s, m)| {
            format!("{} | {} | {}", f.name(), s.name(), m.name()).contains(text)
        });
    }
    println!("{} (move, step) pairs to explore", chosen.len());
    if mode == "list" {
        for (f, s, m) in &chosen {
            println!("{} | {} | {}", f.name(), s.name(), m.name());
        }
        return;
    }
    let mut results = Vec::new();
    for (flow, step, m) in &chosen {
        let r = actor.case(*flow, step, m);
        println!(
            "{} | {} | {} -> {}: {} ({:.1} s)",
            flow.name(),
            step.name(),
            m.name(),
            r.outcome.verdict(),
            r.outcome.detail(),
            r.seconds
        );
        results.push(r);
    }
    let tables = report(&results);
    println!("{tables}");
    // scripts/host_actor.sh keeps the tables.
    if let Some(path) = std::env::var_os("CONFBOOT_HOST_ACTOR_REPORT") {
        std::fs::write(&path, &tables).expect("write the report");
    }
    let name = |r: &confboot_tests::host_actor::CaseResult| {
        format!(
            "{} | {} | {}",
            r.flow.name(),
            r.step.name(),
            r.host_move.name()
        )
    };
    let known = |r: &confboot_tests::host_actor::CaseResult| {
        KNOWN_FAILURES
            .iter()
            .any(|(flows, m, _)| flows.contains(&r.flow.name()) && r.host_move.name() == *m)
    };
    let new: Vec<String> = results
        .iter()
        .filter(|r| r.outcome.verdict() == "FAILURE" && !known(r))
        .map(|r| format!("{}: {}", name(r), r.outcome.detail()))
        .collect();
    assert!(new.is_empty(), "the host won: {new:#?}");
    // The controls (an honest guest of the image) must be admitted, or
    // their group shows nothing.
    let controls: Vec<String> = results
        .iter()
        .filter(|r| r.host_move.name().contains("(control)") && r.outcome.verdict() != "CONVERGED")
        .map(|r| format!("{}: {}", name(r), r.outcome.detail()))
        .collect();
    assert!(
        controls.is_empty(),
        "honest controls not admitted: {controls:#?}"
    );
    let fixed: Vec<String> = results
        .iter()
        .filter(|r| known(r) && r.outcome.verdict() != "FAILURE")
        .map(|r| {
            format!(
                "{}: {} {}",
                name(r),
                r.outcome.verdict(),
                r.outcome.detail()
            )
        })
        .collect();
    assert!(
        fixed.is_empty() || mode == "all" || only.is_some(),
        "known FAILUREs no longer fail; remove them from KNOWN_FAILURES: {fixed:#?}"
    );
}
