//! The host as a test actor: a harness whose moves are the host's powers,
//! applied to the boot state machine of real bootstrapper processes (each
//! with its swtpm and a LUKS2 disk image file), a real joinsvc and the real
//! `confboot` CLI, and a judge that classifies how each ends.
//!
//! [`HostActor`] owns every node's disk image and sits on both network
//! paths: a [`proxy::HostProxy`] between the node and joinsvc, another
//! between the admin's CLI and the node. It runs one boot flow ([`Flow`]:
//! init, join, rejoin, recover) per case, pauses the node at a step (SIGSTOP
//! to its process group when its log shows the step's line; SIGCONT after
//! the move), and applies one [`Move`]: a header field or token edited
//! ([`header`]), the disk rolled back or swapped, the node killed, a
//! connection dropped, delayed, trickled, replayed, reordered or relayed
//! elsewhere, the host's own join service answering first, the host's own
//! Init or Recover with its own secrets, another node's name.
//!
//! It also changes joinsvc's ledger objects between two steps
//! ([`LedgerMove`]: the registry deleted or restored from an old copy,
//! both churned), and plays TDX and SEV-SNP guests of its own
//! ([`variants`]) against a join service and the admin's CLI.
//!
//! The steps are the lines a node logs in an honest run of the flow, read
//! from a reference run ([`HostActor::reference`]), plus two of the host's
//! own: before the node starts ([`Step::Start`]) and the network exchange
//! of the flow ([`Step::Exchange`]).
//!
//! The judge ([`Outcome`]): the node must end
//! - **REFUSED**: still waiting for an honest peer when its time is up
//!   (nothing changed), or the host's own call was refused;
//! - **CONVERGED**: bootstrapped, PCR 15 marked for the admin's cluster,
//!   its disk opened by the cluster's key, its data (a marker written after
//!   its first boot) still there;
//! - **STOPPED**: exited non-zero (header-only disks map nothing, so there
//!   is no open disk to leave behind);
//!
//! and anything else is a **FAILURE**: a known secret (master secret, init
//! secret, a disk key or volume key) in what crossed the proxies, in the
//! node's log (the host reads the console; also with its line breaks
//! taken out, as a wrapping console splits lines) or in the disk image's
//! bytes, raw, as hex in either case or as base64 in either alphabet,
//! padded or not, alone or inside a longer value (a `kms://` URI carries
//! the master secret as base64url); data lost (a disk that held data
//! reformatted, its key slots or marker changed by the node); PCR 15
//! marked for a cluster the admin did not make; or a node that says it
//! bootstrapped without all of the above.
//!
//! Whatever the outcome (REFUSED and STOPPED too), the judge compares the
//! disk with the one the host's last move left: a header the host left
//! that the node reformatted, destroyed or whose key slots it rewrote, a
//! marker lost, or a header the node wrote that the key the cluster
//! derives for its UUID does not open (a format under a foreign key) is a
//! FAILURE. A node that bootstrapped is judged by the disk it then used:
//! another node's disk, or its own older than the cluster last confirmed
//! (without the data written after its first boot), is a FAILURE; no flow
//! lets the cluster accept either knowingly, so none is excused.

pub mod header;
pub mod proxy;
pub mod variants;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use confboot_kms::{MasterSecret, init_secret};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::ChildProcess;
use crate::cluster::{Joinsvc, JoinsvcSetup, NodeDir, NodeTpm, TempDir, workspace_binary};
use proxy::{HostProxy, Tamper};

/// The image every node runs (measured into PCR 4).
const IMAGE: &[u8] = b"node image v1";
/// Where the node's data starts on its disk (LUKS2 data offset, 16 MiB).
const DATA_OFFSET: u64 = 16 << 20;
/// The marker's length: what the node's OS wrote after its first boot.
const MARKER_LEN: usize = 4096;
/// The key-slot area of a header as the node writes it.
const KEYSLOTS: std::ops::Range<u64> = 32768..(32768 + 258048);
/// How long one boot may run before the judge looks at it.
const BOOT_BOUND: Duration = Duration::from_secs(40);
/// A boot that made no progress this long (no new line but retries, no
/// connection open through the host, no call left to make) is judged as
/// waiting.
const IDLE_BOUND: Duration = Duration::from_secs(8);
/// Lines a waiting node repeats: they are no progress.
const RETRY_LINES: [&str; 8] = [
    "no join service known yet",
    "ticket received",
    "not usable",
    "refused this node",
    "thrown away",
    "issued a vTPM quote",
    "aTLS connection",
    "rpc: ",
];
/// A node that logged this many refusals or failed attempts, with no call
/// left to make, keeps failing alike: judged as waiting.
const RETRIES_BOUND: usize = 4;
/// The salt the host writes into a header's salt token (hex of "host").
const HOST_SALT_HEX: &str = "686f7374686f7374686f7374686f7374686f7374686f7374686f7374686f7374";
/// The measurement salt of the host's own cluster.
const HOST_CLUSTER_SALT: [u8; 32] = [0x48; 32];
/// The admin's cluster file (`confboot recover --cluster-file`).
const ADMIN_CLUSTER_FILE: &str = "confboot-cluster.json";
/// The host's cluster file, with its own cluster's salt.
const HOST_CLUSTER_FILE: &str = "host-cluster.json";

/// How often the admin tries its call (a tampered connection fails one).
const ADMIN_ATTEMPTS: usize = 3;

/// A boot flow of the node's state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flow {
    /// A blank node made the first control plane by the admin's Init.
    Init,
    /// A blank node joining through joinsvc.
    Join,
    /// A joined node (its data on its disk) rejoining after a reboot.
    Rejoin,
    /// A joined node that reaches no join service, recovered by the admin.
    Recover,
    /// A TDX or SEV-SNP guest the host plays in the test process
    /// ([`variants`]).
    Guest(variants::GuestFlow),
}

impl Flow {
    /// Every flow.
    pub const ALL: [Flow; 4] = [Flow::Init, Flow::Join, Flow::Rejoin, Flow::Recover];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Flow::Init => "init",
            Flow::Join => "join",
            Flow::Rejoin => "rejoin",
            Flow::Recover => "recover",
            Flow::Guest(g) => g.name(),
        }
    }

    /// Whether the flow starts from a disk that holds data.
    fn starts_with_data(self) -> bool {
        matches!(self, Flow::Rejoin | Flow::Recover)
    }
}

/// A point of a boot where the host moves.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Before the node starts (the disk as the host presents it).
    Start,
    /// After the node logged the `nth` (from 0) line containing `needle`.
    Line {
        /// The line's text up to its first variable word.
        needle: String,
        /// Which occurrence of that text.
        nth: usize,
    },
    /// The flow's network exchange: node and join service, or the admin's
    /// CLI and the node.
    Exchange,
}

impl Step {
    /// Its name in tables.
    pub fn name(&self) -> String {
        match self {
            Step::Start => "(before start)".into(),
            Step::Exchange => "(the exchange)".into(),
            Step::Line { needle, nth: 0 } => needle.clone(),
            Step::Line { needle, nth } => format!("{needle} (#{})", nth + 1),
        }
    }
}

/// A header edit the host makes: its name and the change to the JSON.
#[derive(Clone, Copy)]
pub struct HeaderEdit {
    /// What it changes, for tables.
    pub name: &'static str,
    /// The change.
    pub apply: fn(&mut Value),
}

impl std::fmt::Debug for HeaderEdit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for HeaderEdit {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

fn set(v: &mut Value, path: &[&str], to: Value) {
    let mut at = v;
    for p in &path[..path.len() - 1] {
        at = &mut at[*p];
    }
    if let Some(o) = at.as_object_mut() {
        o.insert(path[path.len() - 1].to_string(), to);
    }
}

fn remove_token(v: &mut Value, kind: &str) {
    if let Some(tokens) = v["tokens"].as_object_mut() {
        tokens.retain(|_, t| t["type"] != kind);
    }
}

fn edit_token(v: &mut Value, kind: &str, edit: impl Fn(&mut serde_json::Map<String, Value>)) {
    if let Some(tokens) = v["tokens"].as_object_mut() {
        for t in tokens.values_mut() {
            if t["type"] == kind
                && let Some(o) = t.as_object_mut()
            {
                edit(o);
            }
        }
    }
}

fn add_token(v: &mut Value, token: Value) {
    if let Some(tokens) = v["tokens"].as_object_mut() {
        let id = (0..32)
            .map(|i| i.to_string())
            .find(|i| !tokens.contains_key(i))
            .unwrap_or_else(|| "31".into());
        tokens.insert(id, token);
    }
}

/// Every header edit the host tries: each field of the header the node
/// writes, and each token added, removed or changed.
pub const HEADER_EDITS: &[HeaderEdit] = &[
    HeaderEdit {
        name: "segment cipher aes-xts-null",
        apply: |v| set(v, &["segments", "0", "encryption"], json!("aes-xts-null")),
    },
    HeaderEdit {
        name: "segment cipher aes-cbc-plain",
        apply: |v| set(v, &["segments", "0", "encryption"], json!("aes-cbc-plain")),
    },
    HeaderEdit {
        name: "segment sector size 4096",
        apply: |v| {
            let now = v["segments"]["0"]["sector_size"].as_u64().unwrap_or(512);
            set(
                v,
                &["segments", "0", "sector_size"],
                json!(if now == 4096 { 512 } else { 4096 }),
            )
        },
    },
    HeaderEdit {
        name: "segment offset 0",
        apply: |v| set(v, &["segments", "0", "offset"], json!("0")),
    },
    HeaderEdit {
        name: "segment size fixed",
        apply: |v| set(v, &["segments", "0", "size"], json!("4096")),
    },
    HeaderEdit {
        name: "segment iv_tweak 1",
        apply: |v| set(v, &["segments", "0", "iv_tweak"], json!("1")),
    },
    HeaderEdit {
        name: "second segment",
        apply: |v| {
            let s = v["segments"]["0"].clone();
            set(v, &["segments", "1"], s)
        },
    },
    HeaderEdit {
        name: "key slot key size 32",
        apply: |v| set(v, &["keyslots", "0", "key_size"], json!(32)),
    },
    HeaderEdit {
        name: "key slot area cipher",
        apply: |v| {
            set(
                v,
                &["keyslots", "0", "area", "encryption"],
                json!("aes-cbc-plain"),
            )
        },
    },
    HeaderEdit {
        name: "key slot area offset",
        apply: |v| set(v, &["keyslots", "0", "area", "offset"], json!("65536")),
    },
    HeaderEdit {
        name: "key slot AF stripes 1",
        apply: |v| set(v, &["keyslots", "0", "af", "stripes"], json!(1)),
    },
    HeaderEdit {
        name: "KDF PBKDF2 10^9 iterations",
        apply: |v| {
            set(
                v,
                &["keyslots", "0", "kdf", "iterations"],
                json!(1_000_000_000u64),
            )
        },
    },
    HeaderEdit {
        name: "KDF Argon2id 1 GiB x 32",
        apply: |v| {
            set(
                v,
                &["keyslots", "0", "kdf"],
                json!({"type": "argon2id", "time": 32, "memory": 1048576, "cpus": 4,
                       "salt": v["keyslots"]["0"]["kdf"]["salt"].clone()}),
            )
        },
    },
    HeaderEdit {
        name: "KDF hash sha1",
        apply: |v| set(v, &["keyslots", "0", "kdf", "hash"], json!("sha1")),
    },
    HeaderEdit {
        name: "second key slot",
        apply: |v| {
            let s = v["keyslots"]["0"].clone();
            set(v, &["keyslots", "1"], s)
        },
    },
    HeaderEdit {
        name: "digest iterations 1",
        apply: |v| set(v, &["digests", "0", "iterations"], json!(1)),
    },
    HeaderEdit {
        name: "digest hash sha1",
        apply: |v| set(v, &["digests", "0", "hash"], json!("sha1")),
    },
    HeaderEdit {
        name: "token bootstrapped removed",
        apply: |v| remove_token(v, "confboot-bootstrapped"),
    },
    HeaderEdit {
        name: "token bootstrapped added",
        apply: |v| {
            remove_token(v, "confboot-bootstrapped");
            add_token(v, json!({"type": "confboot-bootstrapped", "keyslots": []}))
        },
    },
    HeaderEdit {
        name: "token salt removed",
        apply: |v| remove_token(v, "confboot-measurement-salt"),
    },
    HeaderEdit {
        name: "token salt changed",
        apply: |v| {
            edit_token(v, "confboot-measurement-salt", |t| {
                for (k, val) in t.iter_mut() {
                    if k != "type" && k != "keyslots" && val.is_string() {
                        *val = json!(HOST_SALT_HEX);
                    }
                }
            })
        },
    },
    HeaderEdit {
        name: "token salt added",
        apply: |v| {
            remove_token(v, "confboot-measurement-salt");
            add_token(
                v,
                json!({"type": "confboot-measurement-salt", "keyslots": [], "salt": HOST_SALT_HEX}),
            )
        },
    },
    HeaderEdit {
        name: "token state-fs removed",
        apply: |v| remove_token(v, "confboot-state-fs"),
    },
    HeaderEdit {
        name: "token state-fs added",
        apply: |v| {
            remove_token(v, "confboot-state-fs");
            add_token(v, json!({"type": "confboot-state-fs", "keyslots": []}))
        },
    },
    HeaderEdit {
        name: "token bound to key slot 0",
        apply: |v| {
            if let Some(tokens) = v["tokens"].as_object_mut() {
                for t in tokens.values_mut() {
                    t["keyslots"] = json!(["0"]);
                }
            }
        },
    },
    HeaderEdit {
        name: "foreign token",
        apply: |v| add_token(v, json!({"type": "systemd-tpm2", "keyslots": [], "x": "y"})),
    },
];

/// A change to the disk image the host makes while the node is paused
/// (or before it starts).
#[derive(Clone, Debug, PartialEq)]
pub enum DiskMove {
    /// One header field or token edited (both copies, checksums right).
    Edit(HeaderEdit),
    /// The header's UUID changed.
    Uuid,
    /// The disk as it was when this boot started.
    RollbackToBootStart,
    /// The disk as it was during its first boot, before that boot
    /// completed (a blank disk for a node in its first boot).
    RollbackToOld,
    /// Another member's disk (with its data) in place of this one.
    SwapWithOther,
    /// A disk the host formatted for its own cluster (its own master
    /// secret, tokens and first boot), followed by the host's own Recover
    /// with that master secret.
    HostFormatted,
}

/// A move of the host.
#[derive(Clone, Debug, PartialEq)]
pub enum Move {
    /// The node's process group killed (a power-off), then an honest boot.
    Kill,
    /// A change of the disk image.
    Disk(DiskMove),
    /// One connection of the exchange tampered with.
    Net(NetMove),
    /// The host's own Init (its own init secret and master secret) or
    /// Recover (its own master secret), before the admin's.
    HostCall,
    /// The node told another member's name (as a spoofed DHCP reply does).
    SpoofName,
    /// What the host's TDX or SEV-SNP guest is ([`variants`]).
    Guest(variants::GuestMove),
    /// A change of joinsvc's ledger objects (what a host that restores a
    /// control plane's etcd, or drives its API, does).
    Ledger(LedgerMove),
}

/// What the host does to joinsvc's ledger objects (the ConfigMaps of
/// `joinsvc/src/configmap.rs`) between two steps of a boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerMove {
    /// The registry (`confboot-vpn-peers`: names, addresses, generations)
    /// deleted.
    DeleteRegistry,
    /// The registry as it was after the subject's first join, before
    /// the other member joined (an etcd restored from an old snapshot:
    /// its `resourceVersion` as it was then).
    RestoreOldRegistry,
    /// The served-launch filter (`confboot-issued-filter`) deleted.
    DeleteFilter,
    /// Both objects rewritten three times with their own content (new
    /// `resourceVersion`s, nothing else changed).
    Churn,
}

