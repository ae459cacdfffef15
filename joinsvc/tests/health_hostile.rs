//! joinsvc's health and metrics port under a hostile client: an endless
//! header line, many silent connections. The port is plain HTTP on the
//! node's network, which the host controls; it must stay bounded in memory
//! and threads and keep answering.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use confboot_tests::cluster::{Joinsvc, Node};

/// A line of `/proc/PID/status`, in its unit (kB for memory).
fn proc_status(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

#[test]
fn an_endless_header_and_silent_connections_do_not_grow_joinsvc() {
    let node = Node::start("node", b"kernel");
    let joinsvc = Joinsvc::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_joinsvc")),
        &node.policy(),
        &[&node],
    );
    let pid = joinsvc.process.id();
    assert_eq!(joinsvc.http_get("/healthz").0, 200);
    let rss_before = proc_status(pid, "VmRSS:");

    // One header line that never ends: 64 MiB of it, sent as fast as
    // joinsvc reads. A bounded reader closes the connection early.
    let mut endless = TcpStream::connect(joinsvc.http_addr).unwrap();
    endless
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    endless
        .write_all(b"GET /healthz HTTP/1.1\r\nX-Endless: ")
        .unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    let started = Instant::now();
    while sent < 64 << 20 && started.elapsed() < Duration::from_secs(60) {
        match endless.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    let rss_after = proc_status(pid, "VmRSS:");
    println!(
        "endless header: {} KiB sent before joinsvc closed; RSS {rss_before} → {rss_after} kB",
        sent / 1024
    );
    assert!(
        sent < 16 << 20,
        "joinsvc kept reading an endless header line ({} MiB)",
        sent >> 20
    );
    assert!(
        rss_after < rss_before + 8 * 1024,
        "joinsvc's RSS grew from {rss_before} to {rss_after} kB on one header line"
    );
    drop(endless);

    // 300 connections that say nothing: the threads stay bounded and the
    // port keeps answering.
    let threads_before = proc_status(pid, "Threads:");
    let silent: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(joinsvc.http_addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let threads = proc_status(pid, "Threads:");
    println!(
        "{} silent connections: threads {threads_before} → {threads}",
        silent.len()
    );
    assert!(
        threads <= threads_before + 8,
        "joinsvc started a thread per connection: {threads_before} → {threads}"
    );
    let answered = (0..100).any(|_| {
        let ok = TcpStream::connect(joinsvc.http_addr)
            .and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                s.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")?;
                let mut answer = String::new();
                s.read_to_string(&mut answer)?;
                Ok(answer.starts_with("HTTP/1.1 200"))
            })
            .unwrap_or(false);
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    assert!(answered, "the health port stopped answering");
    drop(silent);
}
