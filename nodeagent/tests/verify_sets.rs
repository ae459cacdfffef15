//! `confboot verify --reference-values-dir --release-key` end to end, as
//! processes: the real `nodeagent` over a swtpm, and the real `confboot
//! verify` checking it against a directory of signed reference-value sets
//! (the host may put any file there): the set matched is named, a set near
//! its not-after verifies with a warning, an unsigned or wrongly signed set
//! of the node's image is ignored (said so) and the node refused, a node
//! matching only an expired set is refused naming the set, and
//! `--measurements` with the directory is refused as bad arguments.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use confboot_appraisal::reference::{ReferenceSet, SigningKey, VariantReference};
use confboot_attest::{MeasurementPolicy, Variant};
use confboot_tests::cluster::workspace_binary;
use confboot_tpm::event_log::{EventList, EventLog, synthetic_log};

mod common;
use common::AgentNode;

const EV_EFI_BOOT_SERVICES_APPLICATION: u32 = 0x8000_0003;
const EV_IPL: u32 = 0xd;
const CLUSTER_ID: &[u8] = b"cluster-sets-0123456789abcdef";
const DAY: i64 = 86_400;

fn boot_log(kernel: &[u8]) -> Vec<u8> {
    synthetic_log(&[
        (4, EV_EFI_BOOT_SERVICES_APPLICATION, kernel),
        (9, EV_IPL, b"console=ttyS0"),
        (9, EV_IPL, b"the initrd"),
    ])
}

/// The enforced policy of PCRs 4 and 9 of `log`.
fn policy_of(log: &[u8]) -> MeasurementPolicy {
    let mut policy = MeasurementPolicy::default();
    for (pcr, value) in EventLog::parse(log).unwrap().replay() {
        policy.set(pcr, value.to_vec(), false);
    }
    policy
}

/// The set of `log`'s image, `version`, valid from `from` to `to` days
/// from now.
fn set_of(log: &[u8], version: &str, from: i64, to: i64) -> ReferenceSet {
    let now = confboot_util::time::unix_now();
    ReferenceSet {
        name: "confboot-node".into(),
        version: version.into(),
        not_before: now + from * DAY,
        not_after: now + to * DAY,
        variants: vec![VariantReference {
            variant: Variant::QemuVtpm,
            policy: policy_of(log),
            events: EventList::default(),
            launch: None,
        }],
    }
}

impl AgentNode {
    /// A fresh directory of sets: `files` (name, bytes).
    fn sets_dir(&self, name: &str, files: &[(&str, Vec<u8>)]) -> PathBuf {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, bytes) in files {
            std::fs::write(dir.join(file), bytes).unwrap();
        }
        dir
    }

    fn verify(&self, sets: &Path, key: &Path, extra: &[&str]) -> Output {
        Command::new(workspace_binary("confboot"))
            .args(["verify", "--node", &self.addr.to_string()])
            .arg("--reference-values-dir")
            .arg(sets)
            .arg("--release-key")
            .arg(key)
            .arg("--ak-trust")
            .arg(format!(
                "pinned:{}",
                confboot_util::hex::encode(&self.ak_public)
            ))
            .args(["--cluster-id", &confboot_util::hex::encode(CLUSTER_ID)])
            .args(extra)
            .output()
            .expect("run confboot verify")
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_node_verifies_by_the_signed_set_it_matches_and_only_by_a_live_signed_one() {
    let log = boot_log(b"kernel v1");
    let other = boot_log(b"kernel v2");
    let node = AgentNode::start("nodeagent-sets", &log, Some(CLUSTER_ID));
    let release = SigningKey::generate().unwrap().0;
    let key = node.dir.path().join("release.pem");
    std::fs::write(&key, release.release_key().to_pem()).unwrap();
    let foreign = SigningKey::generate().unwrap().0;
    let sign = |set: ReferenceSet| set.sign(&release).unwrap();

    // The node's image's set, and another image's: the node's is named.
    let sets = node.sets_dir(
        "good",
        &[
            ("v1.cbor", sign(set_of(&log, "1", -1, 30))),
            ("v2.cbor", sign(set_of(&other, "2", -1, 30))),
        ],
    );
    let out = node.verify(&sets, &key, &[]);
    let shown = text(&out);
    println!("{shown}");
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("reference-value set confboot-node 1 ("),
        "{shown}"
    );
    assert!(
        shown.contains("verified: every enforced PCR matches"),
        "{shown}"
    );
    assert!(!shown.contains("warning"), "{shown}");
    let out = node.verify(&sets, &key, &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verified"], true);
    assert_eq!(json["referenceValueSet"]["name"], "confboot-node");
    assert_eq!(json["referenceValueSet"]["version"], "1");

    // The set ends tomorrow: verified, with a warning that says so.
    let sets = node.sets_dir("ending", &[("v1.cbor", sign(set_of(&log, "1", -1, 1)))]);
    let out = node.verify(&sets, &key, &[]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("warning: the reference-value set confboot-node 1 expires at"),
        "{shown}"
    );

    // The node's image's set unsigned, or signed by a key not configured:
    // ignored, said so, and the node is refused (only v2 is live).
    let sets = node.sets_dir(
        "forged",
        &[
            ("v2.cbor", sign(set_of(&other, "2", -1, 30))),
            ("unsigned.cbor", set_of(&log, "1", -1, 30).encode().unwrap()),
            (
                "foreign.cbor",
                set_of(&log, "1", -1, 30).sign(&foreign).unwrap(),
            ),
        ],
    );
    let out = node.verify(&sets, &key, &[]);
    let shown = text(&out);
    println!("{shown}");
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unsigned.cbor ignored: reference-value set is unsigned"),
        "{stderr}"
    );
    assert!(
        stderr.contains("foreign.cbor ignored: reference-value set signed by key"),
        "{stderr}"
    );
    assert!(
        shown.contains("its measurements are refused: the measurements match none of the 1 live"),
        "{shown}"
    );

    // The node matches only an expired set: refused, naming it and when.
    let sets = node.sets_dir(
        "expired",
        &[
            ("v1.cbor", sign(set_of(&log, "1", -30, -1))),
            ("v2.cbor", sign(set_of(&other, "2", -1, 30))),
        ],
    );
    let out = node.verify(&sets, &key, &[]);
    let shown = text(&out);
    println!("{shown}");
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("match only the reference-value set confboot-node 1, retired at"),
        "{shown}"
    );
    assert!(shown.contains("its window ended"), "{shown}");

    // --measurements and the directory: bad arguments, the node not asked.
    let out = node.verify(&sets, &key, &["--measurements", "m.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--reference-values-dir replaces --measurements: give one of the two"),
        "{}",
        text(&out)
    );
}
