//! A node's polling of its peer list, without sockets or netlink: ask a
//! control plane ([`UpdateSource`]), check the answer, apply a new list to
//! the interface ([`PeerSink`]) and only then record it ([`poll_once`]);
//! wait the poll interval with jitter after a good poll and back off after
//! a failed one ([`PollTimer`]). Missed polls, a restarted control plane or
//! a failed apply all end the same way: the next good poll converges.

use std::fmt;
use std::time::Duration;

use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse};

use super::{PeerList, PeerUpdates, VpnError};
use confboot_util::backoff::Backoff;

/// Where updates come from (a control plane over aTLS, in the node agent).
pub trait UpdateSource {
    /// Why a call failed.
    type Error: fmt::Display;
    /// One `GetUpdate` call.
    fn get_update(&mut self, request: &GetUpdateRequest) -> Result<GetUpdateResponse, Self::Error>;
}

/// Where a new list goes (the WireGuard interface, in the node agent).
pub trait PeerSink {
    /// Why applying failed.
    type Error: fmt::Display;
    /// Makes the interface's peers exactly `peers` (the node's own entry
    /// among them is the sink's to skip).
    fn apply(&mut self, peers: &PeerList) -> Result<(), Self::Error>;
}

/// What one poll did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PollOutcome {
    /// The control plane has the version the node applied.
    Unchanged {
        /// That version.
        resource_version: u64,
    },
    /// A new list was applied and recorded.
    Applied {
        /// Its version.
        resource_version: u64,
        /// How many peers it has.
        peers: usize,
    },
    /// The control plane could not be asked.
    Unreachable(String),
    /// The answer was refused; the last good list stays.
    Refused(VpnError),
    /// The interface did not take the list; it is asked for again.
    NotApplied(String),
}

impl PollOutcome {
    /// Whether the poll reached a control plane and left the node with
    /// its current list.
    pub fn is_good(&self) -> bool {
        matches!(
            self,
            PollOutcome::Unchanged { .. } | PollOutcome::Applied { .. }
        )
    }
}

impl fmt::Display for PollOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PollOutcome::Unchanged { resource_version } => {
                write!(f, "peer list unchanged (version {resource_version})")
            }
            PollOutcome::Applied {
                resource_version,
                peers,
            } => write!(
                f,
                "peer list version {resource_version} applied ({peers} peers)"
            ),
            PollOutcome::Unreachable(e) => write!(f, "no peer update: {e}"),
            PollOutcome::Refused(e) => write!(f, "peer update refused, last good list kept: {e}"),
            PollOutcome::NotApplied(e) => write!(f, "peer list not applied: {e}"),
        }
    }
}

/// One poll: ask, check, apply, record.
pub fn poll_once(
    state: &mut PeerUpdates,
    source: &mut impl UpdateSource,
    sink: &mut impl PeerSink,
) -> PollOutcome {
    let response = match source.get_update(&state.request()) {
        Ok(r) => r,
        Err(e) => return PollOutcome::Unreachable(e.to_string()),
    };
    match state.check(&response) {
        Err(e) => PollOutcome::Refused(e),
        Ok(None) => PollOutcome::Unchanged {
            resource_version: state.resource_version(),
        },
        Ok(Some(list)) => match sink.apply(&list) {
            Err(e) => PollOutcome::NotApplied(e.to_string()),
            Ok(()) => {
                let peers = list.peers().len();
                state.commit(response.resource_version, list);
                PollOutcome::Applied {
                    resource_version: response.resource_version,
                    peers,
                }
            }
        },
    }
}

/// How long to wait before the next poll: the interval, shortened by up
/// to a tenth at random (nodes that booted together do not poll together),
/// after a good poll; a backoff with jitter from a second up to the
/// interval after failed ones.
pub struct PollTimer {
    interval: Duration,
    backoff: Backoff,
}

impl PollTimer {
    /// Polls every `interval` (at least a second).
    pub fn new(interval: Duration) -> PollTimer {
        let interval = interval.max(Duration::from_secs(1));
        PollTimer {
            interval,
            backoff: PollTimer::fresh_backoff(interval),
        }
    }

    fn fresh_backoff(interval: Duration) -> Backoff {
        Backoff::new(Duration::from_secs(1).min(interval), interval)
    }

