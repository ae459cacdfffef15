use super::cbor::{self, Value};
use super::*;
use confboot_measure::{PREDICTED_ENFORCED, predicted_policy};

fn sha(bytes: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .try_into()
        .unwrap()
}

fn event(pcr: u32, event_type: &str, what: &str) -> EventSummary {
    EventSummary {
        pcr,
        event_type: event_type.into(),
        sha256: sha(what.as_bytes()),
        description: what.into(),
    }
}

/// The shape of a predicted direct boot: kernel and action in PCR 4,
/// separators in 3 to 6, command line and initrd in 9, exit actions in 5.
fn events(kernel: &str) -> EventList {
    let mut events = vec![
        event(4, "EV_EFI_BOOT_SERVICES_APPLICATION", kernel),
        event(
            4,
            "EV_EFI_ACTION",
            "Calling EFI Application from Boot Option",
        ),
    ];
    for pcr in 3..=6 {
        events.push(event(pcr, "EV_SEPARATOR", "separator"));
    }
    events.push(event(9, "EV_EVENT_TAG", "LOADED_IMAGE::LoadOptions"));
    events.push(event(9, "EV_EVENT_TAG", "Linux initrd"));
    events.push(event(5, "EV_EFI_ACTION", "Exit Boot Services Invocation"));
    EventList { events }
}

const NOW: i64 = 1_800_000_000;

fn set(kernel: &str) -> ReferenceSet {
    let events = events(kernel);
    ReferenceSet {
        name: "confboot-node".into(),
        version: "1.2.0".into(),
        not_before: NOW - 86_400,
        not_after: NOW + 86_400,
        variants: vec![VariantReference {
            variant: Variant::QemuVtpm,
            policy: predicted_policy(&events),
            events,
            launch: None,
        }],
    }
}

fn new_key() -> SigningKey {
    SigningKey::generate().unwrap().0
}

/// The four parts of a COSE_Sign1, to edit one.
fn parts(signed: &[u8]) -> Vec<Value> {
    match cbor::decode(signed, LIMITS).unwrap() {
        Value::Tag(18, body) => match *body {
            Value::Array(parts) => parts,
            _ => panic!("not an array"),
        },
        _ => panic!("not tag 18"),
    }
}

/// A map's entries, as an edit sees them.
type Entries = Vec<(Value, Value)>;

fn reassemble(parts: Vec<Value>) -> Vec<u8> {
    cbor::encode(&Value::Tag(18, Box::new(Value::Array(parts))))
}

#[test]
fn a_set_signed_by_a_configured_key_reads_back_as_written() {
    let (set, key) = (set("kernel"), new_key());
    let signed = set.sign(&key).unwrap();
    let opened = open(&signed, &[key.release_key().clone()], NOW).unwrap();
    assert_eq!(opened.set, set);
    assert_eq!(opened.signer, Some(key.release_key().kid()));
    let vtpm = opened.set.variant(Variant::QemuVtpm).unwrap();
    for pcr in PREDICTED_ENFORCED {
        assert!(!vtpm.policy.entries()[&pcr].warn_only, "{pcr}");
    }
    assert!(vtpm.policy.entries()[&5].warn_only);
    assert_eq!(vtpm.events.events.len(), 9);
    // Among several configured keys, the one its kid names verifies.
    let keys = [new_key().release_key().clone(), key.release_key().clone()];
    assert!(open(&signed, &keys, NOW).is_ok());
    // Unsigned, where no key is configured; the bytes are deterministic.
    let unsigned = set.encode().unwrap();
    assert_eq!(unsigned, set.to_cbor());
    assert_eq!(open(&unsigned, &[], NOW).unwrap().signer, None);
    assert_eq!(sign_unsigned(&unsigned, &key).unwrap().len(), signed.len());
    assert_eq!(verify_signature(&signed, &keys).unwrap().0, unsigned);
    // The window's ends are inside it.
    assert!(open(&signed, &keys, set.not_before).is_ok());
    assert!(open(&signed, &keys, set.not_after).is_ok());
}

