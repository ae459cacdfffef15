//! joinsvc as a real process on loopback: it answers RPC and HTTP, logs what
//! it does, and stops cleanly on SIGTERM.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use confboot::rpc::Client;
use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse, health_check_response};
use confboot_tests::{ChildProcess, addr_after, debug_binary};
use nix::sys::signal::Signal;

fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let code = resp.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

#[test]
fn joinsvc_answers_and_stops_on_sigterm() {
    let mut cmd = Command::new(debug_binary("joinsvc"));
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--health-listen",
        "127.0.0.1:0",
        "-v",
        "4",
    ]);
    let joinsvc = ChildProcess::spawn("joinsvc", cmd);
    let rpc_addr = addr_after(
        &joinsvc.wait_for_line("join API listening on ", 3000),
        "listening on ",
    );
    let http_addr = addr_after(
        &joinsvc.wait_for_line("health and metrics listening on ", 3000),
        "listening on ",
    );

    let mut c = Client::new(TcpStream::connect(rpc_addr).unwrap());
    let r: HealthCheckResponse = c
        .unary(
            "/grpc.health.v1.Health/Check",
            &HealthCheckRequest::default(),
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(
        r.status,
        health_check_response::ServingStatus::Serving as i32
    );
    drop(c);

    assert_eq!(http_get(http_addr, "/healthz"), (200, "ok\n".into()));
    assert_eq!(http_get(http_addr, "/readyz"), (200, "ready\n".into()));
    let (code, metrics) = http_get(http_addr, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("joinsvc_connections_accepted_total 1"),
        "{metrics}"
    );
    assert_eq!(http_get(http_addr, "/nope").0, 404);

    joinsvc.signal(Signal::SIGTERM);
    let (status, log) = joinsvc.wait();
    assert!(
        status.success(),
        "joinsvc exited with {status}:\n{}",
        log.join("\n")
    );
    assert!(
        log.iter().any(|l| l.contains("SIGTERM received")),
        "{}",
        log.join("\n")
    );
    assert!(
        log.last().unwrap().contains("stopped"),
        "{}",
        log.join("\n")
    );
}

#[test]
fn joinsvc_refuses_bad_flags_with_usage() {
    let out = Command::new(debug_binary("joinsvc"))
        .arg("--port")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown option --port") && err.contains("--help"),
        "{err}"
    );
    let out = Command::new(debug_binary("joinsvc"))
        .args(["--listen", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen on not-an-address"));
}