/// joinsvc's ledger objects by name, as read (`None`: none).
type LedgerObjects = Vec<(&'static str, Option<Value>)>;

/// The registry's ConfigMap.
const REGISTRY: &str = "confboot-vpn-peers";
/// The served-launch filter's ConfigMap.
const FILTER: &str = "confboot-issued-filter";

/// What the host does to the exchange's first connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetMove {
    /// Closed at once.
    Drop,
    /// Held 5 s before relaying.
    Delay,
    /// The peer's answer one byte each 50 ms.
    Trickle,
    /// The answer of an earlier honest exchange.
    Replay,
    /// The peer's first two TLS records swapped.
    Reorder,
    /// Relayed to another node of the same image instead.
    RelayToOther,
    /// The host's own join service (its own master secret, its own TPM)
    /// answers.
    AnswerFirst,
    /// The admin's Init or Recover diverted to a bootstrapped member (the
    /// other member's genuine TPM, PCR 15 marked for the admin's
    /// cluster), whose aTLS server keeps what it decrypts.
    DivertToMember,
}

impl Move {
    /// Its name in tables.
    pub fn name(&self) -> String {
        match self {
            Move::Kill => "kill".into(),
            Move::Disk(DiskMove::Edit(e)) => format!("edit: {}", e.name),
            Move::Disk(DiskMove::Uuid) => "edit: UUID".into(),
            Move::Disk(DiskMove::RollbackToBootStart) => "rollback to boot start".into(),
            Move::Disk(DiskMove::RollbackToOld) => "rollback to first boot".into(),
            Move::Disk(DiskMove::SwapWithOther) => "swap disks".into(),
            Move::Disk(DiskMove::HostFormatted) => "host's disk + host's Recover".into(),
            Move::Net(n) => match n {
                NetMove::Drop => "net: drop",
                NetMove::Delay => "net: delay 5 s",
                NetMove::Trickle => "net: trickle",
                NetMove::Replay => "net: replay",
                NetMove::Reorder => "net: reorder",
                NetMove::RelayToOther => "net: relay to other node",
                NetMove::AnswerFirst => "net: host answers first",
                NetMove::DivertToMember => "net: admin's call to a bootstrapped member",
            }
            .into(),
            Move::HostCall => "host's own Init/Recover".into(),
            Move::SpoofName => "spoofed node name".into(),
            Move::Guest(g) => g.name().into(),
            Move::Ledger(l) => match l {
                LedgerMove::DeleteRegistry => "ledger: registry deleted",
                LedgerMove::RestoreOldRegistry => "ledger: old registry restored",
                LedgerMove::DeleteFilter => "ledger: filter deleted",
                LedgerMove::Churn => "ledger: objects churned",
            }
            .into(),
        }
    }

    /// The kind, for the per-move counts.
    pub fn kind(&self) -> String {
        match self {
            Move::Disk(DiskMove::Edit(_)) | Move::Disk(DiskMove::Uuid) => "header edit".into(),
            other => other.name(),
        }
    }

    /// Every move.
    pub fn all() -> Vec<Move> {
        let mut moves = vec![Move::Kill];
        moves.extend(HEADER_EDITS.iter().map(|e| Move::Disk(DiskMove::Edit(*e))));
        moves.extend(
            [
                DiskMove::Uuid,
                DiskMove::RollbackToBootStart,
                DiskMove::RollbackToOld,
                DiskMove::SwapWithOther,
                DiskMove::HostFormatted,
            ]
            .into_iter()
            .map(Move::Disk),
        );
        moves.extend(
            [
                NetMove::Drop,
                NetMove::Delay,
                NetMove::Trickle,
                NetMove::Replay,
                NetMove::Reorder,
                NetMove::RelayToOther,
                NetMove::AnswerFirst,
                NetMove::DivertToMember,
            ]
            .into_iter()
            .map(Move::Net),
        );
        moves.push(Move::HostCall);
        moves.push(Move::SpoofName);
        moves.extend(
            [
                LedgerMove::DeleteRegistry,
                LedgerMove::RestoreOldRegistry,
                LedgerMove::DeleteFilter,
                LedgerMove::Churn,
            ]
            .into_iter()
            .map(Move::Ledger),
        );
        moves
    }

    /// Whether the move applies at `step` of `flow`.
    pub fn applies(&self, flow: Flow, step: &Step) -> bool {
        match (self, flow) {
            (Move::Guest(g), Flow::Guest(f)) => return g.applies(f, step),
            (Move::Guest(_), _) | (_, Flow::Guest(_)) => return false,
            _ => {}
        }
        match (self, step) {
            (Move::Kill, Step::Line { .. }) => true,
            (Move::Disk(DiskMove::HostFormatted), Step::Start) => true,
            (Move::Disk(DiskMove::HostFormatted), _) => false,
            (Move::Disk(DiskMove::RollbackToBootStart), Step::Start) => false,
            // A blank disk has no header to edit and nothing older.
            (
                Move::Disk(DiskMove::Edit(_) | DiskMove::Uuid | DiskMove::RollbackToOld),
                Step::Start,
            ) if !flow.starts_with_data() => false,
            (Move::Disk(_), Step::Start | Step::Line { .. }) => true,
            (Move::Net(NetMove::DivertToMember), Step::Exchange) => {
                matches!(flow, Flow::Init | Flow::Recover)
            }
            (Move::Net(_) | Move::HostCall, Step::Exchange) => true,
            (Move::SpoofName, Step::Start) => matches!(flow, Flow::Join | Flow::Rejoin),
            // The flows that reach joinsvc. The served-launch filter is
            // SEV-SNP's (no vTPM admission reads it): its moves are the
            // SNP guests' ([`variants::GuestMove::FilterDeleted`]).
            (Move::Ledger(LedgerMove::DeleteFilter), _) => false,
            (Move::Ledger(_), Step::Start | Step::Line { .. }) => {
                matches!(flow, Flow::Join | Flow::Rejoin)
            }
            _ => false,
        }
    }
}

/// How a (move, step) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Refused or still waiting, nothing changed.
    Refused(String),
    /// Bootstrapped for the admin's cluster, nothing lost.
    Converged(String),
    /// Exited non-zero, nothing disclosed or lost.
    Stopped(String),
    /// A secret disclosed, data lost or a wrong cluster.
    Failure(String),
    /// The move was not made: its step never came in this run (a line
    /// that depends on timing), or there was nothing to move (no header
    /// to edit yet); not counted as explored.
    NotMade(String),
}

impl Outcome {
    /// The verdict's name.
    pub fn verdict(&self) -> &'static str {
        match self {
            Outcome::Refused(_) => "REFUSED",
            Outcome::Converged(_) => "CONVERGED",
            Outcome::Stopped(_) => "STOPPED",
            Outcome::Failure(_) => "FAILURE",
            Outcome::NotMade(_) => "NOT MADE",
        }
    }

    /// What the judge saw.
    pub fn detail(&self) -> &str {
        match self {
            Outcome::Refused(d)
            | Outcome::Converged(d)
            | Outcome::Stopped(d)
            | Outcome::Failure(d)
            | Outcome::NotMade(d) => d,
        }
    }
}

/// One explored (move, step) of a flow and how it ended.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The flow.
    pub flow: Flow,
    /// The step.
    pub step: Step,
    /// The move.
    pub host_move: Move,
    /// The judge's verdict.
    pub outcome: Outcome,
    /// How long the case took.
    pub seconds: f64,
}

/// What the host knows it must never see: each secret with its name.
struct Secrets(Vec<(String, Vec<u8>)>);

impl Secrets {
    fn add(&mut self, name: impl Into<String>, bytes: &[u8]) {
        if !self.0.iter().any(|(_, b)| b == bytes) {
            self.0.push((name.into(), bytes.to_vec()));
        }
    }

    /// The first secret found in `bytes`, raw or in any encoding it
    /// travels in ([`encodings`]). Runs of zeros (most of a sparse disk
    /// image) are skipped whole.
    fn found_in(&self, what: &str, bytes: &[u8]) -> Option<String> {
        const CHUNK: usize = 64 << 10;
        const OVERLAP: usize = 256;
        let zeros = [0u8; CHUNK];
        // The search runs in std's string search (fast in a debug build
        // too): the text forms in the window read as text (every ASCII
        // byte stays itself), the raw bytes as hex in the window's hex.
        let needles: Vec<(&str, String, Vec<String>)> = self
            .0
            .iter()
            .map(|(name, secret)| {
                let text = encodings(secret)
                    .into_iter()
                    .filter(|e| e.is_ascii())
                    .map(|e| String::from_utf8(e).expect("ASCII"))
                    .collect();
                (name.as_str(), confboot_util::hex::encode(secret), text)
            })
            .collect();
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + CHUNK).min(bytes.len());
            if bytes[start..end] != zeros[..end - start] {
                let window = &bytes[start..(end + OVERLAP).min(bytes.len())];
                let text = String::from_utf8_lossy(window);
                let hexed = confboot_util::hex::encode(window);
                for (name, raw, encoded) in &needles {
                    let raw_found = hexed.match_indices(raw.as_str()).any(|(i, _)| i % 2 == 0);
                    if raw_found || encoded.iter().any(|e| text.contains(e.as_str())) {
                        return Some(format!("{name} found in {what}"));
                    }
                }
            }
            start = end;
        }
        None
    }

    /// [`Secrets::found_in`] for text the host reads as lines (a console
    /// log): also with every line break taken out, as a log that wraps
    /// long lines splits a secret across them.
    fn found_in_text(&self, what: &str, text: &str) -> Option<String> {
        self.found_in(what, text.as_bytes()).or_else(|| {
            let joined: Vec<u8> = text
                .bytes()
                .filter(|b| !matches!(b, b'\n' | b'\r'))
                .collect();
            self.found_in(&format!("{what} (across a line break)"), &joined)
        })
    }
}