#[test]
fn a_forged_set_is_refused() {
    let (key, release) = {
        let k = new_key();
        let r = k.release_key().clone();
        (k, r)
    };
    let signed = set("kernel").sign(&key).unwrap();
    // Another image's values under the genuine signature.
    let mut p = parts(&signed);
    p[2] = Value::Bytes(set("another kernel").encode().unwrap());
    assert!(matches!(
        open(&reassemble(p), std::slice::from_ref(&release), NOW),
        Err(ReferenceError::BadSignature(_))
    ));
    // Every byte of the signed set flipped: refused, never read.
    for i in 0..signed.len() {
        let mut forged = signed.clone();
        forged[i] ^= 0x01;
        assert!(
            open(&forged, std::slice::from_ref(&release), NOW).is_err(),
            "byte {i}"
        );
    }
    // Signed by another key under the configured key's kid.
    let other = new_key();
    let mut p = parts(&set("kernel").sign(&other).unwrap());
    let genuine = parts(&signed);
    p[0] = genuine[0].clone();
    assert!(matches!(
        open(&reassemble(p), std::slice::from_ref(&release), NOW),
        Err(ReferenceError::BadSignature(_))
    ));
}

#[test]
fn a_set_signed_by_another_key_is_refused() {
    let signed = set("kernel").sign(&new_key()).unwrap();
    let configured = new_key().release_key().clone();
    assert!(matches!(
        open(&signed, &[configured], NOW),
        Err(ReferenceError::UnknownKey(_))
    ));
}

#[test]
fn an_unsigned_set_is_refused_where_a_release_key_is_configured() {
    let set = set("kernel");
    let key = new_key();
    let unsigned = set.encode().unwrap();
    assert!(matches!(
        open(&unsigned, &[key.release_key().clone()], NOW),
        Err(ReferenceError::Unsigned)
    ));
    // And a signed one is not read as if checked where no key is configured.
    assert!(matches!(
        open(&set.sign(&key).unwrap(), &[], NOW),
        Err(ReferenceError::NoReleaseKey)
    ));
    // Nor is a signature taken away or replaced by an empty one.
    let mut p = parts(&set.sign(&key).unwrap());
    p[3] = Value::Bytes(Vec::new());
    assert!(open(&reassemble(p), &[key.release_key().clone()], NOW).is_err());
}

#[test]
fn an_expired_or_not_yet_valid_set_is_refused() {
    let (set, key) = (set("kernel"), new_key());
    let signed = set.sign(&key).unwrap();
    let keys = [key.release_key().clone()];
    let e = open(&signed, &keys, set.not_after + 1).unwrap_err();
    assert!(matches!(e, ReferenceError::Expired { not_after, .. } if not_after == set.not_after));
    assert!(
        e.to_string()
            .contains("confboot-node 1.2.0 expired at 2027-"),
        "{e}"
    );
    assert!(matches!(
        open(&signed, &keys, set.not_before - 1),
        Err(ReferenceError::NotYetValid { .. })
    ));
    // A window that ends before it starts is not written.
    let mut backwards = set.clone();
    backwards.not_after = backwards.not_before;
    assert!(matches!(backwards.encode(), Err(ReferenceError::Format(_))));
}

#[test]
fn a_set_that_does_not_pin_the_image_is_refused() {
    let mut loose = set("kernel");
    let policy = &mut loose.variants[0].policy;
    let pcr9 = policy.entries()[&9].value.clone();
    policy.set(9, pcr9, true);
    assert!(matches!(
        loose.encode(),
        Err(ReferenceError::Policy {
            error: PolicyError::VtpmImageNotPinned { .. },
            ..
        })
    ));
    // Its bytes, written anyway and signed, are refused by a reader too.
    let key = new_key();
    let signed = cose::sign(&loose.to_cbor(), &key).unwrap();
    assert!(matches!(
        open(&signed, &[key.release_key().clone()], NOW),
        Err(ReferenceError::Policy { .. })
    ));
}

#[test]
fn events_that_do_not_replay_to_their_pcr_are_refused() {
    let mut s = set("kernel");
    s.variants[0].events.events[0].sha256 = sha(b"another kernel");
    assert!(matches!(
        s.encode(),
        Err(ReferenceError::EventsDisagree { pcr: 4, .. })
    ));
    // An event on a PCR the set has no value for.
    let mut s = set("kernel");
    s.variants[0].events.events.push(event(8, "EV_IPL", "grub"));
    assert!(matches!(
        s.encode(),
        Err(ReferenceError::EventsDisagree { pcr: 8, .. })
    ));
}

