//! joinsvc admitting vTPM nodes by signed reference-value sets
//! (`--reference-values-dir`, `--release-key`), as a real process: a set
//! added while it runs is accepted without a restart, a set near its
//! not-after admits with a warning that is logged and counted (its ticket
//! an attestation result of status warning naming the set), forged,
//! unsigned and foreign sets are refused while the others stay, a removed
//! set's node is refused with the set's name and retirement time, and the
//! removed set put back is refused as replayed, in another envelope too
//! and after a restart.

use std::path::Path;
use std::time::Duration;

use confboot_appraisal::reference::{ReferenceSet, SigningKey, VariantReference};
use confboot_attest::Variant;
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_tpm::event_log::EventList;
use confboot_wire::Code;

const DISK: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
/// The state disk of another node, where a test needs two.
const V2_DISK: &str = "5b1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f";
const DAY: i64 = 86_400;

/// Polls `f` (at most `tries` × 50 ms) until it returns true.
fn eventually(tries: u32, mut f: impl FnMut() -> bool) -> bool {
    (0..tries).any(|_| {
        let ok = f();
        if !ok {
            std::thread::sleep(Duration::from_millis(50));
        }
        ok
    })
}

/// The set of `node`'s image, `version`, valid from a day ago for `days`.
fn set_of(node: &Node, version: &str, days: i64) -> ReferenceSet {
    let now = confboot_util::time::unix_now();
    ReferenceSet {
        name: "confboot-node".into(),
        version: version.into(),
        not_before: now - DAY,
        not_after: now + days * DAY,
        variants: vec![VariantReference {
            variant: Variant::QemuVtpm,
            policy: node.policy(),
            events: EventList::default(),
            launch: None,
        }],
    }
}

fn write(dir: &Path, file: &str, bytes: &[u8]) {
    // Written aside and renamed in, as a deployment copies a file.
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(file)).unwrap();
}