/// Every form `secret` can travel in, each a byte string that occurs in
/// any text carrying it: the raw bytes; hex in lower and upper case;
/// base64 in the standard and the URL-safe alphabet, padded and not, on
/// its own or inside a longer encoded value (the secret starting at any
/// of the three byte offsets of a base64 group: for each, the characters
/// of the groups the secret fills alone, which every such encoding holds
/// whatever stands before or after it). A `kms://cluster-kms?key=...`
/// URI carries the master secret as base64url.
fn encodings(secret: &[u8]) -> Vec<Vec<u8>> {
    use confboot_util::base64;
    let hex = confboot_util::hex::encode(secret);
    let std = base64::encode(secret);
    let url = base64::encode_url(secret);
    let mut out = vec![
        secret.to_vec(),
        hex.clone().into_bytes(),
        hex.to_ascii_uppercase().into_bytes(),
        std.clone().into_bytes(),
        std.trim_end_matches('=').as_bytes().to_vec(),
        url.clone().into_bytes(),
        url.trim_end_matches('=').as_bytes().to_vec(),
    ];
    // Groups the secret fills alone: at least 12 bytes' worth (96 bits)
    // of the secret, so a short secret is not matched by chance.
    for skip in 0..3 {
        let whole = secret.len().saturating_sub(skip) / 3 * 3;
        if whole < 12 {
            continue;
        }
        let inner = &secret[skip..skip + whole];
        for e in [base64::encode(inner), base64::encode_url(inner)] {
            out.push(e.into_bytes());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Data a member's OS wrote on its disk after its first boot.
#[derive(Clone)]
struct DataRecord {
    keyslots: Vec<u8>,
    marker: Vec<u8>,
}

fn read_range(disk: &Path, range: std::ops::Range<u64>) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(disk).expect("open the disk image");
    f.seek(SeekFrom::Start(range.start)).unwrap();
    let mut buf = vec![0u8; (range.end - range.start) as usize];
    f.read_exact(&mut buf).unwrap();
    buf
}

fn write_at(disk: &Path, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(disk).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

/// A log line without its timestamp and level, for matching steps.
fn message(line: &str) -> &str {
    line.split_once("bootstrapper")
        .map(|(_, rest)| rest.trim_start_matches([':', ' ']))
        .unwrap_or(line)
}

/// Whether `line` is the node's last word of a bootstrap that completed
/// (`bootstrapped (Joined) in 0.4 s`).
fn is_bootstrapped_line(line: &str) -> bool {
    message(line).starts_with("bootstrapped (")
}

/// Whether a boot's log ends bootstrapped.
fn bootstrapped(log: &[String]) -> bool {
    log.iter().any(|l| is_bootstrapped_line(l))
}

/// The steps of a reference log: each line's text up to its first word
/// with a digit or a '/' (UUIDs, addresses, times differ between runs),
/// and which occurrence of that text it is.
pub fn steps_of(log: &[String]) -> Vec<Step> {
    let from = log.iter().position(|l| l.contains("plan: ")).unwrap_or(0);
    let to = log
        .iter()
        .position(|l| is_bootstrapped_line(l))
        .unwrap_or(log.len().saturating_sub(1));
    let mut steps = Vec::new();
    for (i, l) in log.iter().enumerate().take(to + 1).skip(from) {
        // The state machine's lines; DEBUG lines (quotes issued, retry
        // rounds, connections ended) mark no state.
        if l.contains(" DEBUG ") {
            continue;
        }
        let needle = message(l)
            .split(' ')
            .take_while(|w| !w.chars().any(|c| c.is_ascii_digit() || c == '/'))
            .collect::<Vec<_>>()
            .join(" ");
        if needle.trim().len() < 4 {
            continue;
        }
        let nth = log[..i]
            .iter()
            .filter(|l| message(l).contains(&needle))
            .count();
        let step = Step::Line { needle, nth };
        if !steps.contains(&step) {
            steps.push(step);
        }
    }
    steps
}

/// The binaries a campaign runs.
struct Binaries {
    bootstrapper: PathBuf,
    confboot: PathBuf,
}

/// What the admin and the host call the node with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Caller {
    Admin,
    Host,
}

/// A running CLI call.
struct CliCall {
    child: Child,
    /// Whether it is an Init (else a Recover).
    init: bool,
    /// The cluster file an Init writes (`--state-out`).
    state_out: PathBuf,
}

/// One boot of the subject node and what happened in it.
struct Boot {
    node: ChildProcess,
    tpm: NodeTpm,
}

/// What a boot ended with.
struct BootEnd {
    status: Option<std::process::ExitStatus>,
    log: Vec<String>,
    pcr15: [u8; 32],
    admin_succeeded: bool,
    host_succeeded: bool,
    killed: bool,
    /// Whether the pause's move was made (its step was reached).
    moved: bool,
    /// Whether the node formatted its disk while the disk held data.
    formatted_data: bool,
    /// Why the pause's move could not be made.
    move_error: Option<String>,
}

/// The host, its cluster's honest parts and the subject node.
pub struct HostActor {
    bins: Binaries,
    admin: TempDir,
    master: MasterSecret,
    salt: Vec<u8>,
    host_master: MasterSecret,
    _cp_tpm: NodeTpm,
    joinsvc: Joinsvc,
    _host_cp_tpm: NodeTpm,
    host_joinsvc: Joinsvc,
    subject: NodeDir,
    other: NodeDir,
    join_proxy: HostProxy,
    admin_proxy: HostProxy,
    golden: PathBuf,
    golden_old: PathBuf,
    golden_other: PathBuf,
    host_disk: PathBuf,
    data: BTreeMap<String, DataRecord>,
    secrets: Secrets,
    admin_salts: Vec<Vec<u8>>,
    references: BTreeMap<Flow, Vec<String>>,
    cli_serial: usize,
    cli_seen: usize,
    dead_endpoint: String,
    /// Whether an Init of the admin succeeded in this case.
    admin_inited: bool,
    /// The subject's disk as the host's last move of this case left it.
    host_left: Option<DiskState>,
    /// The other nodes' disks (UUID, whose).
    others: BTreeMap<String, String>,
    /// The host's TDX and SEV-SNP guests, set up on first use.
    guests: Option<variants::GuestActor>,
    /// The registry as it was after the subject's first join.
    ledger_old: Option<Value>,
    /// The bootstrapped member the admin's call was diverted to, and its
    /// TPM.
    diverted: Option<(variants::HostNode, NodeTpm)>,
    /// The ledger objects as the host's ledger move found them (put back
    /// after the case), and joinsvc's log length then.
    ledger_moved: Option<(LedgerObjects, usize)>,
}

impl HostActor {
    /// Sets up the cluster (a control plane's TPM marked for it, joinsvc),
    /// the host's own cluster (its TPM, its joinsvc, a disk of its own),
    /// the subject node and another member, both joined once (their disks
    /// with data kept as golden copies).
    pub fn start() -> HostActor {
        let bins = Binaries {
            bootstrapper: workspace_binary("bootstrapper"),
            confboot: workspace_binary("confboot"),
        };
        let admin = TempDir::new("host-actor-admin");
        let ap = |n: &str| admin.path().join(n);
        let init_secret = b"host actor test: correct horse battery staple".to_vec();
        std::fs::write(ap("init-secret"), &init_secret).unwrap();
        std::fs::write(ap("host-init-secret"), "the host's own init secret").unwrap();
        let init_hash = init_secret::hash(&init_secret, init_secret::MIN_ITERATIONS);
        std::fs::write(ap("init-secret-hash"), &init_hash).unwrap();

        let cp = NodeDir::new(&bins.bootstrapper, "actor-cp");
        let cp_tpm = cp.boot_tpm(IMAGE);
        let host_cp = NodeDir::new(&bins.bootstrapper, "actor-host-cp");
        let host_cp_tpm = host_cp.boot_tpm(IMAGE);
        let subject = NodeDir::new(&bins.bootstrapper, "actor-node")
            .trusting_join_service_ak(&cp_tpm.ak_public);
        let other = NodeDir::new(&bins.bootstrapper, "actor-other")
            .trusting_join_service_ak(&cp_tpm.ak_public);
        let host_node = NodeDir::new(&bins.bootstrapper, "actor-host-node")
            .trusting_join_service_ak(&host_cp_tpm.ak_public);
        let (subject_ak, other_ak, host_node_ak) = {
            let s = subject.boot_tpm(IMAGE);
            let o = other.boot_tpm(IMAGE);
            let h = host_node.boot_tpm(IMAGE);
            s.write_policy(&ap("measurements.json"));
            (
                s.ak_public.clone(),
                o.ak_public.clone(),
                h.ak_public.clone(),
            )
        };
        std::fs::write(
            ap("pinned"),
            [&subject_ak, &other_ak]
                .map(|k| confboot_util::hex::encode(k))
                .join("\n"),
        )
        .unwrap();
        let policy = subject.boot_tpm(IMAGE).policy();

        // The admin's cluster.
        let setup = JoinsvcSetup {
            pinned_aks: vec![subject_ak.clone(), other_ak.clone()],
            extra: vec!["--tpm".into(), cp_tpm.tpm_arg()],
            ..JoinsvcSetup::new()
        };
        let master = setup.master_secret.clone();
        let salt = setup.measurement_salt.clone();
        cp_tpm.mark(&setup.cluster_id());
        write_master_secret(&ap("master-secret.json"), &master);
        write_cluster_file(&ap(ADMIN_CLUSTER_FILE), &salt);
        let joinsvc = Joinsvc::launch(&workspace_binary("joinsvc"), &policy, setup);

        // The host's own cluster: its own master secret, on a TPM of its own.
        let host_setup = JoinsvcSetup {
            pinned_aks: vec![subject_ak, other_ak, host_node_ak],
            extra: vec!["--tpm".into(), host_cp_tpm.tpm_arg()],
            measurement_salt: HOST_CLUSTER_SALT.to_vec(),
            ..JoinsvcSetup::new()
        };
        let host_master = host_setup.master_secret.clone();
        host_cp_tpm.mark(&host_setup.cluster_id());
        write_master_secret(&ap("host-master-secret.json"), &host_master);
        write_cluster_file(&ap(HOST_CLUSTER_FILE), &HOST_CLUSTER_SALT);
        let host_joinsvc = Joinsvc::launch(&workspace_binary("joinsvc"), &policy, host_setup);

        let join_proxy = HostProxy::start();
        join_proxy.set_target(joinsvc.rpc_addr);
        let admin_proxy = HostProxy::start();
        let dead_endpoint = format!("127.0.0.1:{}", crate::free_port());

        let mut secrets = Secrets(Vec::new());
        secrets.add("the master secret's key", master.key().expose());
        secrets.add("the master secret's salt", master.salt().expose());
        secrets.add(
            "the measurement secret",
            master.measurement_secret().expose(),
        );
        secrets.add("the init secret", &init_secret);

        let golden = admin.path().join("golden.img");
        let golden_old = admin.path().join("golden-old.img");
        let golden_other = admin.path().join("golden-other.img");
        let host_disk = admin.path().join("host-disk.img");
        let mut actor = HostActor {
            bins,
            admin,
            master,
            salt,
            host_master,
            _cp_tpm: cp_tpm,
            joinsvc,
            _host_cp_tpm: host_cp_tpm,
            host_joinsvc,
            subject,
            other,
            join_proxy,
            admin_proxy,
            golden,
            golden_old,
            golden_other,
            host_disk,
            data: BTreeMap::new(),
            secrets,
            admin_salts: Vec::new(),
            references: BTreeMap::new(),
            cli_serial: 0,
            cli_seen: 0,
            dead_endpoint,
            admin_inited: false,
            host_left: None,
            others: BTreeMap::new(),
            guests: None,
            ledger_old: None,
            diverted: None,
            ledger_moved: None,
        };
        actor.admin_salts.push(actor.salt.clone());

        // The golden disks: the subject joins (a snapshot taken right after
        // its disk is formatted: its "old" disk), the other member joins,
        // and the host's node joins the host's cluster.
        blank(&actor.subject.p("disk.img"));
        let log = actor.honest_join(&actor.subject, Some(&actor.golden_old));
        actor.references.insert(Flow::Join, log);
        actor.record_data(&actor.subject.p("disk.img"), 1);
        std::fs::copy(actor.subject.p("disk.img"), &actor.golden).unwrap();
        actor.ledger_old = actor.joinsvc.configmap(REGISTRY);
        blank(&actor.other.p("disk.img"));
        actor.honest_join(&actor.other, None);
        actor.record_data(&actor.other.p("disk.img"), 2);
        std::fs::copy(actor.other.p("disk.img"), &actor.golden_other).unwrap();
        let other_uuid = header::read_uuid(&actor.golden_other).expect("the other's disk");
        actor.others.insert(other_uuid, "actor-other".into());
        blank(&host_node.p("disk.img"));
        {
            let tpm = host_node.boot_tpm(IMAGE);
            let endpoint = actor.host_joinsvc.rpc_addr.to_string();
            let (status, log) = host_node
                .bootstrapper(&tpm, &["--join-endpoint", &endpoint])
                .wait();
            assert!(
                status.success(),
                "the host's node joins the host's cluster:\n{}",
                log.join("\n")
            );
        }
        std::fs::copy(host_node.p("disk.img"), &actor.host_disk).unwrap();
        let host_uuid = header::read_uuid(&actor.host_disk).expect("the host's disk");
        actor.others.insert(host_uuid, "the host's node".into());
        actor
    }

    /// An honest first join of `node` through joinsvc (no proxy); with
    /// `snapshot`, the disk is copied there right after it was formatted.
    fn honest_join(&self, node: &NodeDir, snapshot: Option<&Path>) -> Vec<String> {
        let tpm = node.boot_tpm(IMAGE);
        let endpoint = self.join_proxy.addr.to_string();
        let b = node.bootstrapper(&tpm, &["--join-endpoint", &endpoint]);
        if let Some(snapshot) = snapshot {
            let t = Instant::now();
            while !b
                .log()
                .iter()
                .any(|l| l.contains("state disk formatted") || l.contains("formatted"))
                && t.elapsed() < BOOT_BOUND
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = killpg(Pid::from_raw(b.id() as i32), Signal::SIGSTOP);
            std::fs::copy(node.p("disk.img"), snapshot).unwrap();
            let _ = killpg(Pid::from_raw(b.id() as i32), Signal::SIGCONT);
        }
        let (status, log) = b.wait();
        assert!(status.success(), "an honest join:\n{}", log.join("\n"));
        assert!(bootstrapped(&log), "{}", log.join("\n"));
        log
    }

    /// Writes a marker into the data area of the disk at `disk` (what the
    /// node's OS writes) and records it with the disk's key slots; the
    /// disk key and volume key become secrets the host must never see.
    fn record_data(&mut self, disk: &Path, seed: u64) {
        let uuid = header::read_uuid(disk).expect("a LUKS2 disk");
        let marker = crate::XorShift::new(seed ^ 0x5eed_da7a).bytes(MARKER_LEN);
        write_at(disk, DATA_OFFSET, &marker);
        let key = self.master.state_disk_key(&uuid);
        self.secrets
            .add(format!("the disk key of {uuid}"), key.expose());
        // The volume key, read with cryptsetup only from a header as the
        // node writes it (a host-edited KDF could cost minutes).
        let as_written = match header::read_json(&self.golden) {
            Ok(golden) => {
                header::read_json(disk).map(|j| header_shape(&j)).ok()
                    == Some(header_shape(&golden))
            }
            Err(_) => true,
        };
        if as_written && let Some(vk) = volume_key(disk, key.expose()) {
            self.secrets.add(format!("the volume key of {uuid}"), &vk);
        }
        self.data.insert(
            uuid,
            DataRecord {
                keyslots: read_range(disk, KEYSLOTS),
                marker,
            },
        );
    }

    /// The reference log of `flow`: an honest run, recorded once.
    pub fn reference(&mut self, flow: Flow) -> Vec<String> {
        if let Some(log) = self.references.get(&flow) {
            return log.clone();
        }
        let (ends, _) = self.run_flow(flow, None, &Step::Start);
        let end = ends.last().expect("a boot ran");
        assert!(
            end.status.is_some_and(|s| s.success()) && bootstrapped(&end.log),
            "the honest {} flow converges:\n{}",
            flow.name(),
            end.log.join("\n")
        );
        self.references.insert(flow, end.log.clone());
        end.log.clone()
    }

    /// Every step of `flow` the host can move at.
    pub fn steps(&mut self, flow: Flow) -> Vec<Step> {
        let mut steps = vec![Step::Start, Step::Exchange];
        steps.extend(steps_of(&self.reference(flow)));
        steps
    }

    /// Runs `flow` with `host_move` at `step` and judges how it ends.
    pub fn case(&mut self, flow: Flow, step: &Step, host_move: &Move) -> CaseResult {
        let t = Instant::now();
        if let (Flow::Guest(f), Move::Guest(m)) = (flow, host_move) {
            let outcome = self
                .guests
                .get_or_insert_with(variants::GuestActor::start)
                .case(f, step, *m);
            return CaseResult {
                flow,
                step: step.clone(),
                host_move: host_move.clone(),
                outcome,
                seconds: t.elapsed().as_secs_f64(),
            };
        }
        // The secrets of this case's disks are searched in this case only
        // (the search's cost grows with their number).
        let secrets_before = self.secrets.0.len();
        self.ledger_moved = None;
        // A ledger object that does not exist cannot be moved.
        let missing = match host_move {
            Move::Ledger(LedgerMove::DeleteFilter) => Some(FILTER),
            Move::Ledger(LedgerMove::DeleteRegistry | LedgerMove::RestoreOldRegistry) => {
                Some(REGISTRY)
            }
            _ => None,
        }
        .filter(|name| self.joinsvc.configmap(name).is_none());
        if let Some(name) = missing {
            return CaseResult {
                flow,
                step: step.clone(),
                host_move: host_move.clone(),
                outcome: Outcome::NotMade(format!("no {name} ConfigMap to move")),
                seconds: t.elapsed().as_secs_f64(),
            };
        }
        let (ends, expected) = self.run_flow(flow, Some(host_move), step);
        let mut outcome = self.judge(flow, &ends, expected.as_ref());
        if let Some((before, log_at)) = self.ledger_moved.take() {
            if let Move::Ledger(l) = host_move
                && *l != LedgerMove::Churn
                && !matches!(outcome, Outcome::Failure(_) | Outcome::NotMade(_))
                && let Some(line) = self
                    .joinsvc
                    .process
                    .log()
                    .into_iter()
                    .skip(log_at)
                    .find(|l| l.contains(" ticket issued for disk "))
            {
                outcome = Outcome::Failure(format!(
                    "admitted on a ledger the host {}: {}",
                    if *l == LedgerMove::RestoreOldRegistry {
                        "rolled back"
                    } else {
                        "deleted"
                    },
                    short(
                        line.split_once("joinsvc")
                            .map_or(&line[..], |(_, r)| r.trim_start_matches([':', ' ']))
                    )
                ));
            }
            // The ledger as the move found it, for the next case (a churn
            // moved it forward: it stays so).
            if !matches!(host_move, Move::Ledger(LedgerMove::Churn)) {
                let kube = &self.joinsvc;
                for (name, object) in before {
                    match object {
                        Some(o) => kube.restore_configmap(name, o),
                        None => kube.delete_configmap(name),
                    }
                }
            }
        }
        self.secrets.0.truncate(secrets_before);
        if std::env::var_os("CONFBOOT_HOST_ACTOR_DEBUG").is_some() {
            for (i, end) in ends.iter().enumerate() {
                eprintln!("---- boot {i} ({:?}):\n{}", end.status, end.log.join("\n"));
            }
            for n in self.cli_seen..self.cli_serial {
                let out = self.admin.path().join(format!("cli-{}.out", n + 1));
                eprintln!(
                    "---- CLI call {}:\n{}",
                    n + 1,
                    std::fs::read_to_string(out).unwrap_or_default()
                );
            }
        }
        self.cli_seen = self.cli_serial;
        CaseResult {
            flow,
            step: step.clone(),
            host_move: host_move.clone(),
            outcome,
            seconds: t.elapsed().as_secs_f64(),
        }
    }

    /// The disk a flow starts from.
    fn starting_disk(&self, flow: Flow) {
        let disk = self.subject.p("disk.img");
        match flow {
            Flow::Init | Flow::Join | Flow::Guest(_) => blank(&disk),
            Flow::Rejoin | Flow::Recover => {
                std::fs::copy(&self.golden, &disk).unwrap();
            }
        }
    }

    /// The bootstrapper's arguments for `flow`.
    fn node_args(&self, flow: Flow, spoof: bool) -> Vec<String> {
        let hash = std::fs::read_to_string(self.admin.path().join("init-secret-hash")).unwrap();
        let mut args = vec!["--init-secret-hash".to_string(), hash];
        match flow {
            Flow::Init | Flow::Guest(_) => {}
            Flow::Join | Flow::Rejoin => {
                args.extend(["--join-endpoint".into(), self.join_proxy.addr.to_string()]);
            }
            Flow::Recover => {
                args.extend(["--join-endpoint".into(), self.join_proxy.addr.to_string()]);
            }
        }
        if spoof {
            args.extend(["--node-name".into(), "actor-other".into()]);
        }
        args
    }

    /// A bootstrapped member of the admin's cluster the host controls: the
    /// other member's TPM booted with the image, PCR 15 marked with the
    /// cluster's mark, behind an aTLS server that keeps what it decrypts.
    fn marked_member(&self) -> (variants::HostNode, NodeTpm) {
        let tpm = self.other.boot_tpm(IMAGE);
        let salt = confboot_kms::MeasurementSalt::try_from(&self.salt[..]).expect("a salt");
        let id = confboot_kms::derive_cluster_id(self.master.measurement_secret().expose(), &salt);
        tpm.mark(&id);
        let issuer = confboot_vtpm::VtpmIssuer::new(tpm.swtpm.connect().expect("connect to swtpm"))
            .expect("the member's attestation key");
        (variants::HostNode::start(std::sync::Arc::new(issuer)), tpm)
    }

    /// Applies a ledger move (the node paused or not started); keeps the
    /// objects as it found them and joinsvc's log length.
    fn apply_ledger_move(&mut self, m: LedgerMove) -> Result<(), String> {
        let kube = &self.joinsvc;
        let before: LedgerObjects = [REGISTRY, FILTER]
            .into_iter()
            .map(|n| (n, kube.configmap(n)))
            .collect();
        let exists = |n: &str| before.iter().any(|(b, o)| *b == n && o.is_some());
        match m {
            LedgerMove::DeleteRegistry | LedgerMove::RestoreOldRegistry if !exists(REGISTRY) => {
                return Err("no registry yet".into());
            }
            LedgerMove::DeleteFilter if !exists(FILTER) => return Err("no filter yet".into()),
            LedgerMove::DeleteRegistry => kube.delete_configmap(REGISTRY),
            LedgerMove::DeleteFilter => kube.delete_configmap(FILTER),
            LedgerMove::RestoreOldRegistry => {
                let old = self.ledger_old.clone().ok_or("no old registry")?;
                kube.restore_configmap(REGISTRY, old);
            }
            LedgerMove::Churn => {
                for _ in 0..3 {
                    for (name, object) in &before {
                        if let Some(o) = object {
                            kube.put_configmap_data(name, o["data"].clone());
                        }
                    }
                }
            }
        }
        self.ledger_moved = Some((before, self.joinsvc.process.log().len()));
        Ok(())
    }

    /// Applies a disk move to the subject's disk (the node paused or not
    /// started); `boot_start` is the disk as this boot found it.
    fn apply_disk_move(&self, m: &DiskMove, flow: Flow, boot_start: &Path) -> Result<(), String> {
        let disk = self.subject.p("disk.img");
        let copy = |from: &Path| {
            std::fs::copy(from, &disk)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        match m {
            DiskMove::Edit(e) => header::edit_json(&disk, e.apply).map_err(|e| e.to_string()),
            DiskMove::Uuid => header::write_uuid(&disk, "00000000-0000-4000-8000-0000000a0a0a")
                .map_err(|e| e.to_string()),
            DiskMove::RollbackToBootStart => copy(boot_start),
            DiskMove::RollbackToOld => {
                if flow.starts_with_data() {
                    copy(&self.golden_old)
                } else {
                    blank(&disk);
                    Ok(())
                }
            }
            DiskMove::SwapWithOther => copy(&self.golden_other),
            DiskMove::HostFormatted => copy(&self.host_disk),
        }
    }

    /// Runs `flow` (with the move, if any, at `step`): one boot, and a
    /// second honest one when the first was killed or its disk changed
    /// under it. Returns each boot's end and the disk as the host left it
    /// (its UUID and whether it held data).
    fn run_flow(
        &mut self,
        flow: Flow,
        host_move: Option<&Move>,
        step: &Step,
    ) -> (Vec<BootEnd>, Option<ExpectedDisk>) {
        self.starting_disk(flow);
        self.admin_inited = false;
        // The admin's cluster is joinsvc's until an Init of this case made one.
        write_cluster_file(&self.admin.path().join(ADMIN_CLUSTER_FILE), &self.salt);
        self.join_proxy.clear_plans();
        self.admin_proxy.clear_plans();
        self.join_proxy.set_target(self.joinsvc.rpc_addr);
        let _ = self.join_proxy.take_seen();
        let _ = self.admin_proxy.take_seen();
        let disk = self.subject.p("disk.img");
        let boot_start = self.admin.path().join("boot-start.img");
        std::fs::copy(&disk, &boot_start).unwrap();

        let mut expected = None;
        let mut host_calls = false;
        let mut spoof = false;
        let mut other_node: Option<(ChildProcess, NodeTpm)> = None;
        if let Some(m) = host_move {
            match (m, step) {
                (Move::Disk(d), Step::Start) => {
                    if let Err(e) = self.apply_disk_move(d, flow, &boot_start) {
                        panic!(
                            "the host's move {} failed before the node started: {e}",
                            m.name()
                        );
                    }
                    host_calls = matches!(d, DiskMove::HostFormatted);
                }
                (Move::Ledger(l), Step::Start) => {
                    if let Err(e) = self.apply_ledger_move(*l) {
                        panic!("the host's move {} failed: {e}", m.name());
                    }
                }
                (Move::SpoofName, _) => spoof = true,
                (Move::HostCall, _) => host_calls = true,
                (Move::Net(n), Step::Exchange) => {
                    let proxy = match flow {
                        Flow::Join | Flow::Rejoin => &self.join_proxy,
                        Flow::Init | Flow::Recover | Flow::Guest(_) => &self.admin_proxy,
                    };
                    let tamper = match n {
                        NetMove::Drop => Tamper::Drop,
                        NetMove::Delay => Tamper::Delay(Duration::from_secs(5)),
                        NetMove::Trickle => Tamper::Trickle(Duration::from_millis(50)),
                        NetMove::Replay => Tamper::Replay,
                        NetMove::Reorder => Tamper::Reorder,
                        NetMove::AnswerFirst => Tamper::RelayTo(self.host_joinsvc.rpc_addr),
                        NetMove::DivertToMember => {
                            let (node, tpm) = self.marked_member();
                            let addr = node.addr;
                            self.diverted = Some((node, tpm));
                            Tamper::RelayTo(addr)
                        }
                        NetMove::RelayToOther => {
                            let (addr, node) = self.start_other(flow);
                            other_node = Some(node);
                            Tamper::RelayTo(addr)
                        }
                    };
                    match (n, flow) {
                        // The host's join service answers where the node
                        // asks for tickets, in every flow.
                        (NetMove::AnswerFirst, _) => self.join_proxy.tamper_next(&[tamper]),
                        _ => proxy.tamper_next(&[tamper]),
                    }
                }
                _ => {}
            }
        }
        if matches!(flow, Flow::Recover) {
            // No join service answers this node: the host's own may, once.
            self.join_proxy
                .set_target(self.dead_endpoint.parse().unwrap());
        }
        if expected.is_none() {
            expected = self.expected_disk(&disk);
        }
        // The disk as the host left it (until a move at a step).
        self.host_left = Some(DiskState::read(&disk));

        let mut ends = Vec::new();
        let pause_move =
            host_move.filter(|m| matches!(m, Move::Kill | Move::Disk(_) | Move::Ledger(_)));
        let line_step = match step {
            Step::Line { needle, nth } => Some((needle.clone(), *nth)),
            _ => None,
        };
        let end = self.boot(
            flow,
            &self.node_args(flow, spoof),
            host_calls,
            pause_move.zip(line_step.clone()),
            &boot_start,
            &mut expected,
        );
        let again = end.move_error.is_none()
            && (end.killed || (matches!(pause_move, Some(Move::Disk(_))) && line_step.is_some()));
        // The OS writes its data once the first boot converged.
        if !flow.starts_with_data()
            && end.status.is_some_and(|s| s.success())
            && bootstrapped(&end.log)
            && let Ok(uuid) = header::read_uuid(&disk)
            && !self.data.contains_key(&uuid)
        {
            self.record_data(&disk, 100 + self.data.len() as u64);
            expected = self.expected_disk(&disk);
            // The OS's marker is the honest side's write.
            if let Some(left) = &mut self.host_left {
                left.marker = DiskState::read(&disk).marker;
            }
        }
        ends.push(end);
        if again {
            std::fs::copy(&disk, &boot_start).unwrap();
            let end = self.boot(
                flow,
                &self.node_args(flow, spoof),
                false,
                None,
                &boot_start,
                &mut expected,
            );
            ends.push(end);
        }
        if let Some((node, tpm)) = other_node {
            node.kill();
            let other_log = node.log();
            let pcr = tpm.pcr15();
            ends.push(BootEnd {
                status: None,
                log: other_log,
                pcr15: pcr,
                admin_succeeded: false,
                host_succeeded: false,
                killed: true,
                moved: true,
                formatted_data: false,
                move_error: None,
            });
        }
        (ends, expected)
    }

    /// Starts the other member where the relayed exchange goes: awaiting
    /// Init on a blank disk (init and join flows) or Recover on its disk.
    fn start_other(&self, flow: Flow) -> (std::net::SocketAddr, (ChildProcess, NodeTpm)) {
        let disk = self.other.p("disk.img");
        match flow {
            Flow::Init | Flow::Join | Flow::Guest(_) => blank(&disk),
            Flow::Rejoin | Flow::Recover => {
                std::fs::copy(&self.golden_other, &disk).unwrap();
            }
        }
        let hash = std::fs::read_to_string(self.admin.path().join("init-secret-hash")).unwrap();
        let tpm = self.other.boot_tpm(IMAGE);
        let node = self.other.bootstrapper(
            &tpm,
            &[
                "--init-secret-hash",
                &hash,
                "--join-endpoint",
                &self.dead_endpoint,
            ],
        );
        let api = if flow.starts_with_data() {
            "recovery"
        } else {
            "init"
        };
        let line = node.wait_for_line(&format!("{api} API listening on "), 3000);
        let addr = crate::addr_after(&line, "listening on ");
        (addr, (node, tpm))
    }

    /// Keeps the salt of the disk's salt token as one of the admin's,
    /// unless the host wrote it. The admin's Init sends a salt the CLI
    /// records only when Init returns; the node writes it to its header
    /// before it marks. The host writes only its own salts (its edits'
    /// and its own cluster's), so any other salt a header holds came from
    /// the admin (through Init, or through joinsvc's tickets).
    fn harvest_salt(&mut self, disk: &Path) {
        let Ok(json) = header::read_json(disk) else {
            return;
        };
        let Some(tokens) = json["tokens"].as_object() else {
            return;
        };
        for t in tokens.values() {
            if t["type"] == "confboot-measurement-salt"
                && let Some(hex) = t["salt"].as_str()
                && hex != HOST_SALT_HEX
                && let Ok(salt) = confboot_util::hex::decode(hex)
                && salt != HOST_CLUSTER_SALT
                && !self.admin_salts.contains(&salt)
            {
                self.admin_salts.push(salt);
            }
        }
    }

    fn expected_disk(&self, disk: &Path) -> Option<ExpectedDisk> {
        let uuid = header::read_uuid(disk).ok()?;
        let record = self.data.get(&uuid)?;
        let holds = read_range(disk, KEYSLOTS) == record.keyslots
            && read_range(disk, DATA_OFFSET..DATA_OFFSET + MARKER_LEN as u64) == record.marker;
        holds.then_some(ExpectedDisk { uuid })
    }

    /// A CLI call of `caller` to the node API `api` ("init" or "recovery")
    /// at `addr`.
    fn cli(&mut self, caller: Caller, api: &str, addr: std::net::SocketAddr) -> CliCall {
        self.cli_serial += 1;
        let n = self.cli_serial;
        let ap = |f: &str| self.admin.path().join(f).display().to_string();
        let mut cmd = Command::new(&self.bins.confboot);
        cmd.current_dir(self.admin.path());
        let (init_secret, master, trust) = match caller {
            Caller::Admin => (
                "init-secret",
                "master-secret.json",
                format!("pinned:{}", ap("pinned")),
            ),
            Caller::Host => (
                "host-init-secret",
                "host-master-secret.json",
                "insecure-any-ak".into(),
            ),
        };
        let state_out = self.admin.path().join(format!("cluster-{n}.json"));
        if api == "init" {
            cmd.args(["init", "--node", &addr.to_string()]);
            cmd.args(["--init-secret-file", init_secret, "--master-secret", master]);
            cmd.args(["--master-secret-out", &format!("ms-out-{n}.json")]);
            cmd.args(["--kubeconfig-out", &format!("admin-{n}.conf")]);
            cmd.args([
                "--state-out",
                &format!("cluster-{n}.json"),
                "--timeout",
                "60",
            ]);
        } else {
            cmd.args([
                "recover",
                "--node",
                &addr.to_string(),
                "--master-secret",
                master,
            ]);
            // The cluster file of the caller's cluster: the admin's last
            // Init's (or, before one, joinsvc's salt), the host's own.
            let cluster_file = match caller {
                Caller::Admin => ADMIN_CLUSTER_FILE,
                Caller::Host => HOST_CLUSTER_FILE,
            };
            cmd.args(["--cluster-file", cluster_file]);
            if self.cli_recover_takes_init_secret() {
                cmd.args(["--init-secret-file", init_secret]);
            }
        }
        cmd.args(["--measurements", "measurements.json", "--ak-trust", &trust]);
        let out = self.admin.path().join(format!("cli-{n}.out"));
        let file = std::fs::File::create(&out).unwrap();
        cmd.stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null());
        CliCall {
            child: cmd.spawn().expect("run confboot"),
            init: api == "init",
            state_out,
        }
    }

    /// An Init of the admin succeeded: its cluster file is the one the
    /// admin's Recovers use from now on (as an admin keeps the file of
    /// the cluster it made).
    fn admin_inited(&mut self, state_out: &Path) {
        self.admin_inited = true;
        std::fs::copy(state_out, self.admin.path().join(ADMIN_CLUSTER_FILE))
            .expect("keep the admin's cluster file");
    }

    /// Whether `confboot recover` takes the admin's init secret.
    fn cli_recover_takes_init_secret(&self) -> bool {
        let out = Command::new(&self.bins.confboot)
            .args(["recover", "--help"])
            .output()
            .expect("run confboot");
        String::from_utf8_lossy(&out.stdout).contains("--init-secret-file")
            || String::from_utf8_lossy(&out.stderr).contains("--init-secret-file")
    }

    /// One boot of the subject node: the admin calls when the flow wants
    /// it, the host calls first with `host_calls`, and with `pause` the
    /// node is paused at the line, the move applied, and resumed.
    fn boot(
        &mut self,
        flow: Flow,
        args: &[String],
        host_calls: bool,
        pause: Option<(&Move, (String, usize))>,
        boot_start: &Path,
        expected: &mut Option<ExpectedDisk>,
    ) -> BootEnd {
        let tpm = self.subject.boot_tpm(IMAGE);
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let node = self.subject.bootstrapper(&tpm, &arg_refs);
        let boot = Boot { node, tpm };
        let pgid = Pid::from_raw(boot.node.id() as i32);
        let admin_acts = matches!(flow, Flow::Init | Flow::Recover);
        let mut pause = pause;
        let mut host_done = !host_calls;
        let mut host_succeeded = false;
        let mut admin_attempts = 0;
        let mut admin_succeeded = false;
        let mut call: Option<(Caller, CliCall)> = None;
        let mut killed = false;
        let mut moved = pause.is_none();
        let mut move_error = None;
        let mut data_since = expected.is_some().then_some(0);
        let t = Instant::now();
        let mut last_change = Instant::now();
        let mut last_progress = Instant::now();
        let mut last_len = 0;
        let status = loop {
            // Read before the exit check: a step the node logs just before
            // it exits is still a step (the move then lands on the disk
            // the next boot finds).
            let exited = boot.node.exited();
            let log = boot.node.log();
            if log.len() != last_len {
                if log[last_len..]
                    .iter()
                    .any(|l| !RETRY_LINES.iter().any(|r| l.contains(r)))
                {
                    last_change = Instant::now();
                    last_progress = Instant::now();
                }
                last_len = log.len();
            }
            if self.join_proxy.active() + self.admin_proxy.active() > 0 {
                last_change = Instant::now();
            }
            if let Some((m, (needle, nth))) = &pause
                && log
                    .iter()
                    .filter(|l| message(l).contains(needle.as_str()))
                    .count()
                    > *nth
            {
                moved = true;
                if matches!(m, Move::Kill) {
                    let _ = killpg(pgid, Signal::SIGKILL);
                    boot.node.kill();
                    killed = true;
                    break None;
                }
                let _ = killpg(pgid, Signal::SIGSTOP);
                self.harvest_salt(&self.subject.p("disk.img"));
                if let Move::Ledger(l) = m
                    && let Err(e) = self.apply_ledger_move(*l)
                {
                    move_error = Some(format!("nothing to move: {e}"));
                }
                if let Move::Disk(d) = m {
                    match self.apply_disk_move(d, flow, boot_start) {
                        Ok(()) => {
                            // A disk put under a format the node had already
                            // begun (it checked the disk blank, then the host
                            // swapped bytes under its writes) is the host's
                            // own to lose: the node decided nothing on it.
                            let formatting = log.iter().rposition(|l| l.contains("formatting"));
                            let formatted = log.iter().rposition(|l| l.contains(" formatted ("));
                            let under_a_format = formatting.is_some() && formatted < formatting;
                            *expected = if under_a_format {
                                None
                            } else {
                                self.expected_disk(&self.subject.p("disk.img"))
                            };
                            data_since = expected.is_some().then_some(log.len());
                            let mut left = DiskState::read(&self.subject.p("disk.img"));
                            left.under_a_format = under_a_format;
                            self.host_left = Some(left);
                        }
                        Err(e) => move_error = Some(format!("nothing to move: {e}")),
                    }
                }
                let _ = killpg(pgid, Signal::SIGCONT);
                pause = None;
            }
            if let Some(status) = exited {
                break Some(status);
            }
            // The node's admin API, once it listens.
            let api = log.iter().find_map(|l| {
                ["init", "recovery"].into_iter().find_map(|api| {
                    l.contains(&format!("{api} API listening on "))
                        .then(|| (api, crate::addr_after(l, "listening on ")))
                })
            });
            if let Some((caller, c)) = &mut call {
                if let Ok(Some(status)) = c.child.try_wait() {
                    match caller {
                        Caller::Host => {
                            host_done = true;
                            host_succeeded = status.success();
                        }
                        Caller::Admin => admin_succeeded |= status.success(),
                    }
                    if *caller == Caller::Admin && status.success() && c.init {
                        self.admin_inited(&c.state_out);
                    }
                    call = None;
                    last_change = Instant::now();
                }
            } else if let Some((api, addr)) = api {
                if !host_done {
                    call = Some((Caller::Host, self.cli(Caller::Host, api, addr)));
                } else if admin_acts && !admin_succeeded && admin_attempts < ADMIN_ATTEMPTS {
                    // The admin inits only the node of an init flow, until
                    // one Init of this case succeeded; otherwise it only
                    // recovers. A node that offers the other API gets no
                    // call (an admin does not init a member because its
                    // node asks to be inited).
                    let wants = if flow == Flow::Init && !self.admin_inited {
                        "init"
                    } else {
                        "recovery"
                    };
                    if api == wants {
                        admin_attempts += 1;
                        self.admin_proxy.set_target(addr);
                        let proxy = self.admin_proxy.addr;
                        call = Some((Caller::Admin, self.cli(Caller::Admin, api, proxy)));
                    } else {
                        admin_attempts = ADMIN_ATTEMPTS;
                    }
                }
            }
            let nothing_left = call.is_none()
                && (!admin_acts || admin_succeeded || admin_attempts >= ADMIN_ATTEMPTS)
                && host_done;
            // Refusals and failed attempts since the node last made progress.
            let retries = log
                .iter()
                .rev()
                .take_while(|l| RETRY_LINES.iter().any(|r| l.contains(r)))
                .filter(|l| {
                    ["refused this node", "thrown away", "not usable"]
                        .iter()
                        .any(|r| l.contains(r))
                })
                .count();
            let idle = nothing_left
                && (last_change.elapsed() > IDLE_BOUND
                    || (retries >= RETRIES_BOUND
                        && last_progress.elapsed() > Duration::from_secs(2)));
            if t.elapsed() > BOOT_BOUND || idle {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // A call still running ends on its own (the admin's CLI writes
        // what Init returned after the node answered), within bounds.
        if let Some((caller, mut c)) = call.take() {
            let t = Instant::now();
            let status = loop {
                match c.child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    _ if t.elapsed() > Duration::from_secs(15) => break None,
                    _ => std::thread::sleep(Duration::from_millis(5)),
                }
            };
            let _ = c.child.kill();
            let _ = c.child.wait();
            let ok = status.is_some_and(|s| s.success());
            if caller == Caller::Admin && ok && c.init {
                self.admin_inited(&c.state_out);
            }
            match caller {
                Caller::Host => host_succeeded = ok,
                Caller::Admin => admin_succeeded |= ok,
            }
        }
        let _ = killpg(pgid, Signal::SIGKILL);
        boot.node.kill();
        let log = boot.node.log();
        let pcr15 = boot.tpm.pcr15();
        if flow == Flow::Init {
            self.harvest_salt(&self.subject.p("disk.img"));
        }
        let formatted_data =
            // A format that completed ("state disk UUID formatted (LUKS2)"),
            // not one the node refused ("formatting ..." then "refusing to
            // format: the disk has a LUKS header").
            data_since.is_some_and(|i| log.iter().skip(i).any(|l| l.contains(" formatted (")));
        // The admin's salts: what each Init it sent chose.
        for entry in std::fs::read_dir(self.admin.path()).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("cluster-")
                && name.ends_with(".json")
                && let Ok(text) = std::fs::read_to_string(entry.path())
                && let Ok(v) = serde_json::from_str::<Value>(&text)
                && let Some(s) = v["measurementSalt"].as_str()
                && let Ok(salt) = confboot_util::hex::decode(s)
                && !self.admin_salts.contains(&salt)
            {
                self.admin_salts.push(salt);
            }
        }
        BootEnd {
            status,
            log,
            pcr15,
            admin_succeeded,
            host_succeeded,
            killed,
            moved,
            formatted_data,
            move_error,
        }
    }

    /// The judge: what crossed the proxies and the disk the host left go
    /// to [`Judge::judge`].
    fn judge(&mut self, flow: Flow, ends: &[BootEnd], expected: Option<&ExpectedDisk>) -> Outcome {
        let disk = self.subject.p("disk.img");
        // Secrets: the disk keys of every disk the node formatted count too.
        if let Ok(uuid) = header::read_uuid(&disk) {
            let key = self.master.state_disk_key(&uuid);
            self.secrets
                .add(format!("the disk key of {uuid}"), key.expose());
        }
        let seen = [
            (
                "what crossed the node's join path",
                self.join_proxy.take_seen(),
            ),
            (
                "what crossed the admin's path",
                self.admin_proxy.take_seen(),
            ),
            (
                "what the bootstrapped member received",
                self.diverted
                    .take()
                    .map(|(node, _)| node.received())
                    .unwrap_or_default(),
            ),
        ];
        let host_left = self
            .host_left
            .clone()
            .unwrap_or_else(|| DiskState::read(&disk));
        Judge {
            master: &self.master,
            host_master: &self.host_master,
            secrets: &self.secrets,
            admin_salts: &self.admin_salts,
            data: &self.data,
            golden: &self.golden,
            others: &self.others,
            disk: &disk,
            host_left: &host_left,
        }
        .judge(flow, ends, expected, &seen)
    }
}

/// The disk's bytes that say what the node did to it: its header and key
/// slots, its UUID, and where the marker lives.
#[derive(Clone, Debug, PartialEq)]
struct DiskState {
    /// Bytes 0 to the end of the key-slot area (both header copies).
    head: Vec<u8>,
    /// The key-slot area.
    keyslots: Vec<u8>,
    /// Where the marker lives.
    marker: Vec<u8>,
    /// The LUKS2 UUID, if the disk has a header.
    uuid: Option<String>,
    /// The host put it under a format the node had already begun: the
    /// node decided nothing on its header.
    under_a_format: bool,
}

impl DiskState {
    fn read(disk: &Path) -> DiskState {
        DiskState {
            head: read_range(disk, 0..KEYSLOTS.end),
            keyslots: read_range(disk, KEYSLOTS),
            marker: read_range(disk, DATA_OFFSET..DATA_OFFSET + MARKER_LEN as u64),
            uuid: header::read_uuid(disk).ok(),
            under_a_format: false,
        }
    }
}

/// What the judge knows: the cluster's secrets, what the cluster last
/// confirmed of each disk, the other nodes' disks, the disk the host
/// left (after its last move) and the disk as the case ended.
struct Judge<'a> {
    master: &'a MasterSecret,
    host_master: &'a MasterSecret,
    secrets: &'a Secrets,
    admin_salts: &'a [Vec<u8>],
    /// What the cluster last confirmed of each of its disks (by UUID).
    data: &'a BTreeMap<String, DataRecord>,
    /// The subject's disk as the node writes it (its header's shape).
    golden: &'a Path,
    /// Disks of other nodes (UUID, whose).
    others: &'a BTreeMap<String, String>,
    disk: &'a Path,
    host_left: &'a DiskState,
}

impl Judge<'_> {
    /// How the case ended: the node's boots (`ends`), the disk the host
    /// left if it held data (`expected`), and what the host saw on the
    /// network (`seen`).
    fn judge(
        &self,
        flow: Flow,
        ends: &[BootEnd],
        expected: Option<&ExpectedDisk>,
        seen: &[(&str, Vec<u8>)],
    ) -> Outcome {
        let disk = self.disk;
        if !ends[0].moved {
            return Outcome::NotMade("the step never came".into());
        }
        if let Some(e) = &ends[0].move_error {
            return Outcome::NotMade(e.clone());
        }
        let image = std::fs::read(disk).unwrap_or_default();
        for (what, bytes) in seen
            .iter()
            .map(|(w, b)| (*w, &b[..]))
            .chain([("the disk image", &image[..])])
        {
            if let Some(found) = self.secrets.found_in(what, bytes) {
                return Outcome::Failure(found);
            }
        }
        for end in ends {
            let log = end.log.join("\n");
            if let Some(found) = self.secrets.found_in_text("the node's log", &log) {
                return Outcome::Failure(found);
            }
        }
        // PCR 15: unmarked, or marked for a cluster the admin made.
        let marks: Vec<[u8; 32]> = self
            .admin_salts
            .iter()
            .map(|s| {
                confboot_cluster::mark::marked_pcr15(&confboot_kms::derive_cluster_id(
                    self.master.measurement_secret().expose(),
                    &confboot_kms::MeasurementSalt::try_from(&s[..]).expect("a valid salt"),
                ))
            })
            .collect();
        let host_mark = confboot_cluster::mark::marked_pcr15(&confboot_kms::derive_cluster_id(
            self.host_master.measurement_secret().expose(),
            &confboot_kms::MeasurementSalt::try_from(&HOST_CLUSTER_SALT[..]).expect("a valid salt"),
        ));
        for end in ends {
            if end.pcr15 != [0; 32] && !marks.contains(&end.pcr15) {
                let whose = if end.pcr15 == host_mark {
                    "the host's cluster"
                } else {
                    "a cluster the admin did not make"
                };
                return Outcome::Failure(format!(
                    "PCR 15 marked for {whose}{}",
                    if end.host_succeeded {
                        " (the host's own call succeeded)"
                    } else {
                        ""
                    }
                ));
            }
        }
        // Data: the disk the host left (if it held data) must still hold it.
        let last = ends
            .iter()
            .rfind(|e| !e.killed || e.status.is_some())
            .or(ends.last());
        let last = last.expect("a boot ran");
        let formatted = ends.iter().any(|e| e.formatted_data);
        if let Some(exp) = expected {
            let record = &self.data[&exp.uuid];
            let uuid_now = header::read_uuid(disk).ok();
            let lost = if uuid_now.as_deref() != Some(exp.uuid.as_str()) {
                Some("the disk's UUID changed")
            } else if read_range(disk, KEYSLOTS) != record.keyslots {
                Some("its key slots were rewritten")
            } else if read_range(disk, DATA_OFFSET..DATA_OFFSET + MARKER_LEN as u64)
                != record.marker
            {
                Some("its marker is gone")
            } else if formatted {
                Some("the node formatted it")
            } else {
                None
            };
            if let Some(why) = lost {
                return Outcome::Failure(format!("data lost: {why} (disk {})", exp.uuid));
            }
        }
        // Whatever the outcome: what the node changed on the disk the host
        // left.
        if let Some(why) = self.disk_changes() {
            return Outcome::Failure(why);
        }
        let converged = last.status.is_some_and(|s| s.success()) && bootstrapped(&last.log);
        let how = last
            .log
            .iter()
            .filter(|l| is_bootstrapped_line(l))
            .find_map(|l| {
                message(l)
                    .split_once('(')
                    .map(|(_, r)| r.split(')').next().unwrap_or("").to_string())
            })
            .unwrap_or_default();
        if converged {
            if !marks.contains(&last.pcr15) {
                return Outcome::Failure("bootstrapped, but PCR 15 is not marked".into());
            }
            let Ok(uuid) = header::read_uuid(disk) else {
                return Outcome::Failure("bootstrapped without a LUKS2 disk".into());
            };
            // The node must run on exactly the header it writes: one the
            // host chose decides how its data is encrypted.
            let written = header_shape(&header::read_json(self.golden).expect("the golden header"));
            let now = header::read_json(disk).map(|j| header_shape(&j));
            if let Some(diff) = now
                .as_ref()
                .map(|n| first_difference(&written, n, ""))
                .unwrap_or_else(|e| Some(e.to_string()))
            {
                return Outcome::Failure(format!(
                    "bootstrapped on a header the host chose: {}",
                    short(&diff)
                ));
            }
            if !crate::key_opens_disk(disk, self.master.state_disk_key(&uuid).expose()) {
                return Outcome::Failure(
                    "bootstrapped, but the cluster's key does not open its disk".into(),
                );
            }
            // What the node then used: its own disk as the cluster last
            // confirmed it. No flow lets the cluster accept an older disk
            // or another node's knowingly, so either is the host's win.
            if let Some(whose) = self.others.get(&uuid) {
                return Outcome::Failure(format!(
                    "bootstrapped on another node's disk ({whose}'s, {uuid})"
                ));
            }
            if let Some(record) = self.data.get(&uuid)
                && (read_range(disk, KEYSLOTS) != record.keyslots
                    || read_range(disk, DATA_OFFSET..DATA_OFFSET + MARKER_LEN as u64)
                        != record.marker)
            {
                return Outcome::Failure(format!(
                    "bootstrapped on a disk older than the cluster last confirmed \
                     (disk {uuid} without the data written after its first boot)"
                ));
            }
            return Outcome::Converged(format!(
                "{how}{}",
                if ends.len() > 1 {
                    " after a reboot"
                } else {
                    ""
                },
            ));
        }
        let last_error = last
            .log
            .iter()
            .rev()
            .find(|l| l.contains("ERROR") || l.contains("refused") || l.contains("WARN"))
            .map(|l| short(message(l)))
            .unwrap_or_default();
        let last_error = if matches!(flow, Flow::Init | Flow::Recover) && !last.admin_succeeded {
            format!("{last_error} (the admin's calls failed)")
        } else {
            last_error
        };
        match last.status {
            Some(_) => Outcome::Stopped(last_error),
            None => Outcome::Refused(if last_error.is_empty() {
                "waiting".into()
            } else {
                format!("waiting; {last_error}")
            }),
        }
    }

    /// What the node did to the disk the host left, if it is the host's
    /// win: a header the host left reformatted or its key slots
    /// rewritten, the marker lost, a header the node wrote that the key
    /// the cluster derives for its UUID does not open.
    fn disk_changes(&self) -> Option<String> {
        let left = self.host_left;
        let now = DiskState::read(self.disk);
        if now.head == left.head && now.marker == left.marker {
            return None;
        }
        if left.marker.iter().any(|&b| b != 0) && now.marker != left.marker {
            return Some("the node lost the marker of the disk the host left".into());
        }
        let header_left = left.uuid.as_ref().filter(|_| !left.under_a_format);
        if let Some(uuid) = header_left {
            match &now.uuid {
                None => {
                    return Some(format!(
                        "the node destroyed the header of the disk the host left ({uuid})"
                    ));
                }
                Some(u) if u != uuid => {
                    return Some(format!(
                        "the node reformatted the disk the host left ({uuid}, now {u})"
                    ));
                }
                Some(_) if now.keyslots != left.keyslots => {
                    return Some(format!(
                        "the node rewrote the key slots of the disk the host left ({uuid})"
                    ));
                }
                // Only its tokens changed: the key slots are the host's.
                Some(_) => return None,
            }
        }
        // The node wrote key slots (on a blank disk, or under its own
        // format): the cluster's key for its UUID must open them. A
        // header written back without key slots (onto a disk the host
        // blanked under it) holds no key: nothing was formatted.
        let uuid = now.uuid?;
        if now.keyslots == left.keyslots {
            return None;
        }
        (!crate::key_opens_disk(self.disk, self.master.state_disk_key(&uuid).expose())).then(|| {
            format!("the node formatted disk {uuid} under a key the cluster did not derive")
        })
    }
}

