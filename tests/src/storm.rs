//! A join storm: many distinct nodes join through several joinsvc replicas
//! (the real static binary, as processes) that share one master secret.
//!
//! Nodes are cheap here: a node is a disk UUID and a seat on one of a few
//! swtpm instances, each of which quotes for many nodes in turn (the quote
//! is real, bound to the node's own handshake nonce). Every node tries the
//! replicas in its own order, round after round with the bootstrapper's
//! backoff (exponential, jitter in the upper half of each step, doubling up
//! to a cap: `bootstrapper/src/join.rs`), until it has a ticket or runs out
//! of rounds. The bootstrapper is a binary crate that dev-depends on this
//! one, so its join client cannot be linked here; [`join_node`] is the same
//! algorithm over the same `confboot_atls::connect`.
//!
//! What a storm reports ([`StormReport`]): every node's join latency (from
//! its first attempt to its ticket), the nodes that got no ticket, the
//! attempts, and per replica the tickets it issued (as the nodes saw them),
//! the bootstrap tokens it created on the real API server and the CPU it
//! used. Every replica has a namespace of its own on the test process's
//! shared control plane (its own registry and ledger, as each had its own
//! API before); their tokens share kube-system, told apart by their label.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use confboot_attest::Issuer;
use confboot_cluster::ticket::JoinTicket;
use confboot_kms::MasterSecret;
use confboot_proto::join::IssueJoinTicketRequest;
use confboot_util::backoff::Backoff;
use ring::rand::SecureRandom;

use crate::cluster::{Joinsvc, JoinsvcSetup, Node};
use crate::load::{process_cpu_seconds, status_kib};
use crate::tickets::SealedClient;

/// The bootstrapper's first retry delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// The bootstrapper's default largest retry delay (`--retry-max 30`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The bootstrapper's bound on one attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

/// How a storm is run.
#[derive(Clone, Debug)]
pub struct StormConfig {
    /// Distinct nodes (disk UUIDs) that join.
    pub nodes: usize,
    /// Nodes joining at once: each of these threads takes the next node
    /// as soon as its last one has its ticket.
    pub concurrency: usize,
    /// Rounds over all replicas a node tries before it gives up.
    pub max_rounds: u32,
}

/// What one replica did during a storm.
#[derive(Clone, Debug)]
pub struct ReplicaFigures {
    /// Join tickets it issued, as the nodes received them.
    pub tickets: usize,
    /// Bootstrap tokens it created (the API server's Secrets labelled with
    /// its namespace).
    pub tokens: usize,
    /// CPU seconds the joinsvc process used during the storm.
    pub cpu_seconds: f64,
    /// The joinsvc process's peak resident memory (VmHWM) after the storm,
    /// in KiB.
    pub peak_rss_kib: u64,
}

/// The outcome of a storm.
#[derive(Clone, Debug)]
pub struct StormReport {
    /// Join latency of every node that got a ticket, sorted.
    pub latencies: Vec<Duration>,
    /// Nodes that got no ticket.
    pub failed: usize,
    /// Attempts (one connection each) over all nodes.
    pub attempts: usize,
    /// Per replica, in the order of [`Storm::replicas`].
    pub replicas: Vec<ReplicaFigures>,
    /// From the first node's start to the last node's end.
    pub wall: Duration,
}

impl StormReport {
    /// The latency below which `q` (0..=1) of the joined nodes fall.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i.min(self.latencies.len() - 1)]
    }

    /// Tickets per second of wall time.
    pub fn tickets_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Tickets over all replicas, as the nodes received them.
    pub fn tickets(&self) -> usize {
        self.replicas.iter().map(|r| r.tickets).sum()
    }

    /// Tokens over all replicas.
    pub fn tokens(&self) -> usize {
        self.replicas.iter().map(|r| r.tokens).sum()
    }
}

