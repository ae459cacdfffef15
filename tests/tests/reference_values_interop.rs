//! Interoperability of signed reference values: a set written and signed by
//! `confboot_appraisal::reference` is read back by an independent decoder, the
//! `corim` crate (its own CBOR, CoRIM and COSE_Sign1 types), and its
//! signature is verified with ring from the Sig_structure that crate builds
//! and the public key as x509-parser reads it from the PEM. Nothing of
//! confboot's own reader is used on the way back.

use confboot_appraisal::reference::{PROFILE, ReferenceSet, SigningKey, VENDOR, VariantReference};
use confboot_attest::Variant;
use confboot_measure::predicted_policy;
use confboot_tpm::event_log::{EventList, EventSummary};
use corim::types::common::{MeasuredElement, TagIdChoice};
use corim::types::corim::{ConciseTagChoice, CorimId, ProfileChoice};
use corim::types::signed::decode_signed_corim;
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

const NOW: i64 = 1_800_000_000;

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

fn reference_set() -> ReferenceSet {
    let mut events = vec![
        event(4, "EV_EFI_BOOT_SERVICES_APPLICATION", "the kernel"),
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
    let events = EventList { events };
    ReferenceSet {
        name: "confboot-node".into(),
        version: "1.2.0".into(),
        not_before: NOW - 3600,
        not_after: NOW + 3600,
        variants: vec![VariantReference {
            variant: Variant::QemuVtpm,
            policy: predicted_policy(&events),
            events,
            launch: None,
        }],
    }
}

fn int(v: &corim::cbor::value::Value) -> Option<i128> {
    match v {
        corim::cbor::value::Value::Integer(n) => Some(*n),
        _ => None,
    }
}

#[test]
fn a_signed_set_reads_back_with_the_corim_crate_and_verifies_with_ring() {
    let set = reference_set();
    let (key, _) = SigningKey::generate().unwrap();
    let signed = set.sign(&key).unwrap();

    // The envelope: ES256, the content type, the kid, the CWT issuer.
    let cose = decode_signed_corim(&signed).expect("the corim crate decodes the COSE_Sign1");
    let header = cose.protected();
    assert_eq!(header.alg.to_i64(), -7);
    assert_eq!(header.content_type.as_deref(), Some("application/rim+cbor"));
    let pem = key.release_key().to_pem();
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    assert_eq!(block.label, "PUBLIC KEY");
    assert_eq!(header.kid.as_deref(), Some(&sha(&block.contents)[..]));
    let issuer = &header.cwt_claims.as_ref().expect("CWT claims").iss;
    assert_eq!(*issuer, confboot_util::hex::encode(&sha(&block.contents)));
    assert!(cose.unprotected.is_empty());
    assert_eq!(cose.signature.len(), 64);

    // The signature, checked with ring over the crate's Sig_structure.
    let (_, spki) = SubjectPublicKeyInfo::from_der(&block.contents).unwrap();
    let point = spki.subject_public_key.data.to_vec();
    let public =
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point);
    let to_be_signed = cose.to_be_signed(&[]).unwrap();
    public
        .verify(&to_be_signed, &cose.signature)
        .expect("the signature verifies");
    let mut other = to_be_signed.clone();
    *other.last_mut().unwrap() ^= 1;
    assert!(public.verify(&other, &cose.signature).is_err());

    // The payload: a CoRIM the crate decodes and validates as of NOW.
    let payload = cose.payload.as_deref().expect("an attached payload");
    assert_eq!(payload, set.to_cbor());
    let (corim, comids) =
        corim::validate::decode_and_validate_at(payload, NOW).expect("a valid CoRIM");
    assert_eq!(corim.id, CorimId::Text("confboot-node 1.2.0".into()));
    assert_eq!(corim.profile, Some(ProfileChoice::Uri(PROFILE.into())));
    let validity = corim.rim_validity.as_ref().unwrap();
    assert_eq!(validity.not_before.unwrap().epoch_secs(), NOW - 3600);
    assert_eq!(validity.not_after.epoch_secs(), NOW + 3600);
    assert!(matches!(corim.tags[..], [ConciseTagChoice::Comid(_)]));
    assert!(corim::validate::decode_and_validate_at(payload, NOW + 7200).is_err());

    let [comid] = &comids[..] else {
        panic!("one CoMID")
    };
    assert_eq!(
        comid.tag_identity.tag_id,
        TagIdChoice::Text("confboot-node 1.2.0".into())
    );
    let triples = comid.triples.reference_triples.as_ref().unwrap();
    let [triple] = &triples[..] else {
        panic!("one reference triple")
    };
    let class = triple.0.class.as_ref().unwrap();
    assert_eq!(class.vendor.as_deref(), Some(VENDOR));
    assert_eq!(class.model.as_deref(), Some("qemu-vtpm"));

    let measurements = &triple.1;
    let image = &measurements[0];
    assert_eq!(image.mkey, Some(MeasuredElement::Text("image".into())));
    assert_eq!(image.mval.version.as_ref().unwrap().version, "1.2.0");
    assert_eq!(image.mval.name.as_deref(), Some("confboot-node"));

    let vtpm = &set.variants[0];
    let mut pcrs = 0;
    let mut events = Vec::new();
    for m in &measurements[1..] {
        let [digest] = &m.mval.digests.as_ref().unwrap()[..] else {
            panic!("one digest")
        };
        assert_eq!(digest.alg().as_int(), Some(1), "SHA-256");
        match m.mkey.as_ref().unwrap() {
            MeasuredElement::Uint(pcr) => {
                let expected = &vtpm.policy.entries()[&(*pcr as u32)];
                assert_eq!(digest.1, expected.value);
                let warn_only = m.mval.extra_entries.get(&-1);
                assert_eq!(
                    warn_only == Some(&corim::cbor::value::Value::Bool(true)),
                    expected.warn_only,
                    "PCR {pcr}"
                );
                pcrs += 1;
            }
            MeasuredElement::Text(k) => {
                assert_eq!(*k, format!("event/{}", events.len()));
                let pcr = int(&m.mval.extra_entries[&-2]).unwrap() as u32;
                let corim::cbor::value::Value::Text(event_type) = &m.mval.extra_entries[&-3] else {
                    panic!("an event type")
                };
                events.push(EventSummary {
                    pcr,
                    event_type: event_type.clone(),
                    sha256: digest.1.as_slice().try_into().unwrap(),
                    description: m.mval.name.clone().unwrap(),
                });
            }
            other => panic!("measurement key {other:?}"),
        }
    }
    assert_eq!(pcrs, vtpm.policy.entries().len());
    assert_eq!(events, vtpm.events.events);
}