/// The header's shape: every field the node writes and chooses (segment,
/// cipher, key sizes, sector size, offsets, KDF and digest parameters),
/// without its random salts and digests and without tokens.
fn header_shape(json: &Value) -> Value {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "salt" | "digest"))
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let mut shape = strip(json);
    if let Some(o) = shape.as_object_mut() {
        o.remove("tokens");
    }
    shape
}

/// The first path where two JSON values differ.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => first_difference(p, q, &format!("{path}.{k}")),
                    (p, _) => Some(format!(
                        "{path}.{k} {}",
                        if p.is_some() { "removed" } else { "added" }
                    )),
                })
        }
        _ if a != b => Some(format!("{path} = {b}")),
        _ => None,
    }
}

/// A short form of a log message for tables (no pipes, bounded).
fn short(s: &str) -> String {
    let s: String = s.chars().map(|c| if c == '|' { '/' } else { c }).collect();
    if s.chars().count() > 110 {
        format!("{}…", s.chars().take(110).collect::<String>())
    } else {
        s
    }
}

/// The disk the host left, when it held a member's data.
#[derive(Clone, Debug)]
struct ExpectedDisk {
    uuid: String,
}

/// Makes `disk` a sparse blank 32 MiB image.
fn blank(disk: &Path) {
    let f = std::fs::File::create(disk).unwrap();
    f.set_len(32 << 20).unwrap();
}