/// The swtpms the nodes quote with and the joinsvc replicas they join.
pub struct Storm {
    /// The TPMs: every node quotes with one of them.
    pub tpms: Vec<Node>,
    /// The replicas, sharing one master secret.
    pub replicas: Vec<Joinsvc>,
    /// The master secret the replicas share.
    pub master_secret: MasterSecret,
}

impl Storm {
    /// Starts `tpms` swtpms (the same measured image) and `replicas`
    /// joinsvc processes of `binary` sharing a master secret, each with
    /// `extra` arguments, trusting every swtpm's AK.
    pub fn start(binary: &std::path::Path, tpms: usize, replicas: usize, extra: &[&str]) -> Storm {
        let tpms: Vec<Node> = (0..tpms)
            .map(|i| Node::start(&format!("tpm-{i}"), b"kernel"))
            .collect();
        let policy = tpms[0].policy();
        let master_secret = MasterSecret::generate().unwrap();
        let replicas = (0..replicas)
            .map(|_| {
                Joinsvc::launch(
                    binary,
                    &policy,
                    JoinsvcSetup {
                        master_secret: master_secret.clone(),
                        pinned_aks: tpms.iter().map(|n| n.issuer.ak_public_key()).collect(),
                        extra: extra.iter().map(|s| s.to_string()).collect(),
                        ..JoinsvcSetup::new()
                    },
                )
            })
            .collect();
        Storm {
            tpms,
            replicas,
            master_secret,
        }
    }

    /// Runs a storm of `config.nodes` nodes against the replicas.
    pub fn run(&self, config: &StormConfig) -> StormReport {
        let endpoints: Vec<std::net::SocketAddr> =
            self.replicas.iter().map(|r| r.rpc_addr).collect();
        let issuers: Vec<Arc<dyn Issuer>> = self
            .tpms
            .iter()
            .map(|n| n.issuer.clone() as Arc<dyn Issuer>)
            .collect();
        let tokens_before: Vec<usize> = self.replicas.iter().map(|r| r.tokens().len()).collect();
        let cpu_before: Vec<f64> = self
            .replicas
            .iter()
            .map(|r| process_cpu_seconds(r.process.id()))
            .collect();
        let next = AtomicUsize::new(0);
        let outcomes: Mutex<Vec<NodeOutcome>> = Mutex::new(Vec::with_capacity(config.nodes));
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..config.concurrency.max(1) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= config.nodes {
                            break;
                        }
                        let node = StormNode {
                            disk_uuid: disk_uuid(i),
                            issuer: Arc::clone(&issuers[i % issuers.len()]),
                            order: shuffled(endpoints.len()),
                            expected_key: self
                                .master_secret
                                .state_disk_key(&disk_uuid(i))
                                .expose()
                                .to_vec(),
                        };
                        let outcome = join_node(&node, &endpoints, config.max_rounds);
                        outcomes.lock().unwrap().push(outcome);
                    }
                });
            }
        });
        let wall = start.elapsed();
        let outcomes = outcomes.into_inner().unwrap();
        let mut latencies: Vec<Duration> = outcomes
            .iter()
            .filter_map(|o| o.served_by.map(|_| o.latency))
            .collect();
        latencies.sort();
        let replicas = self
            .replicas
            .iter()
            .enumerate()
            .map(|(r, replica)| ReplicaFigures {
                tickets: outcomes.iter().filter(|o| o.served_by == Some(r)).count(),
                tokens: replica.tokens().len() - tokens_before[r],
                cpu_seconds: process_cpu_seconds(replica.process.id()) - cpu_before[r],
                peak_rss_kib: status_kib(replica.process.id(), "VmHWM"),
            })
            .collect();
        StormReport {
            failed: outcomes.iter().filter(|o| o.served_by.is_none()).count(),
            attempts: outcomes.iter().map(|o| o.attempts).sum(),
            latencies,
            replicas,
            wall,
        }
    }
}