#[test]
fn other_encodings_and_shapes_of_the_same_set_are_refused() {
    let set = set("kernel");
    let good = set.to_cbor();
    let Value::Tag(501, corim) = cbor::decode(&good, LIMITS).unwrap() else {
        panic!()
    };
    let Value::Map(entries) = *corim else {
        panic!()
    };
    let rebuild = |edit: &dyn Fn(&mut Entries)| {
        let mut e = entries.clone();
        edit(&mut e);
        cbor::encode(&Value::Tag(501, Box::new(Value::Map(e))))
    };
    assert_eq!(rebuild(&|_| {}), good);
    // An unknown key; no profile; another profile; a bare corim-map.
    let unknown = rebuild(&|e| e.push((Value::Uint(5), Value::Array(vec![]))));
    let no_profile = rebuild(&|e| e.retain(|(k, _)| *k != Value::Uint(3)));
    let other_profile = rebuild(&|e| {
        e[2].1 = Value::Tag(32, Box::new(Value::text("urn:other")));
    });
    let bare = cbor::encode(&Value::Map(entries.clone()));
    for bytes in [unknown, no_profile, other_profile, bare] {
        assert!(
            matches!(
                ReferenceSet::from_cbor(&bytes),
                Err(ReferenceError::Format(_))
            ),
            "{:?}",
            ReferenceSet::from_cbor(&bytes)
        );
    }
    // Measurements in another order: the same contents, another encoding.
    let Value::Array(tags) = &entries[1].1 else {
        panic!()
    };
    let Value::Tag(506, comid) = &tags[0] else {
        panic!()
    };
    let Value::Bytes(comid) = &**comid else {
        panic!()
    };
    let comid = cbor::decode(comid, LIMITS).unwrap();
    let reordered = {
        let mut c = comid.clone();
        let Value::Map(m) = &mut c else { panic!() };
        let Value::Map(t) = &mut m[1].1 else { panic!() };
        let Value::Array(triples) = &mut t[0].1 else {
            panic!()
        };
        let Value::Array(triple) = &mut triples[0] else {
            panic!()
        };
        let Value::Array(measurements) = &mut triple[1] else {
            panic!()
        };
        measurements.swap(1, 2);
        c
    };
    let bytes = rebuild(&|e| {
        e[1].1 = Value::Array(vec![Value::Tag(
            506,
            Box::new(Value::Bytes(cbor::encode(&reordered))),
        )]);
    });
    assert!(matches!(
        ReferenceSet::from_cbor(&bytes),
        Err(ReferenceError::Format(_))
    ));
    // A variant whose values are neither PCRs nor a launch; PCRs under
    // SEV-SNP, whose values are a launch.
    let mut tdx = set.clone();
    tdx.variants[0].variant = Variant::Tdx;
    assert!(matches!(
        tdx.encode(),
        Err(ReferenceError::UnsupportedVariant(_))
    ));
    let mut snp = set.clone();
    snp.variants[0].variant = Variant::SevSnp;
    assert!(matches!(snp.encode(), Err(ReferenceError::Format(_))));
    // A variant twice.
    let mut twice = set.clone();
    twice.variants.push(twice.variants[0].clone());
    assert!(matches!(twice.encode(), Err(ReferenceError::Format(_))));
}

#[test]
fn oversized_and_deeply_nested_input_is_refused_before_it_is_read() {
    let big = vec![0u8; MAX_SET_BYTES + 1];
    assert!(matches!(
        open(&big, &[], NOW),
        Err(ReferenceError::TooLarge(_))
    ));
    assert!(matches!(
        ReferenceSet::from_cbor(&big),
        Err(ReferenceError::TooLarge(_))
    ));
    let deep = [vec![0x81; MAX_DEPTH + 1], vec![0]].concat();
    assert!(matches!(
        open(&deep, &[], NOW),
        Err(ReferenceError::Cbor(CborError {
            problem: CborProblem::TooDeep,
            ..
        }))
    ));
    let mut long = set("kernel");
    long.name = "n".repeat(MAX_NAME_LEN + 1);
    assert!(matches!(long.encode(), Err(ReferenceError::Format(_))));
}