fn write_master_secret(path: &Path, m: &MasterSecret) {
    std::fs::write(
        path,
        format!(
            r#"{{"key": "{}", "salt": "{}"}}"#,
            confboot_util::base64::encode(m.key().expose()),
            confboot_util::base64::encode(m.salt().expose())
        ),
    )
    .unwrap();
}

/// A cluster file as `confboot init` writes it, with `salt`.
fn write_cluster_file(path: &Path, salt: &[u8]) {
    let json = serde_json::json!({"measurementSalt": confboot_util::hex::encode(salt)});
    std::fs::write(path, json.to_string()).unwrap();
}

/// The volume key behind `key` (cryptsetup's dump), to search for.
fn volume_key(disk: &Path, key: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new("cryptsetup")
        .args([
            "luksDump",
            "--dump-volume-key",
            "--batch-mode",
            "--key-file",
            "-",
        ])
        .arg(disk)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(key).ok()?;
    let out = child.wait_with_output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut hex = String::new();
    let mut on = false;
    for line in text.lines() {
        if line.starts_with("MK dump:") {
            on = true;
            hex.push_str(line.trim_start_matches("MK dump:"));
        } else if on && line.starts_with(char::is_whitespace) {
            hex.push_str(line);
        } else if on {
            break;
        }
    }
    let hex: String = hex.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    confboot_util::hex::decode(&hex)
        .ok()
        .filter(|k| !k.is_empty())
}

