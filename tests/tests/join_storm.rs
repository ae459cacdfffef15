//! A small join storm against three replicas of the static joinsvc sharing
//! one master secret: 60 distinct nodes over 4 swtpms, 12 joining at once,
//! each trying the replicas in its own order with the bootstrapper's
//! backoff. Outcomes only, no wall-clock limit: every node gets a ticket
//! with its own disk key, every token created on the real API server
//! belongs to a ticket a node received (replica by replica: each replica
//! has a namespace of its own, and its tokens carry it), and every replica
//! served some. The figures are `benches/join_storm.rs`.
//!
//! Needs the static musl release binaries (`scripts/test.sh` builds them).

use confboot_tests::storm::{Storm, StormConfig};

#[test]
fn sixty_nodes_join_through_three_replicas_without_a_failure_or_a_wasted_token() {
    let storm = Storm::start(&confboot_tests::musl_binary("joinsvc"), 4, 3, &[]);
    let r = storm.run(&StormConfig {
        nodes: 60,
        concurrency: 12,
        max_rounds: 8,
    });
    assert_eq!(r.failed, 0, "every node joins: {r:?}");
    assert_eq!(r.latencies.len(), 60);
    assert_eq!(r.tickets(), 60);
    for (i, replica) in r.replicas.iter().enumerate() {
        assert_eq!(
            replica.tokens, replica.tickets,
            "replica {i}: one token per ticket issued"
        );
        assert!(replica.tickets > 0, "replica {i} served no node: {r:?}");
    }
    assert_eq!(r.tokens(), r.tickets());
}