/// An image's values for each vTPM variant, one set: `qemu-vtpm` and
/// `azure-sev-snp` (the paravisor's vTPM, PCRs 4 and 9 pinned, no event
/// log), signed and read back; an Azure part that leaves PCR 9 unpinned
/// is refused when signed and when read.
#[test]
fn a_set_carries_the_values_of_each_pcr_variant() {
    let key = new_key();
    let mut set = set("kernel");
    let mut azure = MeasurementPolicy::default();
    azure.set(4, sha(b"azure kernel").to_vec(), false);
    azure.set(9, sha(b"azure initrd and command line").to_vec(), false);
    azure.set(0, sha(b"hyper-v firmware").to_vec(), true);
    set.variants.push(VariantReference {
        variant: Variant::AzureSevSnp,
        policy: azure.clone(),
        events: EventList { events: Vec::new() },
        launch: None,
    });
    let signed = set.sign(&key).unwrap();
    let opened = open(&signed, &[key.release_key().clone()], NOW).unwrap();
    assert_eq!(opened.set, set);
    assert_eq!(
        opened.set.variant(Variant::AzureSevSnp).unwrap().policy,
        azure
    );
    assert!(opened.set.variant(Variant::QemuVtpm).is_some());

    let mut unpinned = set.clone();
    unpinned.variants[1].policy.remove(9);
    assert!(matches!(
        unpinned.sign(&key),
        Err(ReferenceError::Policy {
            variant: Variant::AzureSevSnp,
            ..
        })
    ));
    assert!(matches!(
        ReferenceSet::from_cbor(&unpinned.to_cbor()),
        Err(ReferenceError::Policy {
            variant: Variant::AzureSevSnp,
            ..
        })
    ));
}

/// An image's SEV-SNP launch beside its vTPM PCRs in one set: the launch
/// digest (SHA-384) and the kernel hashes of the measured direct boot it
/// was taken of, signed and read back; an SNP part without its launch, one
/// with PCRs, and a digest under another algorithm are each refused.
#[test]
fn a_set_carries_an_sev_snp_launch_and_its_kernel_hashes() {
    let key = new_key();
    let mut set = set("kernel");
    let hashes = DirectBootHashes {
        kernel: sha(b"vmlinuz"),
        initrd: sha(b"initrd"),
        cmdline: sha(b"console=ttyS0\0"),
    };
    set.variants.push(VariantReference::snp_launch(
        [0x5a; LAUNCH_DIGEST_LEN],
        hashes,
    ));
    let signed = set.sign(&key).unwrap();
    let opened = open(&signed, &[key.release_key().clone()], NOW).unwrap();
    assert_eq!(opened.set, set);
    let snp = opened.set.variant(Variant::SevSnp).unwrap();
    assert_eq!(snp.launch, Some(hashes));
    assert_eq!(
        snp.policy.entries()[&0].value,
        vec![0x5a; LAUNCH_DIGEST_LEN]
    );
    assert!(!snp.policy.entries()[&0].warn_only);

    // An SNP part written as PCRs (no launch) is no launch.
    let mut no_launch = set.clone();
    no_launch.variants[1].launch = None;
    assert!(no_launch.encode().is_err());
    // A vTPM part with a launch is refused too.
    let mut pcrs_with_launch = set.clone();
    pcrs_with_launch.variants[0].launch = Some(hashes);
    assert!(pcrs_with_launch.encode().is_err());
    // The launch digest under SHA-256's algorithm number.
    let bytes = set.to_cbor();
    let needle = [&[0x82, 0x07, 0x58, 0x30][..], &[0x5a; 4]].concat();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("the digest as written: [7, h'48 bytes']");
    let mut other = bytes.clone();
    other[at + 1] = 0x01;
    assert!(matches!(
        ReferenceSet::from_cbor(&other),
        Err(ReferenceError::Format(_))
    ));
}