    /// The wait after a poll that ended with `outcome`.
    pub fn next_wait(&mut self, outcome: &PollOutcome) -> Duration {
        if outcome.is_good() {
            self.backoff = PollTimer::fresh_backoff(self.interval);
            // Backoff draws from the upper half of its step: a step of a
            // fifth of the interval gives [1/10, 1/5], so the wait is in
            // [9/10, 1] of the interval.
            let mut jitter = Backoff::new(self.interval / 5, self.interval / 5);
            let shorten = (self.interval / 5).saturating_sub(jitter.next_delay());
            self.interval.saturating_sub(shorten)
        } else {
            self.backoff.next_delay()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::super::peers::tests::wire_peer;
    use super::*;

    /// A control plane as a queue of answers (`None`: unreachable), that
    /// records the versions asked for.
    struct Script {
        answers: VecDeque<Option<GetUpdateResponse>>,
        asked: Vec<u64>,
    }

    impl UpdateSource for Script {
        type Error = &'static str;
        fn get_update(&mut self, r: &GetUpdateRequest) -> Result<GetUpdateResponse, &'static str> {
            self.asked.push(r.resource_version);
            self.answers
                .pop_front()
                .flatten()
                .ok_or("connection refused")
        }
    }

    /// An interface that records what it was given and fails on demand.
    #[derive(Default)]
    struct Interface {
        applied: Vec<Vec<String>>,
        fail_next: bool,
    }

    impl PeerSink for Interface {
        type Error = &'static str;
        fn apply(&mut self, peers: &PeerList) -> Result<(), &'static str> {
            if std::mem::take(&mut self.fail_next) {
                return Err("netlink: device busy");
            }
            self.applied
                .push(peers.peers().iter().map(|p| p.name.clone()).collect());
            Ok(())
        }
    }

    fn answer(version: u64, peers: &[u8]) -> Option<GetUpdateResponse> {
        Some(GetUpdateResponse {
            resource_version: version,
            peers: peers.iter().map(|i| wire_peer(*i)).collect(),
            signature: Vec::new(),
        })
    }

    #[test]
    fn polls_converge_after_missed_polls_a_restart_a_bad_answer_and_a_failed_apply() {
        let mut state = PeerUpdates::new("10.118.0.0/24".parse().unwrap());
        let mut bad = answer(4, &[1, 2]).unwrap();
        bad.peers[1].vpn_pub_key = vec![0; 32];
        let mut source = Script {
            answers: VecDeque::from([
                None,                  // control plane down
                answer(2, &[1, 2]),    // first list
                answer(2, &[]),        // unchanged
                None,                  // missed poll
                Some(bad),             // a spoilt list: refused
                answer(3, &[1, 2, 3]), // the interface fails
                answer(3, &[1, 2, 3]), // asked again, applied
                answer(1, &[1]),       // a restored control plane: followed
            ]),
            asked: Vec::new(),
        };
        let mut interface = Interface::default();
        let mut outcomes = Vec::new();
        for i in 0..8 {
            interface.fail_next = i == 5;
            outcomes.push(poll_once(&mut state, &mut source, &mut interface));
        }
        assert_eq!(
            outcomes[..4],
            [
                PollOutcome::Unreachable("connection refused".into()),
                PollOutcome::Applied {
                    resource_version: 2,
                    peers: 2
                },
                PollOutcome::Unchanged {
                    resource_version: 2
                },
                PollOutcome::Unreachable("connection refused".into()),
            ]
        );
        assert!(matches!(
            outcomes[4],
            PollOutcome::Refused(VpnError::InvalidKey { .. })
        ));
        assert_eq!(
            outcomes[5],
            PollOutcome::NotApplied("netlink: device busy".into())
        );
        assert_eq!(
            outcomes[6..],
            [
                PollOutcome::Applied {
                    resource_version: 3,
                    peers: 3
                },
                PollOutcome::Applied {
                    resource_version: 1,
                    peers: 1
                },
            ]
        );
        // A failed apply is not recorded: the next poll asks for version 2 again.
        assert_eq!(source.asked, [0, 0, 2, 2, 2, 2, 2, 3]);
        assert_eq!(
            interface.applied,
            [
                vec!["node-1", "node-2"],
                vec!["node-1", "node-2", "node-3"],
                vec!["node-1"]
            ]
        );
        assert_eq!(state.resource_version(), 1);
    }

    #[test]
    fn waits_are_the_interval_with_jitter_or_a_backoff_after_failures() {
        let interval = Duration::from_secs(10);
        let mut timer = PollTimer::new(interval);
        let good = PollOutcome::Unchanged {
            resource_version: 1,
        };
        let bad = PollOutcome::Unreachable("down".into());
        let waits: Vec<Duration> = (0..50).map(|_| timer.next_wait(&good)).collect();
        assert!(
            waits
                .iter()
                .all(|w| *w >= interval * 9 / 10 && *w <= interval),
            "{waits:?}"
        );
        assert!(
            waits
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1
        );
        // Failures: from about a second, doubling, never past the interval.
        let backoff: Vec<Duration> = (0..8).map(|_| timer.next_wait(&bad)).collect();
        assert!(backoff[0] <= Duration::from_secs(1), "{backoff:?}");
        assert!(backoff.iter().all(|w| *w <= interval), "{backoff:?}");
        assert!(backoff[7] >= interval / 2, "{backoff:?}");
        // A good poll starts the backoff over.
        timer.next_wait(&good);
        assert!(timer.next_wait(&bad) <= Duration::from_secs(1));
    }
}
