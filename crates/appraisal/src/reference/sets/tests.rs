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
