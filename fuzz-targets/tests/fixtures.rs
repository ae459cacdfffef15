//! The oracles are live: the fixtures' own evidence validates, so a target
//! that sees `Ok` for a fuzzed input is checking a real acceptance, and a
//! changed signed byte is refused.

use confboot_atls::AttestationMessage;
use confboot_attest::check::ReportDataCheck;
use confboot_attest::{AttestationError, Validator, Variant};
use confboot_cluster::ticket::{JoinTicket, check_cluster_mark, check_member_mark};
use confboot_fuzz_targets::fixtures::{self, EXTRA, PcrSet};
use confboot_fuzz_targets::{TICKET_SALT, TICKET_SECRET};
use confboot_proto::Message;
use confboot_proto::vtpm::QuoteEvidence;
use confboot_snp::SnpEvidence;
use confboot_vtpm::VtpmRefusal;

#[test]
fn fixture_vtpm_evidence_validates_with_either_trust_and_a_changed_quote_does_not() {
    let v = fixtures::vtpm();
    for set in [PcrSet::All, PcrSet::PolicyAndMark, PcrSet::Logged] {
        let e = v.evidence(&EXTRA, set, true);
        v.pinned.validate(&e, &EXTRA).unwrap();
        v.ca_trusted.validate(&e, &EXTRA).unwrap();
        let mut q = QuoteEvidence::decode(&e[..]).unwrap();
        let last = q.attest.len() - 1;
        q.attest[last] ^= 1;
        let changed = q.encode_to_vec();
        assert!(matches!(
            v.pinned.validate(&changed, &EXTRA),
            Err(e @ AttestationError::Signature(_)) if e.is(&VtpmRefusal::PcrDigest)
        ));
    }
    // Without a certificate only the pinned trust passes.
    let e = v.evidence(&EXTRA, PcrSet::All, false);
    v.pinned.validate(&e, &EXTRA).unwrap();
    assert!(matches!(
        v.ca_trusted.validate(&e, &EXTRA),
        Err(e @ AttestationError::Trust(_)) if e.is(&VtpmRefusal::NoAkCertificate)
    ));
    // A marked node is refused at join time.
    let e = v.evidence(&EXTRA, PcrSet::Marked, false);
    assert!(matches!(
        v.pinned.validate(&e, &EXTRA),
        Err(e @ AttestationError::Policy(_)) if e.is(&VtpmRefusal::ClusterMarked)
    ));
}

#[test]
fn fixture_attestation_messages_verify_for_vtpm_and_bind_nothing_for_snp() {
    let v = fixtures::vtpm();
    let message = AttestationMessage {
        evidence: Some((
            Variant::QemuVtpm,
            v.evidence(&fixtures::SESSION_EXTRA, PcrSet::All, false),
        )),
        sealing_key: None,
        reference_values: None,
    };
    let vtpm = fixtures::atls_validators(Variant::QemuVtpm);
    let session = |key: Option<&[u8; 32]>| Ok(fixtures::session_extra(key));
    assert_eq!(
        message.verify(vtpm, session).unwrap().variant,
        Variant::QemuVtpm
    );
    // Another session: the evidence is not bound to it.
    assert!(message.verify(vtpm, |_| Ok([0; 32])).is_err());
    // A sealing key the evidence does not bind.
    let swapped = AttestationMessage {
        sealing_key: Some([0x42; 32]),
        reference_values: None,
        ..message.clone()
    };
    assert!(swapped.verify(vtpm, session).is_err());
    // Genuine SNP evidence passes every check but the binding.
    let snp = &fixtures::snp()[1];
    let message = AttestationMessage {
        evidence: Some((Variant::SevSnp, snp.evidence().encode().unwrap())),
        sealing_key: None,
        reference_values: None,
    };
    let err = message
        .verify(fixtures::atls_validators(Variant::SevSnp), session)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not bound"), "{err}");
}

#[test]
fn fixture_snp_reports_verify_and_a_changed_signed_byte_does_not() {
    for f in fixtures::snp() {
        let exact = ReportDataCheck::Exact(f.report_data());
        f.validator.verify(&f.evidence(), &exact).unwrap();
        let mut report = f.report.to_vec();
        report[0x20] ^= 1; // IMAGE_ID, signed
        let changed = SnpEvidence {
            report: confboot_snp::SnpReport::from_bytes(&report).unwrap(),
            certificates: f.evidence().certificates,
        };
        assert!(matches!(
            f.validator.verify(&changed, &exact),
            Err(e @ AttestationError::Signature(_)) if e.is(&confboot_snp::SnpRefusal::ReportSignature)
        ));
    }
}