/// A campaign: the cases to run.
pub fn cases(actor: &mut HostActor, short: bool) -> Vec<(Flow, Step, Move)> {
    let mut all = Vec::new();
    for flow in Flow::ALL {
        let steps = actor.steps(flow);
        for m in Move::all() {
            for s in &steps {
                if m.applies(flow, s) {
                    all.push((flow, s.clone(), m.clone()));
                }
            }
        }
    }
    // The host's TDX and SEV-SNP guests: every pair in both campaigns
    // (each takes a second or two, in the test process).
    let guests = variants::guest_cases()
        .into_iter()
        .map(|(f, s, m)| (Flow::Guest(f), s, Move::Guest(m)));
    if !short {
        all.extend(guests);
        return all;
    }
    let mut chosen = short_selection(all);
    chosen.extend(guests);
    chosen
}

/// The short campaign: every move at least once and every flow at least
/// once, at the steps where each bites most.
fn short_selection(all: Vec<(Flow, Step, Move)>) -> Vec<(Flow, Step, Move)> {
    let wanted: &[(Flow, &str, &str)] = &[
        (Flow::Join, "kill", "formatting state disk"),
        (
            Flow::Rejoin,
            "edit: segment cipher aes-xts-null",
            "(before start)",
        ),
        (
            Flow::Join,
            "edit: segment cipher aes-xts-null",
            "state disk (#3)",
        ),
        (
            Flow::Rejoin,
            "edit: KDF Argon2id 1 GiB x 32",
            "(before start)",
        ),
        (
            Flow::Rejoin,
            "edit: token bootstrapped removed",
            "(before start)",
        ),
        (Flow::Rejoin, "edit: token salt changed", "(before start)"),
        (Flow::Recover, "edit: token salt changed", "(before start)"),
        (Flow::Rejoin, "edit: UUID", "(before start)"),
        (Flow::Rejoin, "rollback to first boot", "(before start)"),
        (Flow::Join, "rollback to boot start", "state disk (#3)"),
        (Flow::Rejoin, "swap disks", "(before start)"),
        (
            Flow::Recover,
            "host's disk + host's Recover",
            "(before start)",
        ),
        (Flow::Join, "net: drop", "(the exchange)"),
        (Flow::Rejoin, "net: trickle", "(the exchange)"),
        (Flow::Init, "net: replay", "(the exchange)"),
        (Flow::Join, "net: reorder", "(the exchange)"),
        (Flow::Recover, "net: delay 5 s", "(the exchange)"),
        (Flow::Init, "net: relay to other node", "(the exchange)"),
        (Flow::Join, "net: host answers first", "(the exchange)"),
        (Flow::Init, "host's own Init/Recover", "(the exchange)"),
        (Flow::Recover, "host's own Init/Recover", "(the exchange)"),
        (Flow::Join, "spoofed node name", "(before start)"),
        (Flow::Init, "kill", "node marked"),
        (
            Flow::Init,
            "net: admin's call to a bootstrapped member",
            "(the exchange)",
        ),
        (
            Flow::Recover,
            "net: admin's call to a bootstrapped member",
            "(the exchange)",
        ),
        (Flow::Join, "ledger: registry deleted", "(before start)"),
        (
            Flow::Rejoin,
            "ledger: old registry restored",
            "(before start)",
        ),
        (Flow::Join, "ledger: objects churned", "state disk (#3)"),
    ];
    let mut chosen = Vec::new();
    for (flow, m, s) in wanted {
        let c = all
            .iter()
            .find(|(f, st, mv)| f == flow && mv.name() == *m && st.name().contains(s))
            .unwrap_or_else(|| {
                panic!(
                    "the short campaign's {} | {s} | {m} is not among the steps",
                    flow.name()
                )
            });
        chosen.push(c.clone());
    }
    chosen
}

