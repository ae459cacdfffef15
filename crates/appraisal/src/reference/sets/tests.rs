use std::collections::BTreeMap;

use super::*;
use crate::reference::{ReferenceSet, SigningKey, VariantReference};
use confboot_measure::predicted_policy;
use confboot_tpm::event_log::EventSummary;

const NOW: i64 = 1_800_000_000;
const DAY: i64 = 86_400;

fn sha(bytes: &[u8]) -> [u8; 32] {
    sha256(bytes)
}

fn events(kernel: &str) -> EventList {
    let event = |pcr, event_type: &str, what: &str| EventSummary {
        pcr,
        event_type: event_type.into(),
        sha256: sha(what.as_bytes()),
        description: what.into(),
    };
    let mut events = vec![event(4, "EV_EFI_BOOT_SERVICES_APPLICATION", kernel)];
    for pcr in 3..=6 {
        events.push(event(pcr, "EV_SEPARATOR", "separator"));
    }
    events.push(event(9, "EV_EVENT_TAG", "LOADED_IMAGE::LoadOptions"));
    events.push(event(9, "EV_EVENT_TAG", "Linux initrd"));
    EventList { events }
}

/// Image `version`'s set (its kernel named after it), valid from a day
/// before NOW to `until`.
fn set(version: &str, until: i64) -> ReferenceSet {
    let events = events(&format!("kernel {version}"));
    ReferenceSet {
        name: "confboot-node".into(),
        version: version.into(),
        not_before: NOW - DAY,
        not_after: until,
        variants: vec![VariantReference {
            variant: Variant::QemuVtpm,
            policy: predicted_policy(&events),
            events,
            launch: None,
        }],
    }
}

/// What a node of image `version` measures.
fn node(version: &str) -> BTreeMap<u32, Vec<u8>> {
    events(&format!("kernel {version}"))
        .replay()
        .into_iter()
        .map(|(pcr, v)| (pcr, v.to_vec()))
        .chain(std::iter::once((15, vec![0; 32])))
        .collect()
}

struct Fixture {
    dir: PathBuf,
    key: SigningKey,
    sets: ReferenceSets,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("confboot-sets-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = SigningKey::generate().unwrap().0;
        let sets =
            ReferenceSets::new(&dir, Variant::QemuVtpm, vec![key.release_key().clone()]).unwrap();
        Fixture { dir, key, sets }
    }

    fn write(&self, file: &str, bytes: &[u8]) {
        std::fs::write(self.dir.join(file), bytes).unwrap();
    }

    fn add(&self, file: &str, set: &ReferenceSet) {
        self.write(file, &set.sign(&self.key).unwrap());
    }

