//! The main job for now: a join service and nodes on one machine. Starts
//! the given joinsvc binary with its Kubernetes API double, starts nodes
//! (each with its own swtpm), and shows what happens to each: attested and
//! given a ticket, or refused. Prints how long each phase took.

use std::path::PathBuf;
use std::time::Instant;

use confboot_tests::cluster::{Joinsvc, Node};

fn ms(t: Instant) -> String {
    format!("{:>7.1} ms", t.elapsed().as_secs_f64() * 1000.0)
}

fn main() {
    let joinsvc_bin = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            eprintln!("usage: demo <path to joinsvc>");
            std::process::exit(2)
        });

    let t = Instant::now();
    let node1 = Node::start("node-1", b"kernel v1");
    let node2 = Node::start("node-2", b"kernel v1");
    let tampered = Node::start("node-3", b"kernel v1, initrd changed by one byte");
    println!(
        "[{}] started 3 nodes, each with its own swtpm; node-3 booted a tampered image",
        ms(t)
    );

    let t = Instant::now();
    let golden = node1.policy();
    let joinsvc = Joinsvc::start(&joinsvc_bin, &golden, &[&node1, &node2, &tampered]);
    println!(
        "[{}] joinsvc listening on {} (health on http://{})",
        ms(t),
        joinsvc.rpc_addr,
        joinsvc.http_addr
    );

    let disks = [
        "1b4e28ba-2fa1-41d2-883f-0016d3cca427",
        "6fa459ea-ee8a-4ca4-894e-db77e160355e",
        "886313e1-3b8a-4372-9b90-0c9aee199e5d",
    ];
    let mut failed = false;
    for (node, disk) in [&node1, &node2, &tampered].into_iter().zip(disks) {
        let t = Instant::now();
        match node.join(joinsvc.rpc_addr, disk) {
            Ok(ticket) => {
                let expected = joinsvc.master_secret.state_disk_key(disk);
                let key_ok = ticket.state_disk_key == expected.expose();
                println!(
                    "[{}] {}: attested, ticket received (disk key {}, token id {}, API server {})",
                    ms(t),
                    node.name,
                    if key_ok {
                        "matches the master secret's derivation"
                    } else {
                        "WRONG"
                    },
                    ticket.token.split('.').next().unwrap_or(""),
                    ticket.api_server_endpoint
                );
                failed |= !key_ok || node.name == "node-3";
            }
            Err(status) => {
                println!("[{}] {}: refused: {status}", ms(t), node.name);
                failed |= node.name != "node-3";
            }
        }
    }

    let (_, metrics) = joinsvc.http_get("/metrics");
    println!("\njoinsvc metrics:");
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains("_bucket"))
    {
        println!("  {line}");
    }
    println!("\njoinsvc log:");
    for line in joinsvc.process.log() {
        println!("  {line}");
    }
    if failed {
        eprintln!("demo: an outcome was not the expected one");
        std::process::exit(1);
    }
}
