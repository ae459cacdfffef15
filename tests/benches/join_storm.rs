//! A join storm: distinct nodes (distinct disk UUIDs, real swtpm quotes,
//! a few dozen swtpms each quoting for many nodes in turn) join through
//! three joinsvc replicas (the static release binary) sharing one master
//! secret, each node trying the replicas in its own order with the
//! bootstrapper's backoff (`confboot_tests::storm`).
//!
//! Prints join latency (p50, p99, max), failed joins, tickets against the
//! tokens created on the real API server (the test process's control
//! plane: etcd, kube-apiserver and kube-controller-manager, each replica
//! in a namespace of its own), each replica's tickets and
//! CPU per ticket; then tickets per second of one replica with one and with
//! two worker threads (`--workers`), with the ratio of the two and the CPU
//! cores the replica used (over one core: validations ran at once).
//!
//! Needs the musl release build (`scripts/test.sh` makes it). Run:
//! `scripts/join_storm.sh` or `cargo bench -p confboot-tests --bench
//! join_storm`. `CONFBOOT_STORM_NODES` (default 1000), `CONFBOOT_STORM_TPMS`
//! (32) and `CONFBOOT_STORM_CONCURRENCY` (64) change the storm.

use std::time::Duration;

use confboot_tests::storm::{Storm, StormConfig, StormReport};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print_storm(r: &StormReport) {
    println!(
        "  join latency: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(r.quantile(0.5)),
        ms(r.quantile(0.99)),
        ms(r.quantile(1.0))
    );
    println!(
        "  joined {}, failed {}, attempts {}, {:.0} tickets/s over {:.1} s",
        r.latencies.len(),
        r.failed,
        r.attempts,
        r.tickets_per_second(),
        r.wall.as_secs_f64()
    );
    println!(
        "  tickets {} / tokens created {} (real API server)",
        r.tickets(),
        r.tokens()
    );
    println!("  | replica | tickets | tokens | peak RSS KiB | CPU s | CPU ms per ticket |");
    println!("  |---|---:|---:|---:|---:|---:|");
    for (i, x) in r.replicas.iter().enumerate() {
        println!(
            "  | {i} | {} | {} | {} | {:.2} | {:.3} |",
            x.tickets,
            x.tokens,
            x.peak_rss_kib,
            x.cpu_seconds,
            x.cpu_seconds * 1000.0 / x.tickets.max(1) as f64
        );
    }
}

fn main() {
    let joinsvc = confboot_tests::musl_binary("joinsvc");
    let nodes = env_or("CONFBOOT_STORM_NODES", 1000);
    let tpms = env_or("CONFBOOT_STORM_TPMS", 32);
    let concurrency = env_or("CONFBOOT_STORM_CONCURRENCY", 64);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "join storm: {nodes} nodes over {tpms} swtpms, {concurrency} joining at once, \
         3 joinsvc replicas (default --workers), loopback, {cores} cores shared by all"
    );
    let storm = Storm::start(&joinsvc, tpms, 3, &["-v", "2"]);
    let report = storm.run(&StormConfig {
        nodes,
        concurrency,
        max_rounds: 12,
    });
    print_storm(&report);
    drop(storm);

    // One replica, one or two workers: is validation parallel? The same
    // storm against each; the second's rate over the first's is the ratio.
    let small = (nodes / 3).max(50);
    println!("\none replica, {small} nodes, 16 joining at once:");
    println!("| --workers | tickets/s | × 1 worker | replica CPU cores used | CPU ms per ticket |");
    println!("|---:|---:|---:|---:|---:|");
    let mut first = None;
    for workers in ["1", "2"] {
        let storm = Storm::start(
            &joinsvc,
            tpms.min(16),
            1,
            &["-v", "2", "--workers", workers],
        );
        let r = storm.run(&StormConfig {
            nodes: small,
            concurrency: 16,
            max_rounds: 12,
        });
        assert_eq!(r.failed, 0, "every node joins");
        let rate = r.tickets_per_second();
        let base = *first.get_or_insert(rate);
        let cpu = r.replicas[0].cpu_seconds;
        println!(
            "| {workers} | {rate:.0} | {:.2} | {:.2} | {:.3} |",
            rate / base,
            cpu / r.wall.as_secs_f64(),
            cpu * 1000.0 / r.tickets().max(1) as f64
        );
    }
}