/// The campaign's tables: a summary per move kind, a matrix per flow
/// (step × move, one letter per outcome), and every case that did not
/// converge with what the judge saw.
pub fn report(results: &[CaseResult]) -> String {
    let mut out = String::new();
    let count = |v: &str, it: &mut dyn Iterator<Item = &CaseResult>| {
        it.filter(|r| r.outcome.verdict() == v).count()
    };
    let verdicts = ["REFUSED", "CONVERGED", "STOPPED", "FAILURE", "NOT MADE"];
    out.push_str(&format!(
        "{} (move, step) pairs explored over {} flows: {}\n\n",
        results
            .iter()
            .filter(|r| r.outcome.verdict() != "NOT MADE")
            .count(),
        {
            let mut flows: Vec<Flow> = results.iter().map(|r| r.flow).collect();
            flows.sort();
            flows.dedup();
            flows.len()
        },
        verdicts
            .iter()
            .map(|v| format!("{} {v}", count(v, &mut results.iter())))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out.push_str("| move | pairs | REFUSED | CONVERGED | STOPPED | FAILURE | not made |\n|---|---|---|---|---|---|---|\n");
    let mut kinds: Vec<String> = results.iter().map(|r| r.host_move.kind()).collect();
    kinds.dedup();
    let mut seen = Vec::new();
    for k in kinds {
        if seen.contains(&k) {
            continue;
        }
        seen.push(k.clone());
        let of = || results.iter().filter(|r| r.host_move.kind() == k);
        out.push_str(&format!(
            "| {k} | {} | {} | {} | {} | {} | {} |\n",
            of().filter(|r| r.outcome.verdict() != "NOT MADE").count(),
            count("REFUSED", &mut of()),
            count("CONVERGED", &mut of()),
            count("STOPPED", &mut of()),
            count("FAILURE", &mut of()),
            count("NOT MADE", &mut of()),
        ));
    }
    out.push_str("\nEvery case:\n\n");
    out.push_str(
        "| flow | step | move | outcome | what the judge saw | s |\n|---|---|---|---|---|---|\n",
    );
    for r in results {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} |\n",
            r.flow.name(),
            short(&r.step.name()),
            r.host_move.name(),
            r.outcome.verdict(),
            short(r.outcome.detail()),
            r.seconds
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_raw_hex_and_base64_anywhere_in_a_sparse_image() {
        let secret = crate::XorShift::new(7).bytes(32);
        let secrets = Secrets(vec![("a key".into(), secret.clone())]);
        let mut image = vec![0u8; 32 << 20];
        assert_eq!(secrets.found_in("the image", &image), None);
        // Raw, across a 64 KiB chunk boundary, deep in the data area.
        let at = (20 << 20) + (64 << 10) - 5;
        image[at..at + 32].copy_from_slice(&secret);
        assert_eq!(
            secrets.found_in("the image", &image).as_deref(),
            Some("a key found in the image")
        );
        let other = crate::XorShift::new(8).bytes(32);
        assert_eq!(secrets.found_in("a log", &other), None);
    }

    /// Every text form of `secret` a secret travels in, by name.
    fn planted(secret: &[u8]) -> Vec<(String, String)> {
        use confboot_util::base64;
        let hex = confboot_util::hex::encode(secret);
        let std = base64::encode(secret);
        let url = base64::encode_url(secret);
        let mut forms = vec![
            ("hex".to_string(), hex.clone()),
            ("HEX".into(), hex.to_ascii_uppercase()),
            ("base64".into(), std.clone()),
            ("base64 unpadded".into(), std.trim_end_matches('=').into()),
            ("base64url".into(), url.clone()),
            (
                "base64url unpadded".into(),
                url.trim_end_matches('=').into(),
            ),
        ];
        // Inside a longer encoded value, at each offset of a base64 group.
        for before in 1..3 {
            let mut blob = vec![0xa5u8; before];
            blob.extend_from_slice(secret);
            blob.extend_from_slice(b"and more after it");
            forms.push((
                format!("base64 of a value, at +{before}"),
                base64::encode(&blob),
            ));
            forms.push((
                format!("base64url of a value, at +{before}"),
                base64::encode_url(&blob).trim_end_matches('=').into(),
            ));
        }
        forms
    }

    #[test]
    fn secrets_are_found_in_every_encoding_they_travel_in() {
        // Seeds whose secrets' base64 holds '+' and '/' (where the two
        // alphabets differ) and lengths of each remainder mod 3.
        for (seed, len) in [(7, 32), (11, 32), (13, 33), (17, 34), (19, 45)] {
            let secret = crate::XorShift::new(seed).bytes(len);
            let secrets = Secrets(vec![("a key".into(), secret.clone())]);
            for (form, text) in planted(&secret) {
                let line = format!("T INFO bootstrapper: oops {text} logged");
                assert!(
                    secrets.found_in("a log", line.as_bytes()).is_some(),
                    "{form} of a {len}-byte secret: {line}"
                );
                // A console that wraps lines at 80 columns.
                let wrapped: String = line
                    .chars()
                    .collect::<Vec<_>>()
                    .chunks(20)
                    .map(|c| c.iter().collect::<String>())
                    .collect::<Vec<_>>()
                    .join("\r\n");
                assert!(
                    secrets.found_in_text("a log", &wrapped).is_some(),
                    "{form}, wrapped: {wrapped}"
                );
            }
            let other = crate::XorShift::new(seed + 1000).bytes(len);
            for (form, text) in planted(&other) {
                assert_eq!(
                    secrets.found_in_text("a log", &text),
                    None,
                    "{form} of another secret"
                );
            }
        }
        // The master secret inside its kms URI, padded (as `to_kms_uri`
        // writes it) and not.
        let master = MasterSecret::generate().unwrap();
        let secrets = Secrets(vec![
            ("the master key".into(), master.key().expose().to_vec()),
            ("the master salt".into(), master.salt().expose().to_vec()),
        ]);
        let unpadded = format!(
            "kms://cluster-kms?key={}&salt={}",
            confboot_util::base64::encode_url(master.key().expose()).trim_end_matches('='),
            confboot_util::base64::encode_url(master.salt().expose()).trim_end_matches('=')
        );
        for uri in [master.to_kms_uri().to_string(), unpadded] {
            let line = format!("T WARN bootstrapper: using {uri}");
            assert!(
                secrets
                    .found_in_text("a log", &line)
                    .is_some_and(|f| f.starts_with("the master key")),
                "{line}"
            );
        }
    }

    /// A crafted case for the judge: the admin's cluster, a disk image,
    /// what the cluster confirmed of it.
    struct Crafted {
        dir: TempDir,
        master: MasterSecret,
        host_master: MasterSecret,
        secrets: Secrets,
        salts: Vec<Vec<u8>>,
        data: BTreeMap<String, DataRecord>,
        others: BTreeMap<String, String>,
    }

    const UUID_A: &str = "0a0a0a0a-0000-4000-8000-00000000000a";
    const UUID_B: &str = "0b0b0b0b-0000-4000-8000-00000000000b";

    impl Crafted {
        fn new() -> Crafted {
            crate::require_program("cryptsetup", "cryptsetup-bin");
            let master = MasterSecret::generate().unwrap();
            let mut secrets = Secrets(Vec::new());
            secrets.add("the master secret's key", master.key().expose());
            let c = Crafted {
                dir: TempDir::new("judge-crafted"),
                master,
                host_master: MasterSecret::generate().unwrap(),
                secrets,
                salts: vec![vec![7; 32]],
                data: BTreeMap::new(),
                others: BTreeMap::new(),
            };
            blank(&c.disk());
            c
        }

        fn disk(&self) -> PathBuf {
            self.dir.path().join("disk.img")
        }

        fn golden(&self) -> PathBuf {
            self.dir.path().join("golden.img")
        }

        /// Formats the disk (cryptsetup, as a node would) with `key`.
        fn format(&self, uuid: &str, key: &[u8]) {
            use std::io::Write;
            blank(&self.disk());
            let mut format = Command::new("cryptsetup")
                .args(["luksFormat", "--type", "luks2", "--batch-mode"])
                .args(["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"])
                .args(["--uuid", uuid, "--key-file", "-"])
                .arg(self.disk())
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            format.stdin.take().unwrap().write_all(key).unwrap();
            assert!(format.wait().unwrap().success());
        }

        fn cluster_key(&self, uuid: &str) -> Vec<u8> {
            self.master.state_disk_key(uuid).expose().to_vec()
        }

        /// The disk formatted for the cluster, its marker written, kept
        /// as what the cluster last confirmed of it.
        fn confirmed_disk(&mut self, uuid: &str) {
            self.format(uuid, &self.cluster_key(uuid));
            let marker = crate::XorShift::new(3).bytes(MARKER_LEN);
            write_at(&self.disk(), DATA_OFFSET, &marker);
            std::fs::copy(self.disk(), self.golden()).unwrap();
            self.data.insert(
                uuid.into(),
                DataRecord {
                    keyslots: read_range(&self.disk(), KEYSLOTS),
                    marker,
                },
            );
        }

        fn judge(&self, host_left: &DiskState, end: BootEnd) -> Outcome {
            let (disk, golden) = (self.disk(), self.golden());
            Judge {
                master: &self.master,
                host_master: &self.host_master,
                secrets: &self.secrets,
                admin_salts: &self.salts,
                data: &self.data,
                golden: &golden,
                others: &self.others,
                disk: &disk,
                host_left,
            }
            .judge(Flow::Rejoin, &[end], None, &[])
        }

        /// A boot that bootstrapped for the admin's cluster.
        fn converged(&self) -> BootEnd {
            let id = confboot_kms::derive_cluster_id(
                self.master.measurement_secret().expose(),
                &confboot_kms::MeasurementSalt::try_from(&self.salts[0][..]).unwrap(),
            );
            BootEnd {
                status: Some(std::os::unix::process::ExitStatusExt::from_raw(0)),
                log: vec!["T INFO bootstrapper: bootstrapped (Rejoined) in 0.4 s".into()],
                pcr15: confboot_cluster::mark::marked_pcr15(&id),
                ..stopped()
            }
        }
    }

    /// A boot that exited non-zero (STOPPED), PCR 15 unmarked.
    fn stopped() -> BootEnd {
        BootEnd {
            status: Some(std::os::unix::process::ExitStatusExt::from_raw(1 << 8)),
            log: vec!["T ERROR bootstrapper: stopping: the disk is not usable".into()],
            pcr15: [0; 32],
            admin_succeeded: false,
            host_succeeded: false,
            killed: false,
            moved: true,
            formatted_data: false,
            move_error: None,
        }
    }

    /// A boot still waiting when its time was up (REFUSED).
    fn waiting() -> BootEnd {
        BootEnd {
            status: None,
            log: vec!["T INFO bootstrapper: no join service known yet".into()],
            ..stopped()
        }
    }

    #[test]
    fn a_kms_uri_in_the_nodes_log_is_a_failure() {
        let c = Crafted::new();
        let left = DiskState::read(&c.disk());
        assert_eq!(c.judge(&left, stopped()).verdict(), "STOPPED");
        let mut end = stopped();
        end.log.push(format!(
            "T INFO bootstrapper: master secret at {}",
            c.master.to_kms_uri().as_str()
        ));
        let outcome = c.judge(&left, end);
        assert_eq!(outcome.verdict(), "FAILURE", "{outcome:?}");
        assert!(outcome.detail().contains("the node's log"), "{outcome:?}");
    }

    #[test]
    fn a_node_that_formats_under_a_foreign_key_then_stops_or_waits_is_a_failure() {
        let c = Crafted::new();
        let left = DiskState::read(&c.disk());
        // Formatted under the key the cluster derives: the node's own.
        c.format(UUID_A, &c.cluster_key(UUID_A));
        assert_eq!(c.judge(&left, stopped()).verdict(), "STOPPED");
        assert_eq!(c.judge(&left, waiting()).verdict(), "REFUSED");
        // Under any other key.
        c.format(UUID_A, b"a key the cluster did not derive");
        for end in [stopped(), waiting()] {
            let outcome = c.judge(&left, end);
            assert_eq!(outcome.verdict(), "FAILURE", "{outcome:?}");
            assert!(
                outcome
                    .detail()
                    .contains("under a key the cluster did not derive"),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn a_node_that_changes_the_disk_the_host_left_then_stops_is_a_failure() {
        let mut c = Crafted::new();
        c.confirmed_disk(UUID_A);
        let left = DiskState::read(&c.disk());
        assert_eq!(c.judge(&left, stopped()).verdict(), "STOPPED");
        type Change<'a> = &'a dyn Fn(&Crafted);
        let cases: [(&str, Change); 4] = [
            ("reformatted", &|c| {
                let marker = c.data[UUID_A].marker.clone();
                c.format(UUID_B, &c.cluster_key(UUID_B));
                write_at(&c.disk(), DATA_OFFSET, &marker);
            }),
            ("rewrote the key slots", &|c| {
                write_at(&c.disk(), KEYSLOTS.start + 4096, &[0x55; 64])
            }),
            ("lost the marker", &|c| {
                write_at(&c.disk(), DATA_OFFSET, &[0; MARKER_LEN])
            }),
            ("destroyed the header", &|c| {
                write_at(&c.disk(), 0, &[0; 4096])
            }),
        ];
        for (what, change) in cases {
            std::fs::copy(c.golden(), c.disk()).unwrap();
            change(&c);
            let outcome = c.judge(&left, stopped());
            assert_eq!(outcome.verdict(), "FAILURE", "{what}: {outcome:?}");
            assert!(outcome.detail().contains(what), "{what}: {outcome:?}");
        }
    }

    #[test]
    fn a_swap_or_a_rollback_the_node_bootstrapped_on_is_a_failure() {
        let mut c = Crafted::new();
        c.confirmed_disk(UUID_A);
        let left = DiskState::read(&c.disk());
        let outcome = c.judge(&left, c.converged());
        assert_eq!(outcome.verdict(), "CONVERGED", "{outcome:?}");
        // Another node's disk, intact.
        c.others.insert(UUID_A.into(), "actor-other".into());
        let outcome = c.judge(&left, c.converged());
        assert_eq!(outcome.verdict(), "FAILURE", "{outcome:?}");
        assert!(
            outcome.detail().contains("another node's disk"),
            "{outcome:?}"
        );
        c.others.clear();
        // Its own disk as it was before its first boot completed (the
        // host left it so: nothing the node changed).
        write_at(&c.disk(), DATA_OFFSET, &[0; MARKER_LEN]);
        let left = DiskState::read(&c.disk());
        let outcome = c.judge(&left, c.converged());
        assert_eq!(outcome.verdict(), "FAILURE", "{outcome:?}");
        assert!(
            outcome
                .detail()
                .contains("older than the cluster last confirmed"),
            "{outcome:?}"
        );
    }

    #[test]
    fn steps_are_the_state_machines_lines_up_to_their_first_variable_word() {
        let log: Vec<String> = [
            "T INFO bootstrapper: starting",
            "T INFO bootstrapper: plan: the init API and a join ticket (70 ms after start)",
            "T DEBUG bootstrapper: issued a vTPM quote over 24 PCRs",
            "T INFO bootstrapper: state disk 7b10 formatted",
            "T INFO bootstrapper: state disk 7b10 opened",
            "T INFO bootstrapper: bootstrapped (Joined) in 0.4 s",
            "T INFO bootstrapper: after the end",
        ]
        .map(String::from)
        .to_vec();
        let names: Vec<String> = steps_of(&log).iter().map(Step::name).collect();
        assert_eq!(
            names,
            [
                "plan: the init API and a join ticket",
                "state disk",
                "state disk (#2)",
                "bootstrapped (Joined) in"
            ]
        );
    }

    #[test]
    fn header_edits_keep_a_header_cryptsetup_reads() {
        use std::io::Write;
        crate::require_program("cryptsetup", "cryptsetup-bin");
        let dir = TempDir::new("header-edit");
        let disk = dir.path().join("disk.img");
        blank(&disk);
        let mut format = Command::new("cryptsetup")
            .args([
                "luksFormat",
                "--type",
                "luks2",
                "--batch-mode",
                "--pbkdf",
                "pbkdf2",
            ])
            .args(["--pbkdf-force-iterations", "1000", "--key-file", "-"])
            .arg(&disk)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        format.stdin.take().unwrap().write_all(b"key").unwrap();
        assert!(format.wait().unwrap().success());
        let dump = || {
            let out = Command::new("cryptsetup")
                .args(["luksDump", "--dump-json-metadata"])
                .arg(&disk)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            serde_json::from_slice::<Value>(&out.stdout).unwrap()
        };
        let before = dump();
        assert_eq!(header::read_json(&disk).unwrap(), before);
        // Each edit: cryptsetup takes the header (both checksums right)
        // and reads the host's value.
        let cipher = HEADER_EDITS
            .iter()
            .find(|e| e.name == "segment cipher aes-xts-null")
            .unwrap();
        header::edit_json(&disk, cipher.apply).unwrap();
        assert_eq!(dump()["segments"]["0"]["encryption"], "aes-xts-null");
        let foreign = HEADER_EDITS
            .iter()
            .find(|e| e.name == "foreign token")
            .unwrap();
        header::edit_json(&disk, foreign.apply).unwrap();
        assert_eq!(dump()["tokens"]["0"]["type"], "systemd-tpm2");
        header::write_uuid(&disk, "00000000-0000-4000-8000-0000000a0a0a").unwrap();
        assert_eq!(
            crate::luks_uuid(&disk).as_deref(),
            Some("00000000-0000-4000-8000-0000000a0a0a")
        );
        assert_eq!(
            header_shape(&before)["segments"]["0"]["encryption"],
            "aes-xts-plain64"
        );
        assert_eq!(
            first_difference(&header_shape(&before), &header_shape(&dump()), "").as_deref(),
            Some(".segments.0.encryption = \"aes-xts-null\"")
        );
    }
}