    fn check(&self, version: &str, now: i64) -> Result<SetVerdict, SetsRefusal> {
        self.sets.check(&node(version), now, DAY, &[])
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn refused_reasons(r: &Refresh) -> Vec<String> {
    r.refused.iter().map(|(_, e)| e.to_string()).collect()
}

#[test]
fn a_set_added_is_live_at_the_next_refresh_and_both_admit() {
    let mut f = Fixture::new("added");
    f.add("v1.cbor", &set("1", NOW + 30 * DAY));
    let r = f.sets.refresh(NOW).unwrap();
    assert_eq!(r.added.len(), 1);
    assert_eq!(f.check("1", NOW).unwrap().set.version, "1");
    assert!(f.check("2", NOW).is_err(), "v2 is not live yet");
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    let r = f.sets.refresh(NOW).unwrap();
    assert_eq!(
        r.added
            .iter()
            .map(|n| n.version.as_str())
            .collect::<Vec<_>>(),
        ["2"]
    );
    let v2 = f.check("2", NOW).unwrap();
    assert_eq!((v2.set.version.as_str(), v2.is_warning()), ("2", false));
    assert_eq!(f.check("1", NOW).unwrap().set.version, "1");
    // Another image matches neither, and the message names both.
    let e = f.check("3", NOW).unwrap_err().to_string();
    assert!(
        e.contains("none of the 2 live")
            && e.contains("confboot-node 1")
            && e.contains("confboot-node 2"),
        "{e}"
    );
}

#[test]
fn a_removed_set_is_retired_and_its_node_refused_with_name_and_time() {
    let mut f = Fixture::new("removed");
    f.add("v1.cbor", &set("1", NOW + 30 * DAY));
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    f.sets.refresh(NOW).unwrap();
    std::fs::remove_file(f.dir.join("v1.cbor")).unwrap();
    let r = f.sets.refresh(NOW + 10).unwrap();
    assert_eq!(r.retired.len(), 1);
    let e = f.check("1", NOW + 20).unwrap_err();
    assert_eq!(
        e,
        SetsRefusal::Retired {
            name: SetName {
                name: "confboot-node".into(),
                version: "1".into()
            },
            retired_at: NOW + 10,
            reason: Retirement::Removed,
        }
    );
    let shown = e.to_string();
    assert!(
        shown.contains("confboot-node 1") && shown.contains("2027-01-15T08:00:10Z"),
        "{shown}"
    );
    assert!(f.check("2", NOW + 20).is_ok());
}

#[test]
fn a_set_past_its_not_after_admits_no_more() {
    let mut f = Fixture::new("expired");
    f.add("v1.cbor", &set("1", NOW + 10));
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    f.sets.refresh(NOW).unwrap();
    // Before any refresh: the check itself sees the window ended.
    let e = f.check("1", NOW + 11).unwrap_err();
    assert!(
        matches!(e, SetsRefusal::Retired { reason: Retirement::Expired, retired_at, .. } if retired_at == NOW + 10),
        "{e:?}"
    );
    // The refresh retires it, and refuses its file from then on.
    let r = f.sets.refresh(NOW + 11).unwrap();
    assert_eq!(r.retired[0].1, Retirement::Expired);
    assert!(
        refused_reasons(&r)[0].contains("expired"),
        "{:?}",
        refused_reasons(&r)
    );
    assert!(matches!(
        f.check("1", NOW + 12),
        Err(SetsRefusal::Retired { .. })
    ));
    // An expired set added afresh is refused too.
    f.add("old.cbor", &set("0", NOW - 1));
    let r = f.sets.refresh(NOW + 12).unwrap();
    assert!(
        refused_reasons(&r)
            .iter()
            .any(|e| e.contains("confboot-node 0 expired"))
    );
}

#[test]
fn forged_unsigned_and_foreign_sets_are_refused_and_the_others_kept() {
    let mut f = Fixture::new("forged");
    f.add("v1.cbor", &set("1", NOW + 30 * DAY));
    f.sets.refresh(NOW).unwrap();
    // Unsigned.
    f.write("unsigned.cbor", &set("2", NOW + DAY).encode().unwrap());
    // Signed by another key.
    let other = SigningKey::generate().unwrap().0;
    f.write("foreign.cbor", &set("3", NOW + DAY).sign(&other).unwrap());
    // A genuine signature with one byte of the payload changed.
    let mut forged = set("4", NOW + DAY).sign(&f.key).unwrap();
    let n = forged.len();
    forged[n - 70] ^= 1;
    f.write("forged.cbor", &forged);
    // Too large.
    f.write("large.cbor", &vec![0; crate::reference::MAX_SET_BYTES + 1]);
    let r = f.sets.refresh(NOW).unwrap();
    assert_eq!(r.refused.len(), 4, "{:?}", refused_reasons(&r));
    assert!(!r.changed());
    assert_eq!(f.sets.live().len(), 1);
    for version in ["2", "3", "4"] {
        assert!(
            matches!(f.check(version, NOW), Err(SetsRefusal::NoMatch { .. })),
            "{version}"
        );
    }
    let reasons = refused_reasons(&r).join("\n");
    assert!(
        reasons.contains("unsigned") && reasons.contains("not a configured release key"),
        "{reasons}"
    );
}

#[test]
fn a_retired_set_put_back_is_refused_as_replayed() {
    let mut f = Fixture::new("replayed");
    let v1 = set("1", NOW + 30 * DAY).sign(&f.key).unwrap();
    f.write("v1.cbor", &v1);
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    f.sets.refresh(NOW).unwrap();
    std::fs::remove_file(f.dir.join("v1.cbor")).unwrap();
    f.sets.refresh(NOW + 10).unwrap();
    // The same signed bytes come back, under another name.
    f.write("again.cbor", &v1);
    let r = f.sets.refresh(NOW + 20).unwrap();
    assert!(!r.changed());
    assert!(
        matches!(r.refused[0].1, RefusedFile::Replayed { retired_at, .. } if retired_at == NOW + 10)
    );
    assert!(matches!(
        f.check("1", NOW + 30),
        Err(SetsRefusal::Retired { .. })
    ));
}

#[test]
fn a_refresh_that_finds_nothing_usable_keeps_the_last_good_sets() {
    let mut f = Fixture::new("keep");
    f.add("v1.cbor", &set("1", NOW + 30 * DAY));
    f.sets.refresh(NOW).unwrap();
    std::fs::remove_file(f.dir.join("v1.cbor")).unwrap();
    f.write("broken.cbor", b"not a set");
    assert!(matches!(
        f.sets.refresh(NOW),
        Err(SetsError::NoLiveSet { .. })
    ));
    assert!(f.check("1", NOW).is_ok());
    for i in 0..=MAX_SET_FILES {
        f.write(&format!("f{i}"), b"x");
    }
    assert!(matches!(
        f.sets.refresh(NOW),
        Err(SetsError::TooManyFiles(_))
    ));
    assert!(f.check("1", NOW).is_ok());
    assert!(ReferenceSets::new(&f.dir, Variant::QemuVtpm, vec![]).is_err());
}

#[test]
fn a_set_near_its_not_after_admits_with_a_warning() {
    let mut f = Fixture::new("warning");
    f.add("v1.cbor", &set("1", NOW + 2 * DAY));
    f.sets.refresh(NOW).unwrap();
    assert!(
        !f.check("1", NOW).unwrap().is_warning(),
        "two days left, a day's window"
    );
    let v = f.check("1", NOW + DAY).unwrap();
    assert!(v.is_warning());
    assert!(
        v.warnings[0].contains("confboot-node 1 expires at"),
        "{:?}",
        v.warnings
    );
    // Of two sets that match, the one that lasts longer is chosen: no warning.
    f.add("v1-extended.cbor", &set("1", NOW + 90 * DAY));
    f.sets.refresh(NOW + DAY).unwrap();
    assert!(!f.check("1", NOW + DAY).unwrap().is_warning());
}

#[test]
fn ignored_pcrs_are_left_out_and_dot_files_are_not_read() {
    let mut f = Fixture::new("ignored");
    let mut s = set("1", NOW + 30 * DAY);
    s.variants[0].policy.set(15, vec![0; 32], false);
    f.add("v1.cbor", &s);
    f.write(".hidden", b"not a set");
    let r = f.sets.refresh(NOW).unwrap();
    assert!(r.refused.is_empty());
    let mut marked = node("1");
    marked.insert(15, vec![7; 32]);
    assert!(f.sets.check(&marked, NOW, 0, &[]).is_err());
    assert!(f.sets.check(&marked, NOW, 0, &[15]).is_ok());
}

/// The order of P-256's group, big-endian.
const P256_N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// The same signed set with its signature's `s` replaced by `n - s`: a
/// signature that verifies too, in an envelope of other bytes.
fn negate_s(signed: &[u8]) -> Vec<u8> {
    let mut out = signed.to_vec();
    // The signature (r || s, 64 bytes) ends the COSE_Sign1.
    let n = out.len();
    let s = &mut out[n - 32..];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = i16::from(P256_N[i]) - i16::from(s[i]) - borrow;
        borrow = i16::from(d < 0);
        s[i] = d.rem_euclid(256) as u8;
    }
    assert_eq!(borrow, 0);
    out
}

#[test]
fn a_retired_set_with_its_signature_re_encoded_as_n_minus_s_stays_retired() {
    let mut f = Fixture::new("n-minus-s");
    let v1 = set("1", NOW + 30 * DAY).sign(&f.key).unwrap();
    f.write("v1.cbor", &v1);
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    f.sets.refresh(NOW).unwrap();
    std::fs::remove_file(f.dir.join("v1.cbor")).unwrap();
    f.sets.refresh(NOW + 10).unwrap();
    // The host puts v1 back with (r, n - s): other bytes, a valid signature.
    let re_encoded = negate_s(&v1);
    assert_ne!(re_encoded, v1);
    let keys = [f.key.release_key().clone()];
    assert!(crate::reference::open(&re_encoded, &keys, NOW).is_ok());
    f.write("v1.cbor", &re_encoded);
    // And the release's own payload signed again (a new random signature).
    f.write(
        "v1-again.cbor",
        &set("1", NOW + 30 * DAY).sign(&f.key).unwrap(),
    );
    let r = f.sets.refresh(NOW + 20).unwrap();
    assert!(!r.changed(), "{:?}", r.added);
    assert_eq!(r.refused.len(), 2, "{:?}", refused_reasons(&r));
    assert!(
        r.refused
            .iter()
            .all(|(_, e)| matches!(e, RefusedFile::Replayed { retired_at, .. } if *retired_at == NOW + 10)),
        "{:?}",
        refused_reasons(&r)
    );
    assert!(matches!(
        f.check("1", NOW + 30),
        Err(SetsRefusal::Retired { .. })
    ));
}

#[test]
fn a_retired_set_stays_retired_across_a_restart() {
    let f = Fixture::new("restart");
    let state = f.dir.with_extension("history.json");
    let _ = std::fs::remove_file(&state);
    let keys = vec![f.key.release_key().clone()];
    let reader = || {
        ReferenceSets::new(&f.dir, Variant::QemuVtpm, keys.clone())
            .unwrap()
            .with_history(SetHistory::load(&state).unwrap())
    };
    let v1 = set("1", NOW + 30 * DAY).sign(&f.key).unwrap();
    f.write("v1.cbor", &v1);
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    let mut first = reader();
    first.refresh(NOW).unwrap();
    std::fs::remove_file(f.dir.join("v1.cbor")).unwrap();
    let r = first.refresh(NOW + 10).unwrap();
    assert!(r.history_error.is_none());
    drop(first);
    // A restart, and the same bytes come back.
    f.write("v1.cbor", &v1);
    let mut second = reader();
    let r = second.refresh(NOW + 20).unwrap();
    assert_eq!(
        r.added
            .iter()
            .map(|n| n.version.as_str())
            .collect::<Vec<_>>(),
        ["2"]
    );
    assert!(
        matches!(r.refused[..], [(_, RefusedFile::Replayed { retired_at, reason: Retirement::Removed, .. })] if retired_at == NOW + 10),
        "{:?}",
        refused_reasons(&r)
    );
    assert!(second.check(&node("1"), NOW + 30, DAY, &[]).is_err());
    assert!(second.check(&node("2"), NOW + 30, DAY, &[]).is_ok());
    let _ = std::fs::remove_file(&state);
}

#[test]
fn a_newer_signing_of_a_set_supersedes_the_older_ones() {
    let mut f = Fixture::new("superseded");
    let mut old = set("1", NOW + 30 * DAY);
    old.not_before = NOW - 2 * DAY;
    f.add("v1-old.cbor", &old);
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    f.sets.refresh(NOW).unwrap();
    assert!(f.check("1", NOW).is_ok());
    // The release signs v1 again, from a day later, to end it sooner.
    f.add("v1-new.cbor", &set("1", NOW + DAY));
    let r = f.sets.refresh(NOW + 10).unwrap();
    assert_eq!(r.retired[..], [(old_name(), Retirement::Superseded)]);
    assert!(matches!(
        r.refused[..],
        [(_, RefusedFile::Superseded { not_before, newest, .. })] if not_before == NOW - 2 * DAY && newest == NOW - DAY
    ));
    // The newer signing removed: the older one, retired, is not live again.
    std::fs::remove_file(f.dir.join("v1-new.cbor")).unwrap();
    let r = f.sets.refresh(NOW + 20).unwrap();
    assert!(
        matches!(
            r.refused[..],
            [(
                _,
                RefusedFile::Replayed {
                    reason: Retirement::Superseded,
                    ..
                }
            )]
        ),
        "{:?}",
        refused_reasons(&r)
    );
    assert!(f.check("1", NOW + 30).is_err());
}

fn old_name() -> SetName {
    SetName {
        name: "confboot-node".into(),
        version: "1".into(),
    }
}

#[test]
fn a_clock_set_back_does_not_revive_an_expired_set_across_a_restart() {
    let mut f = Fixture::new("clock-back");
    let floor_file = f.dir.with_extension("time-floor");
    let _ = std::fs::remove_file(&floor_file);
    f.add("v1.cbor", &set("1", NOW + 10));
    f.add("v2.cbor", &set("2", NOW + 60 * DAY));
    let floor = TimeFloor::load(&floor_file).unwrap();
    f.sets.refresh(floor.observe(NOW)).unwrap();
    f.sets.refresh(floor.observe(NOW + DAY)).unwrap();
    drop(floor);
    // joinsvc restarts (no history file) and the host has set the
    // guest's clock back a day: the floor kept on disk holds.
    let mut again =
        ReferenceSets::new(&f.dir, Variant::QemuVtpm, vec![f.key.release_key().clone()]).unwrap();
    let now = TimeFloor::load(&floor_file).unwrap().observe(NOW - DAY);
    assert_eq!(now, NOW + DAY);
    let r = again.refresh(now).unwrap();
    assert_eq!(
        r.added
            .iter()
            .map(|n| n.version.as_str())
            .collect::<Vec<_>>(),
        ["2"]
    );
    assert!(again.check(&node("1"), now, DAY, &[]).is_err());
    let _ = std::fs::remove_file(&floor_file);
}