#[test]
fn the_ticket_targets_cluster_is_the_members() {
    let salt = confboot_kms::MeasurementSalt::try_from(&TICKET_SALT[..]).unwrap();
    let member = confboot_cluster::mark::marked_pcr15(&confboot_kms::derive_cluster_id(
        &TICKET_SECRET,
        &salt,
    ));
    let service = confboot_attest::Attested {
        set_verdict: None,
        warnings: Vec::new(),
        variant: Variant::QemuVtpm,
        measurements: [(confboot_tpm::CLUSTER_ID_PCR, member.to_vec())].into(),
    };
    let t = JoinTicket {
        state_disk_key: confboot_kms::SecretBytes::new(vec![1; 32]),
        measurement_secret: confboot_kms::SecretBytes::new(TICKET_SECRET.to_vec()),
        measurement_salt: TICKET_SALT.to_vec(),
        control_plane_key: vec![4; 32],
        ..Default::default()
    };
    let checked = t.check().unwrap();
    check_member_mark(checked.cluster_id(), Some(&service)).unwrap();
    check_cluster_mark(&TICKET_SECRET, &salt, Some(&service)).unwrap();
}

/// The luks2_header seeds reach the unlock (their key-slot areas are not
/// in the input, so the digest refuses the merged key), and the seed with
/// a 4 GiB Argon2 memory is refused by the bounds before it runs.
#[test]
fn the_luks2_header_seeds_reach_the_unlock() {
    use confboot_disk::luks2::Luks2Error;
    let outcome = |name: &str| {
        let (_, data) = confboot_fuzz_targets::seeds::seeds("luks2_header")
            .into_iter()
            .find(|(n, _)| n == name)
            .expect("the seed");
        confboot_fuzz_targets::luks2_header_outcome(&data)
    };
    for name in [
        "cryptsetup-pbkdf2-tokens-header",
        "cryptsetup-argon2id-argon2i-header",
    ] {
        assert_eq!(
            outcome(name),
            Some(Err(Luks2Error::WrongPassphrase)),
            "{name}"
        );
    }
    assert!(matches!(
        outcome("cryptsetup-argon2-4gib-header"),
        Some(Err(Luks2Error::CostTooHigh { value: 4194304, .. }))
    ));
    assert_eq!(
        confboot_fuzz_targets::luks2_header_outcome(&[0; 4096]),
        None
    );
}

#[test]
fn fixture_tdx_quotes_and_collateral_reach_the_oracles() {
    use confboot_attest::check::CheckOutcome;
    use confboot_tdx::{
        INTEL_SGX_TCB_SIGNING_2018_DER, IntelCert, Quote, SignedQeIdentity, SignedTcbInfo,
        TdxPolicy, TdxRoots, TdxValidator, check,
    };
    // Each genuine quote passes the four checks the tdx_quote oracle
    // requires, at its time; one flipped signed byte does not.
    for f in fixtures::TDX_QUOTES {
        let validator = TdxValidator::with_roots(
            TdxPolicy {
                insecure_any_image: true,
                ..TdxPolicy::default()
            },
            TdxRoots::intel(),
        )
        .as_of(f.at);
        let passes = |bytes: &[u8]| {
            let q = Quote::parse(bytes).unwrap();
            let checks = validator.verify_quote_detailed(&q, &ReportDataCheck::NotChecked);
            [
                check::PCK_CHAIN,
                check::QE_REPORT_SIGNATURE,
                check::QE_REPORT_DATA,
                check::QUOTE_SIGNATURE,
            ]
            .iter()
            .all(|n| {
                checks
                    .iter()
                    .any(|c| c.name == *n && matches!(c.outcome, CheckOutcome::Passed(_)))
            })
        };
        assert!(passes(f.quote));
        let mut flipped = f.quote.to_vec();
        flipped[300] ^= 1;
        assert!(!passes(&flipped));
    }
    // The collateral verifies with the built-in signer.
    let signer = IntelCert::from_der(INTEL_SGX_TCB_SIGNING_2018_DER).unwrap();
    for t in fixtures::TDX_TCB_INFOS {
        SignedTcbInfo::parse(t).unwrap().verify(&signer).unwrap();
    }
    SignedQeIdentity::parse(fixtures::TDX_QE_IDENTITY)
        .unwrap()
        .verify(&signer)
        .unwrap();
}