#[test]
fn sets_are_added_warned_about_refused_and_retired_while_joinsvc_runs() {
    let v1 = Node::start("v1", b"kernel v1");
    let v2 = Node::start("v2", b"kernel v2");
    let release = SigningKey::generate().unwrap().0;
    let dir = std::env::temp_dir().join(format!("confboot-sets-process-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sets = dir.join("sets");
    std::fs::create_dir_all(&sets).unwrap();
    let key_file = dir.join("release.pem");
    std::fs::write(&key_file, release.release_key().to_pem()).unwrap();
    let v1_signed = set_of(&v1, "1", 30).sign(&release).unwrap();
    write(&sets, "v1.cbor", &v1_signed);

    let joinsvc = Joinsvc::start_with(
        Path::new(env!("CARGO_BIN_EXE_joinsvc")),
        &v1.policy(),
        &[&v1, &v2],
        &[
            "--reference-values-dir",
            sets.to_str().unwrap(),
            "--release-key",
            key_file.to_str().unwrap(),
            "--reference-values-reload",
            "1",
        ],
    );
    joinsvc
        .process
        .wait_for_line("reference-value set confboot-node 1 accepted", 500);
    assert!(v1.join(joinsvc.rpc_addr, DISK).is_ok());
    let err = v2.join(joinsvc.rpc_addr, DISK).unwrap_err();
    assert_eq!(err.code, Code::PermissionDenied, "{err}");

    // v2's set, ending in a day (within the default warning of 7 days), is
    // copied in: accepted within the reload period, without a restart.
    write(
        &sets,
        "v2.cbor",
        &set_of(&v2, "2", 1).sign(&release).unwrap(),
    );
    assert!(
        eventually(200, || v2.join(joinsvc.rpc_addr, DISK).is_ok()),
        "the set added is accepted"
    );
    let warned = joinsvc.process.wait_for_line(
        "admitted by reference-value set confboot-node 2 with a warning",
        500,
    );
    assert!(warned.contains("expires at"), "{warned}");
    // The ticket is a warning admission, naming the set it matched.
    joinsvc.process.wait_for_line(
        "join ticket issued for disk 0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f (attestation result warning, policy reference-value set confboot-node 2)",
        500,
    );

    // Forged, unsigned and foreign sets are refused; the others stay.
    let mut forged = set_of(&v2, "3", 30).sign(&release).unwrap();
    let n = forged.len();
    forged[n - 70] ^= 1;
    write(&sets, "forged.cbor", &forged);
    write(
        &sets,
        "unsigned.cbor",
        &set_of(&v2, "4", 30).encode().unwrap(),
    );
    let other = SigningKey::generate().unwrap().0;
    write(
        &sets,
        "foreign.cbor",
        &set_of(&v2, "5", 30).sign(&other).unwrap(),
    );
    joinsvc.process.wait_for_line("forged.cbor refused", 500);
    joinsvc.process.wait_for_line("unsigned.cbor refused", 500);
    joinsvc.process.wait_for_line("foreign.cbor refused", 500);
    assert!(v1.join(joinsvc.rpc_addr, DISK).is_ok());

    // v1 is retired: its node is refused, and joinsvc says which set and when.
    std::fs::remove_file(sets.join("v1.cbor")).unwrap();
    joinsvc
        .process
        .wait_for_line("reference-value set confboot-node 1 retired", 500);
    let err = v1.join(joinsvc.rpc_addr, DISK).unwrap_err();
    assert_eq!(err.code, Code::PermissionDenied, "{err}");
    let refusal = joinsvc.process.wait_for_line(
        "match only the reference-value set confboot-node 1, retired at",
        500,
    );
    assert!(refusal.contains("its file was removed"), "{refusal}");

    // Put back, v1's signed file is refused as replayed, and v1 stays out.
    write(&sets, "v1-again.cbor", &v1_signed);
    joinsvc.process.wait_for_line("is not accepted again", 500);
    assert_eq!(
        v1.join(joinsvc.rpc_addr, DISK).unwrap_err().code,
        Code::PermissionDenied
    );
    assert!(v2.join(joinsvc.rpc_addr, DISK).is_ok());

    let (_, metrics) = joinsvc.http_get("/metrics");
    for line in [
        "joinsvc_set_admissions_total{status=\"affirming\",set=\"confboot-node 1\"} 2",
        "joinsvc_set_admissions_total{status=\"warning\",set=\"confboot-node 2\"} 2",
        // The tickets of those admissions, by attestation-result status.
        "confboot_joinsvc_admissions_total{status=\"affirming\"} 2",
        "confboot_joinsvc_admissions_total{status=\"warning\"} 2",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The order of P-256's group, big-endian.
const P256_N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// The signed set with its signature's `s` (its last 32 bytes) replaced by
/// `n - s`: another envelope whose signature verifies too.
fn negate_s(signed: &[u8]) -> Vec<u8> {
    let mut out = signed.to_vec();
    let n = out.len();
    let s = &mut out[n - 32..];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = i16::from(P256_N[i]) - i16::from(s[i]) - borrow;
        borrow = i16::from(d < 0);
        s[i] = d.rem_euclid(256) as u8;
    }
    out
}

#[test]
fn a_retired_set_stays_retired_in_another_envelope_and_across_a_restart() {
    let v1 = Node::start("r1", b"kernel r1");
    let v2 = Node::start("r2", b"kernel r2");
    let release = SigningKey::generate().unwrap().0;
    let dir = std::env::temp_dir().join(format!("confboot-sets-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sets = dir.join("sets");
    std::fs::create_dir_all(&sets).unwrap();
    let state = dir.join("state");
    let key_file = dir.join("release.pem");
    std::fs::write(&key_file, release.release_key().to_pem()).unwrap();
    let v1_signed = set_of(&v1, "1", 30).sign(&release).unwrap();
    write(&sets, "v1.cbor", &v1_signed);
    write(
        &sets,
        "v2.cbor",
        &set_of(&v2, "2", 30).sign(&release).unwrap(),
    );
    let start = || {
        Joinsvc::start_with(
            Path::new(env!("CARGO_BIN_EXE_joinsvc")),
            &v1.policy(),
            &[&v1, &v2],
            &[
                "--reference-values-dir",
                sets.to_str().unwrap(),
                "--release-key",
                key_file.to_str().unwrap(),
                "--reference-values-reload",
                "1",
                "--state-dir",
                state.to_str().unwrap(),
            ],
        )
    };
    let mut joinsvc = start();
    joinsvc
        .process
        .wait_for_line("reference-value set confboot-node 1 accepted", 500);
    assert!(v1.join(joinsvc.rpc_addr, DISK).is_ok());
    std::fs::remove_file(sets.join("v1.cbor")).unwrap();
    joinsvc
        .process
        .wait_for_line("reference-value set confboot-node 1 retired", 500);
    // The host puts v1 back as (r, n - s): other bytes, a valid signature.
    write(&sets, "v1.cbor", &negate_s(&v1_signed));
    joinsvc
        .process
        .wait_for_line("v1.cbor refused: the set confboot-node 1 was retired", 500);
    assert_eq!(
        v1.join(joinsvc.rpc_addr, DISK).unwrap_err().code,
        Code::PermissionDenied
    );
    // joinsvc restarts (its supervisor starts it again: the same state
    // directory, the same namespace, whose ledger its anchor holds) with
    // v1 back in its first envelope: still retired; v2, another node with
    // its own disk, admits.
    write(&sets, "v1.cbor", &v1_signed);
    joinsvc.restart();
    joinsvc
        .process
        .wait_for_line("v1.cbor refused: the set confboot-node 1 was retired", 500);
    assert_eq!(
        v1.join(joinsvc.rpc_addr, DISK).unwrap_err().code,
        Code::PermissionDenied
    );
    assert!(v2.join(joinsvc.rpc_addr, V2_DISK).is_ok());
    assert!(state.join("reference-values-history.json").is_file());
    assert!(state.join("time-floor").is_file());
    drop(joinsvc);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn joinsvc_refuses_to_start_without_a_live_signed_set() {
    let node = Node::start("node", b"kernel");
    let release = SigningKey::generate().unwrap().0;
    let dir = std::env::temp_dir().join(format!("confboot-sets-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("release.pem");
    std::fs::write(&key_file, release.release_key().to_pem()).unwrap();
    // Only an unsigned set: nothing live.
    write(&dir, "v1.cbor", &set_of(&node, "1", 30).encode().unwrap());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_joinsvc"));
    cmd.args(["--master-secret", "/nonexistent/ms.json"]);
    cmd.args(["--measurement-salt", &"5a".repeat(32)]);
    cmd.args([
        "--ak-trust",
        "insecure-any-ak",
        "--i-understand-insecure-any-ak",
    ]);
    cmd.args(["--api-server-endpoint", "10.0.0.1:6443"]);
    cmd.args(["--reference-values-dir", dir.to_str().unwrap()]);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--reference-values-dir needs --release-key"),
        "{stderr}"
    );
    cmd.args(["--release-key", key_file.to_str().unwrap()]);
    let ms = dir.join("ms.json");
    std::fs::write(
        &ms,
        format!(
            r#"{{"key": "{}", "salt": "{}"}}"#,
            confboot_util::base64::encode(&[1; 32]),
            confboot_util::base64::encode(&[2; 32])
        ),
    )
    .unwrap();
    cmd.args(["--master-secret", ms.to_str().unwrap()]);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("holds no live set for qemu-vtpm") && stderr.contains("unsigned"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A node of another image accepts a join service that presents a set
/// signed by the release key the node pins, and that its evidence
/// matches; nothing presented, an unsigned set, a set signed by another
/// key, or a genuine set of another image is refused before the node asks
/// for anything.
#[test]
fn a_node_accepts_a_join_service_of_a_set_signed_by_its_pinned_release_key() {
    use confboot_atls::AtlsError;
    use confboot_attest::{MeasurementPolicy, Validator};
    use confboot_tpm::swtpm::Swtpm;
    use confboot_verifier::join_service::PresentedSetValidator;
    use confboot_vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
    use std::sync::Arc;

    // The control plane's own TPM (joinsvc attests with it) and image.
    let cp_tpm = Swtpm::start().unwrap();
    let (cp_ak, cp_policy) = {
        let issuer = VtpmIssuer::new(cp_tpm.connect().unwrap()).unwrap();
        let pcrs = issuer.with_tpm(|t| t.pcr_read_all()).unwrap();
        let mut policy = MeasurementPolicy::default();
        for (i, v) in pcrs.into_iter().filter(|(i, _)| *i <= 9) {
            policy.set(i, v.to_vec(), false);
        }
        (issuer.ak_public_key(), policy)
    };
    let now = confboot_util::time::unix_now();
    let cp_set = |version: &str, policy: &MeasurementPolicy| ReferenceSet {
        name: "confboot-node".into(),
        version: version.into(),
        not_before: now - DAY,
        not_after: now + 30 * DAY,
        variants: vec![VariantReference {
            variant: Variant::QemuVtpm,
            policy: policy.clone(),
            events: EventList::default(),
            launch: None,
        }],
    };
    // The joining node runs another image (v2): its own-image policy does
    // not admit the control plane.
    let node = Node::start("v2", b"kernel v2");
    let mut node_own = cp_policy.clone();
    node_own.set(4, node.policy().entries()[&4].value.clone(), false);
    let release = SigningKey::generate().unwrap().0;
    let other = SigningKey::generate().unwrap().0;
    let validator = |keys: Vec<confboot_appraisal::reference::ReleaseKey>| -> Arc<dyn Validator> {
        let trust = AkTrust::Pinned(vec![cp_ak.clone()]);
        let own: Arc<dyn Validator> =
            Arc::new(VtpmValidator::new(trust.clone(), node_own.clone()).require_unmarked(false));
        if keys.is_empty() {
            return own;
        }
        let evidence: Arc<dyn Validator> = Arc::new(
            VtpmValidator::new(trust, MeasurementPolicy::default()).require_unmarked(false),
        );
        Arc::new(PresentedSetValidator::new(own, evidence, keys))
    };
    let pinned = || vec![release.release_key().clone()];

    let dir = std::env::temp_dir().join(format!("confboot-sets-present-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tpm_arg = cp_tpm.addr().to_string();
    let joinsvc_presenting = |file: &str, bytes: &[u8]| {
        let path = dir.join(file);
        std::fs::write(&path, bytes).unwrap();
        let joinsvc = Joinsvc::start_with(
            Path::new(env!("CARGO_BIN_EXE_joinsvc")),
            &node.policy(),
            &[&node],
            &[
                "--tpm",
                &tpm_arg,
                "--present-reference-values",
                path.to_str().unwrap(),
            ],
        );
        joinsvc.process.wait_for_line("attesting with the TPM", 100);
        joinsvc
    };

    // The control plane's v1 set, signed by the pinned key: accepted.
    let joinsvc = joinsvc_presenting("v1.cbor", &cp_set("1", &cp_policy).sign(&release).unwrap());
    let ticket = node
        .join_verifying(joinsvc.rpc_addr, DISK, validator(pinned()))
        .expect("the signed set of the join service's image admits it");
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK).expose()
    );
    // A node that pins no release key, or another one, refuses it.
    for keys in [vec![], vec![other.release_key().clone()]] {
        let err = node
            .join_verifying(joinsvc.rpc_addr, DISK, validator(keys))
            .unwrap_err();
        assert!(matches!(err, AtlsError::Attestation(_)), "{err}");
    }
    assert_eq!(
        joinsvc.tokens().len(),
        1,
        "refusing nodes asked for nothing"
    );
    drop(joinsvc);

    // What a host could present instead: refused, each with its reason.
    let mut another_image = cp_policy.clone();
    another_image.set(9, vec![0x99; 32], false);
    for (file, bytes, why) in [
        (
            "unsigned.cbor",
            cp_set("1", &cp_policy).encode().unwrap(),
            "unsigned",
        ),
        (
            "foreign.cbor",
            cp_set("1", &cp_policy).sign(&other).unwrap(),
            "not a configured release key",
        ),
        (
            "another-image.cbor",
            cp_set("9", &another_image).sign(&release).unwrap(),
            "measurement 9 differs",
        ),
    ] {
        let joinsvc = joinsvc_presenting(file, &bytes);
        let err = node
            .join_verifying(joinsvc.rpc_addr, DISK, validator(pinned()))
            .unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains("nor the set it presents") && shown.contains(why),
            "{file}: {shown}"
        );
        assert!(joinsvc.tokens().is_empty(), "{file}");
    }

    // The release signs v1 again, from half a day later; a node that has
    // seen that signing refuses the older one when a host presents it.
    let node_validator = validator(pinned());
    let mut newer = cp_set("1", &cp_policy);
    newer.not_before = now - DAY / 2;
    let joinsvc = joinsvc_presenting("v1-newer.cbor", &newer.sign(&release).unwrap());
    node.join_verifying(joinsvc.rpc_addr, DISK, Arc::clone(&node_validator))
        .expect("the newer signing admits");
    drop(joinsvc);
    let joinsvc = joinsvc_presenting(
        "v1-older.cbor",
        &cp_set("1", &cp_policy).sign(&release).unwrap(),
    );
    let shown = node
        .join_verifying(joinsvc.rpc_addr, DISK, Arc::clone(&node_validator))
        .unwrap_err()
        .to_string();
    assert!(shown.contains("is superseded by its signing"), "{shown}");
    assert!(joinsvc.tokens().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
