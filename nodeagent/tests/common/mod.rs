//! The node the verify tests ask: a node agent over a swtpm measured by
//! an event log, its verify service listening.

use std::net::SocketAddr;
use std::process::Command;

use confboot_tests::{ChildProcess, TempDir, addr_after};
use confboot_tpm::event_log::EventLog;
use confboot_tpm::swtpm::Swtpm;
use confboot_vtpm::VtpmIssuer;

/// A running node: its swtpm measured by `log` and marked (or not), its
/// agent; both end when it is dropped.
pub struct AgentNode {
    /// The node's working directory (its event log, the admin's files).
    pub dir: TempDir,
    /// The AK's public key, as the admin trusts it.
    pub ak_public: Vec<u8>,
    /// The node agent (signalled by the tests of its shutdown; each test
    /// binary compiles this module, and not every one uses it).
    #[allow(dead_code)]
    pub agent: ChildProcess,
    /// Where its verify service listens.
    pub addr: SocketAddr,
    _swtpm: Swtpm,
}

impl AgentNode {
    /// Starts a node whose TPM holds `log` and, with `mark`, PCR 15 marked
    /// with that cluster id; `label` names its directory.
    pub fn start(label: &str, log: &[u8], mark: Option<&[u8]>) -> AgentNode {
        let dir = TempDir::new(label);
        let swtpm = Swtpm::start().expect("swtpm starts");
        let ak_public = {
            let issuer = VtpmIssuer::new(swtpm.connect().unwrap()).unwrap();
            issuer
                .with_tpm(|tpm| {
                    EventLog::parse(log).unwrap().extend_into(tpm)?;
                    match mark {
                        Some(id) => confboot_cluster::mark::mark_node(tpm, id),
                        None => Ok(()),
                    }
                })
                .unwrap();
            issuer.ak_public_key()
        };
        let log_file = dir.path().join("binary_bios_measurements");
        std::fs::write(&log_file, log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodeagent"));
        cmd.args(["--tpm", &swtpm.addr().to_string()])
            .arg("--event-log")
            .arg(&log_file)
            .args(["--verify-listen", "127.0.0.1:0", "-v", "3"]);
        let agent = ChildProcess::spawn("nodeagent", cmd);
        let line = agent.wait_for_line("verify service listening on", 3000);
        let addr = addr_after(&line, "listening on ");
        AgentNode {
            dir,
            ak_public,
            agent,
            addr,
            _swtpm: swtpm,
        }
    }
}
