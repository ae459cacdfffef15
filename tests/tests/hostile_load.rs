//! A few seconds of every hostile client at once against the real static
//! joinsvc and the bootstrapper's Init and recovery servers, while honest
//! nodes join and the admin calls. Outcomes, not wall-clock limits: honest
//! nodes get tickets during the attack and none fails; no hostile
//! connection gets a ticket, and every kind is closed or refused by the
//! server; joinsvc's open file descriptors and memory stay within bounds
//! derived from its configured limits; the Init and recovery servers answer
//! the admin. The full campaign with figures is `benches/hostile_load.rs`
//! (`scripts/hostile_load.sh`).
//!
//! Needs the static musl release binaries (`scripts/test.sh` builds them).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use confboot_attest::Issuer;
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_tests::hostile::{Attack, Plan, Target};
use confboot_tests::load::{self, AdminNodes, Sampler};

/// joinsvc's configured limits in this test.
const WORKERS: u64 = 16;
const QUEUE: u64 = 64;
const PENDING: u64 = 256;
/// How long the attack runs: past the gate's 5 s timeout and joinsvc's
/// 10 s frame deadline, so every kind meets the bound that ends it.
const ATTACK: Duration = Duration::from_secs(12);

#[test]
fn honest_nodes_join_and_the_admin_is_answered_while_every_hostile_client_loses() {
    let joinsvc_bin = confboot_tests::musl_binary("joinsvc");
    let bootstrapper_bin = confboot_tests::musl_binary("bootstrapper");

    let honest: Vec<Node> = (0..2)
        .map(|i| Node::start(&format!("honest-{i}"), b"kernel"))
        .collect();
    // A genuine node that misbehaves (trusted, admitted image) and a trusted
    // TPM running another image.
    let insider = Node::start("insider", b"kernel");
    let other = Node::start("other-image", b"another kernel");
    for n in [&insider, &other] {
        confboot_tests::hostile::renice_process_tree(n.swtpm_pid(), 10);
    }
    let trusted: Vec<&Node> = honest.iter().chain([&insider, &other]).collect();
    let joinsvc = Joinsvc::start_with(
        &joinsvc_bin,
        &honest[0].policy(),
        &trusted,
        &[
            "-v",
            "2",
            "--workers",
            &WORKERS.to_string(),
            "--queue",
            &QUEUE.to_string(),
            "--pending",
            &PENDING.to_string(),
        ],
    );
    let pid = joinsvc.process.id();
    let admin = AdminNodes::start(&bootstrapper_bin);
    let (idle_fds, idle_rss) = (load::open_fds(pid), load::status_kib(pid, "VmRSS"));

    let plan = Plan {
        idle: 150,
        trickle_hello: 20,
        trickle_frame: 2,
        trickle_interval: Duration::from_millis(100),
        flood_burst: 8,
        pause: Duration::from_millis(50),
        nice: Some(10),
        cpu: None,
        full_handshakes: true,
        only: None,
    };
    let sampler = Sampler::start(pid);
    let attacks = [
        Attack::start(
            &Target {
                addr: joinsvc.rpc_addr,
                insider: Some(insider.issuer.clone() as Arc<dyn Issuer>),
                other_image: Some(other.issuer.clone() as Arc<dyn Issuer>),
            },
            &plan,
        ),
        Attack::start(
            &Target {
                addr: admin.init_addr(),
                insider: None,
                other_image: None,
            },
            &plan,
        ),
        Attack::start(
            &Target {
                addr: admin.recover_addr(),
                insider: None,
                other_image: None,
            },
            &plan,
        ),
    ];
    // Let the attack take hold before anyone honest calls.
    std::thread::sleep(Duration::from_secs(1));

    let stop = Arc::new(AtomicBool::new(false));
    let (tickets, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let joiners: Vec<_> = honest
        .into_iter()
        .map(|node| {
            let (stop, tickets, failures) = (stop.clone(), tickets.clone(), failures.clone());
            let addr = joinsvc.rpc_addr;
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match node.join(addr, "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f") {
                        Ok(_) => tickets.fetch_add(1, Ordering::Relaxed),
                        Err(s) => {
                            eprintln!("honest join failed: {s}");
                            failures.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            })
        })
        .collect();
    // The admin calls both servers, a second apart, while it lasts.
    let mut admin_answers = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() + Duration::from_secs(1) < ATTACK {
        admin_answers.push(("Init", admin.ask_init()));
        admin_answers.push(("Recover", admin.ask_recover()));
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    for j in joiners {
        j.join().unwrap();
    }
    let reports: Vec<_> = attacks.into_iter().map(Attack::stop).collect();
    let peaks = sampler.stop();

    let (tickets, failures) = (
        tickets.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
    );
    println!("honest tickets during the attack: {tickets}, failed joins: {failures}");
    let busy = joinsvc
        .process
        .log()
        .iter()
        .filter(|l| l.contains("all workers busy"))
        .count();
    println!("joinsvc refused {busy} connections with every worker busy");
    for (name, p) in ["Init", "Recover"].iter().zip(admin.processes()) {
        let log = p.log();
        let count = |needle: &str| log.iter().filter(|l| l.contains(needle)).count();
        println!(
            "{name} server refused {} connections with every worker busy, {} over a peer's share",
            count("all workers busy"),
            count("holds 2 already")
        );
    }
    for (what, answer) in &admin_answers {
        println!("admin {what}: {answer:?}");
    }
    for (server, report) in ["joinsvc", "Init", "Recover"].iter().zip(&reports) {
        for (kind, r) in report {
            println!("{server:>8} {kind:<28} {r:?}");
        }
    }
    println!(
        "joinsvc: fds {idle_fds} idle, {} peak; RSS {idle_rss} KiB idle, {} KiB peak ({} samples)",
        peaks.fds, peaks.rss_kib, peaks.samples
    );

    // Honest nodes keep joining, and none is turned away.
    assert!(tickets >= 4, "only {tickets} honest tickets under attack");
    assert_eq!(failures, 0, "honest joins failed under attack");
    // The admin is answered by both servers, every time.
    for (what, answer) in &admin_answers {
        assert!(answer.is_ok(), "admin {what} under attack: {answer:?}");
    }
    // No hostile client gets a ticket; every kind ran and was closed or
    // refused by the server (a flood closes its own connections).
    for (server, report) in ["joinsvc", "Init", "Recover"].iter().zip(&reports) {
        assert_eq!(
            report.len(),
            if *server == "joinsvc" { 11 } else { 7 },
            "{server}: every kind ran"
        );
        for (kind, r) in report {
            assert_eq!(r.tickets, 0, "{server}: {kind} got a ticket");
            assert!(r.connections > 0, "{server}: {kind} made no connection");
            if *kind != "handshake flood" {
                assert!(
                    r.closed_by_server > 0,
                    "{server}: {kind} was never closed by the server: {r:?}"
                );
            }
        }
    }
    let joinsvc_report = &reports[0];
    for kind in [
        "TLS, other PCRs",
        "TLS, wrong session",
        "TLS, replayed attestation",
        "TLS, relayed attestation",
    ] {
        let r = joinsvc_report[kind];
        assert!(r.answered > 0, "{kind}: joinsvc never refused it: {r:?}");
    }
    // The 4 GiB prefix inside TLS is answered RESOURCE_EXHAUSTED.
    assert!(joinsvc_report["4 GiB prefix in TLS"].answered > 0);
    // Bounded: every connection joinsvc holds is at its gate, in a worker or
    // in the queue, at two descriptors each (the socket and the listener's
    // handle on it for a stop), beside what it has open anyway.
    let fd_bound = idle_fds + 2 * (PENDING + WORKERS + QUEUE) + 16;
    assert!(
        peaks.fds <= fd_bound,
        "joinsvc held {} fds (bound {fd_bound})",
        peaks.fds
    );
    // Memory: what a handshake or call in each worker and queued connection
    // may take (a TLS connection's buffers and a frame in flight, 256 KiB
    // allowed for each) beside the idle process.
    let rss_bound = idle_rss + (WORKERS + QUEUE) * 256 + 8 * 1024;
    assert!(
        peaks.rss_kib <= rss_bound,
        "joinsvc's RSS reached {} KiB (bound {rss_bound} KiB)",
        peaks.rss_kib
    );
}