/// One joining node of a storm.
pub struct StormNode {
    /// Its state disk's UUID (distinct per node).
    pub disk_uuid: String,
    /// The TPM it quotes with.
    pub issuer: Arc<dyn Issuer>,
    /// The order in which it tries the endpoints (indices).
    pub order: Vec<usize>,
    /// The disk key its ticket must carry (derived from the master secret).
    pub expected_key: Vec<u8>,
}

/// How one node's join went.
#[derive(Clone, Debug)]
pub struct NodeOutcome {
    /// The endpoint (index) that issued its ticket; `None`: no ticket.
    pub served_by: Option<usize>,
    /// From its first attempt to its ticket (or to giving up).
    pub latency: Duration,
    /// Connections it made.
    pub attempts: usize,
}

/// The `i`th storm node's disk UUID (version-4 layout, distinct per `i`).
pub fn disk_uuid(i: usize) -> String {
    format!("5f0c2a8e-{:04x}-4d1b-9e3a-{:012x}", (i >> 48) & 0xffff, i)
}

/// `0..n` in a random order (Fisher–Yates with ring's generator).
pub fn shuffled(n: usize) -> Vec<usize> {
    let rng = ring::rand::SystemRandom::new();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let mut b = [0u8; 8];
        rng.fill(&mut b).expect("randomness");
        let j = (u64::from_le_bytes(b) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// One attempt: an aTLS connection in which the node attests and offers
/// a fresh sealing key, and the join call (the ticket's sealed secrets
/// opened, as a node does).
fn attempt(node: &StormNode, endpoint: std::net::SocketAddr) -> Result<JoinTicket, String> {
    let mut client =
        SealedClient::connect(endpoint, ATTEMPT_TIMEOUT, &[], Arc::clone(&node.issuer))
            .map_err(|e| e.to_string())?;
    let req = IssueJoinTicketRequest {
        disk_uuid: node.disk_uuid.clone(),
        ..Default::default()
    };
    client
        .join(&req, ATTEMPT_TIMEOUT)
        .map_err(|s| s.to_string())
}

/// Joins `node`: every endpoint in the node's order, round after round
/// with [`Backoff`] between rounds, at most `max_rounds` rounds. A ticket
/// counts only if it carries the node's own disk key and a token.
pub fn join_node(
    node: &StormNode,
    endpoints: &[std::net::SocketAddr],
    max_rounds: u32,
) -> NodeOutcome {
    let start = Instant::now();
    let mut backoff = Backoff::new(INITIAL_BACKOFF, MAX_BACKOFF);
    let mut attempts = 0;
    for round in 0..max_rounds {
        if round > 0 {
            std::thread::sleep(backoff.next_delay());
        }
        for &e in &node.order {
            attempts += 1;
            match attempt(node, endpoints[e]) {
                Ok(t) if t.state_disk_key.expose() == node.expected_key && !t.token.is_empty() => {
                    return NodeOutcome {
                        served_by: Some(e),
                        latency: start.elapsed(),
                        attempts,
                    };
                }
                Ok(_) => log::warn!("{}: a ticket without its key or a token", node.disk_uuid),
                Err(why) => log::info!("{}: {} not usable: {why}", node.disk_uuid, endpoints[e]),
            }
        }
    }
    NodeOutcome {
        served_by: None,
        latency: start.elapsed(),
        attempts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_uuids_are_distinct_uuids() {
        let all: std::collections::HashSet<String> = (0..5000).map(disk_uuid).collect();
        assert_eq!(all.len(), 5000);
        assert!(all.iter().all(|u| confboot_kms::is_uuid(u)));
    }

    #[test]
    fn every_order_is_a_permutation_and_orders_differ() {
        let orders: std::collections::HashSet<Vec<usize>> = (0..200)
            .map(|_| {
                let o = shuffled(3);
                let mut s = o.clone();
                s.sort();
                assert_eq!(s, [0, 1, 2]);
                o
            })
            .collect();
        assert_eq!(orders.len(), 6, "200 draws give all six orders of three");
    }
}
