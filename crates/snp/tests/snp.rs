//! The SEV-SNP variant against real AMD-signed reports (`testdata/`,
//! provenance in its README): genuine reports verify with their own
//! certificates, and every kind of tampering or policy breach is refused
//! with a precise error.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use confboot_attest::check::*;
use confboot_attest::{
    AttestRefusal, AttestationError, Detail, Issuer, MeasurementPolicy, Validator, Variant,
};
use confboot_snp::*;
use confboot_util::hex;

fn testdata(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A real report, its endorsement key, and what a matching policy needs.
struct Fixture {
    report: Vec<u8>,
    vek_kind: CertKind,
    vek: Vec<u8>,
    vmpl: u32,
}

fn milan() -> Fixture {
    Fixture {
        report: testdata("report_milan.bin"),
        vek_kind: CertKind::Vcek,
        vek: testdata("vcek_milan.der"),
        vmpl: 0,
    }
}

fn trustee() -> Fixture {
    Fixture {
        report: testdata("test-report.bin"),
        vek_kind: CertKind::Vcek,
        vek: testdata("test-vcek.der"),
        vmpl: 0,
    }
}

fn vlek() -> Fixture {
    Fixture {
        report: testdata("test-vlek-report.bin"),
        vek_kind: CertKind::Vlek,
        vek: testdata("test-vlek.der"),
        vmpl: 1,
    }
}

impl Fixture {
    fn parsed(&self) -> SnpReport {
        SnpReport::from_bytes(&self.report).unwrap()
    }

    fn evidence(&self) -> SnpEvidence {
        self.evidence_of(&self.report)
    }

    fn evidence_of(&self, report: &[u8]) -> SnpEvidence {
        SnpEvidence {
            report: SnpReport::from_bytes(report).unwrap(),
            certificates: vec![CertEntry {
                kind: self.vek_kind,
                der: self.vek.clone(),
            }],
        }
    }

    /// A policy this report satisfies: its own measurement and VMPL.
    fn policy(&self) -> SnpPolicy {
        let mut measurement = MeasurementPolicy::default();
        measurement.set(0, self.parsed().measurement().to_vec(), false);
        let signing_keys = match self.vek_kind {
            CertKind::Vlek => vec![SigningKey::Vlek],
            _ => vec![SigningKey::Vcek],
        };
        SnpPolicy {
            measurement,
            vmpl: self.vmpl,
            signing_keys,
            ..SnpPolicy::default()
        }
    }

    fn exact_report_data(&self) -> ReportDataCheck {
        ReportDataCheck::Exact(self.parsed().report_data().try_into().unwrap())
    }
}

fn bundle(name: &str) -> ProductRoot {
    ProductRoot::from_pem_bundle(&testdata(name)).unwrap()
}

/// Roots for the VLEK report: the built-in ones plus Milan's ASVK.
fn roots_with_milan_asvk() -> TrustRoots {
    TrustRoots::new(vec![bundle("milan_ask_ark_asvk.pem")])
}

/// A time when every fixture's certificates were valid (the VLEK's window
/// is 2024-12-10 to 2025-12-10): 2025-06-01. Reports are checked as of then.
const FIXTURES_VALID_AT: i64 = 1_748_736_000;

/// A validator with explicit roots, checking certificate validity as of
/// [`FIXTURES_VALID_AT`].
fn validator(policy: SnpPolicy, roots: TrustRoots) -> SnpValidator {
    SnpValidator::with_roots(policy, roots).as_of(FIXTURES_VALID_AT)
}

fn verify(
    f: &Fixture,
    evidence: &SnpEvidence,
    policy: SnpPolicy,
    roots: TrustRoots,
) -> Result<(), AttestationError> {
    validator(policy, roots)
        .verify(evidence, &f.exact_report_data())
        .map(|_| ())
}

fn outcome<'a>(checks: &'a [CheckResult], name: &str) -> &'a CheckOutcome {
    &checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?}"))
        .outcome
}

#[test]
fn genuine_reports_verify_with_their_own_certificates() {
    for (f, roots) in [
        (milan(), TrustRoots::builtin()),
        (trustee(), TrustRoots::builtin()),
        (vlek(), roots_with_milan_asvk()),
    ] {
        let v = validator(f.policy(), roots);
        let checks = v.verify_report_detailed(&f.evidence(), &f.exact_report_data());
        for c in &checks {
            assert!(matches!(c.outcome, CheckOutcome::Passed(_)), "{c}");
        }
        assert_eq!(checks.len(), 21);
        let attested = v.verify(&f.evidence(), &f.exact_report_data()).unwrap();
        assert_eq!(attested.variant, Variant::SevSnp);
        let report = f.parsed();
        let launch = [report.chip_id(), report.report_id()].concat();
        assert_eq!(
            attested.measurements,
            BTreeMap::from([
                (0, report.measurement().to_vec()),
                (confboot_snp::LAUNCH_IDENTITY_INDEX, launch),
            ])
        );
    }
    // The VLEK report: VMPL 1, masked chip id, version 3.
    let f = vlek();
    let r = f.parsed();
    assert_eq!((r.version(), r.vmpl(), r.chip_id_masked()), (3, 1, true));
    let checks = validator(f.policy(), roots_with_milan_asvk())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert_eq!(
        outcome(&checks, check::CHAIN),
        &CheckOutcome::Passed("VLEK → Milan ASVK → Milan ARK (pinned)".into())
    );
}

/// The aTLS path: evidence bytes and extra_data through the `Validator` trait.
#[test]
fn validator_binds_extra_data_through_the_trait() {
    let f = trustee();
    let report = f.parsed();
    let extra: [u8; 32] = report.report_data()[..32].try_into().unwrap();
    assert!(report.report_data()[32..].iter().all(|b| *b == 0));
    let v = validator(f.policy(), TrustRoots::builtin());
    assert_eq!(Validator::variant(&v), Variant::SevSnp);
    let bytes = f.evidence().encode().unwrap();
    let attested = v.validate(&bytes, &extra).unwrap();
    assert_eq!(attested.measurements[&0], report.measurement());

    // Another handshake's extra_data: refused as not bound.
    let mut other = extra;
    other[31] ^= 1;
    assert_eq!(
        v.validate(&bytes, &other),
        Err(AttestationError::Binding(Detail::with(
            &SnpRefusal::ReportData,
            format!(
                "report data starts with {}, expected extra data {}",
                hex::encode(&extra),
                hex::encode(&other)
            )
        )))
    );
}

#[test]
fn report_data_not_matching_is_refused() {
    // 64 bytes of data where confboot wants 32 + zeros.
    let f = milan();
    let rd = f.parsed().report_data().to_vec();
    let v = validator(f.policy(), TrustRoots::builtin());
    let err = v
        .verify(
            &f.evidence(),
            &ReportDataCheck::ExtraData(rd[..32].try_into().unwrap()),
        )
        .unwrap_err();
    assert_eq!(
        err,
        AttestationError::Binding(Detail::with(
            &SnpRefusal::ReportData,
            format!(
                "report data bytes 32..64 are not zero: {}",
                hex::encode(&rd[32..])
            )
        ))
    );
    // An exact expectation that differs in one byte.
    let mut want: [u8; 64] = rd.as_slice().try_into().unwrap();
    want[63] ^= 0x80;
    let err = v
        .verify(&f.evidence(), &ReportDataCheck::Exact(want))
        .unwrap_err();
    assert!(
        matches!(&err, AttestationError::Binding(d)
            if d.is(&SnpRefusal::ReportData) && d.text().starts_with("report data ")),
        "{err}"
    );
}

#[test]
fn one_changed_byte_in_the_signed_part_is_refused() {
    // Every byte of the signed range, straight at the signature check the
    // validator uses (fast: ring's ECDSA).
    for f in [milan(), trustee(), vlek()] {
        let key = VekInfo::from_der(&f.vek).unwrap().public_key;
        verify_signature(&f.parsed(), &key).unwrap();
        for pos in 0..SIGNED_LEN {
            let mut bad = f.report.clone();
            bad[pos] ^= 0x01;
            let err = verify_signature(&SnpReport::from_bytes(&bad).unwrap(), &key).unwrap_err();
            assert!(
                matches!(&err, AttestationError::Signature(d)
                    if d.is(&SnpRefusal::ReportSignature) && d.text().starts_with("report signature")),
                "byte {pos:#x}: {err}"
            );
        }
    }
    // A sample across the range through the whole validator, including
    // report_data, measurement, policy, chip_id, key_info, VMPL and reserved
    // bytes (which the sev crate's re-encoding would not cover).
    let named = [
        offset::VERSION,
        offset::POLICY,
        offset::POLICY + 2, // the DEBUG bit's byte
        offset::VMPL,
        offset::SIGNATURE_ALGO,
        offset::CURRENT_TCB,
        offset::KEY_INFO,
        0x4C, // reserved
        offset::REPORT_DATA,
        offset::REPORT_DATA + 63,
        offset::MEASUREMENT,
        offset::MEASUREMENT + 47,
        offset::HOST_DATA,
        offset::ID_KEY_DIGEST,
        offset::REPORTED_TCB + 7,
        0x18B, // reserved
        offset::CHIP_ID,
        offset::CHIP_ID + 63,
        offset::LAUNCH_TCB,
        0x208, // reserved
        SIGNED_LEN - 1,
    ];
    let mut positions: Vec<usize> = (0..SIGNED_LEN).step_by(29).collect();
    positions.extend(named);
    for (f, roots) in [
        (milan(), TrustRoots::builtin()),
        (vlek(), roots_with_milan_asvk()),
    ] {
        for &pos in &positions {
            let mut bad = f.report.clone();
            bad[pos] ^= 0x01;
            let err = verify(&f, &f.evidence_of(&bad), f.policy(), roots.clone()).unwrap_err();
            // A changed REPORT_DATA is refused before the signature is
            // looked at: it is not the handshake's.
            if (offset::REPORT_DATA..offset::REPORT_DATA + 64).contains(&pos) {
                assert!(
                    matches!(&err, AttestationError::Binding(d) if d.is(&SnpRefusal::ReportData)),
                    "byte {pos:#x}: {err:?}"
                );
                continue;
            }
            let want = if (offset::SIGNATURE_ALGO..offset::SIGNATURE_ALGO + 4).contains(&pos) {
                format!(
                    "report signature: algorithm {} is not ECDSA P-384 with SHA-384 (1)",
                    SnpReport::from_bytes(&bad).unwrap().signature_algo()
                )
            } else {
                "report signature does not verify with the endorsement key".into()
            };
            assert_eq!(
                err,
                AttestationError::Signature(Detail::with(&SnpRefusal::ReportSignature, want)),
                "byte {pos:#x}"
            );
        }
    }
    // The signature itself: R, S, and their must-be-zero upper bytes.
    let f = trustee();
    for (pos, want) in [
        (
            offset::SIGNATURE,
            "report signature does not verify with the endorsement key",
        ),
        (
            offset::SIGNATURE + 72,
            "report signature does not verify with the endorsement key",
        ),
        (
            offset::SIGNATURE + 71,
            "report signature: component R exceeds 384 bits",
        ),
        (
            offset::SIGNATURE + 143,
            "report signature: component S exceeds 384 bits",
        ),
    ] {
        let mut bad = f.report.clone();
        bad[pos] ^= 0x01;
        let err = verify(&f, &f.evidence_of(&bad), f.policy(), TrustRoots::builtin()).unwrap_err();
        assert_eq!(
            err,
            AttestationError::Signature(Detail::with(&SnpRefusal::ReportSignature, want)),
            "byte {pos:#x}"
        );
    }
}

#[test]
fn milan_vcek_under_genoa_roots_is_refused() {
    let f = milan();
    let genoa_only = || TrustRoots::new(vec![bundle("genoa_ask_ark_asvk.pem")]);
    let err = verify(&f, &f.evidence(), f.policy(), genoa_only()).unwrap_err();
    assert_eq!(
        err,
        AttestationError::Trust(Detail::with(
            &SnpRefusal::Chain,
            "the VCEK does not chain to a pinned ARK (tried Genoa ASK)"
        ))
    );
    // Sending the Milan ASK and ARK along does not help: the ARK is pinned.
    let mut ev = f.evidence();
    let milan_chain = testdata("cert_chain_milan");
    for (i, part) in x509_parser::pem::Pem::iter_from_buffer(&milan_chain).enumerate() {
        let kind = if i == 0 { CertKind::Ask } else { CertKind::Ark };
        ev.certificates.push(CertEntry {
            kind,
            der: part.unwrap().contents,
        });
    }
    assert_eq!(verify(&f, &ev, f.policy(), genoa_only()), Err(err));
    // Under the built-in roots the same evidence verifies.
    verify(&f, &ev, f.policy(), TrustRoots::builtin()).unwrap();
}

#[test]
fn invalid_legacy_vcek_is_refused() {
    let mut f = trustee();
    f.vek = testdata("test-vcek-invalid-legacy.der");
    let v = validator(f.policy(), TrustRoots::builtin());
    let err = v.verify(&f.evidence(), &f.exact_report_data()).unwrap_err();
    assert_eq!(
        err,
        AttestationError::Trust(Detail::with(
            &SnpRefusal::Chain,
            "the VCEK does not chain to a pinned ARK (tried Milan ASK, Genoa ASK, Turin ASK)"
        ))
    );
    // Every later check that reads the certificate also objects.
    let checks = v.verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert!(matches!(
        outcome(&checks, check::SIGNATURE),
        CheckOutcome::Failed(e @ AttestationError::Signature(_)) if e.is(&SnpRefusal::ReportSignature)
    ));
    assert!(
        matches!(outcome(&checks, check::CHIP_ID), CheckOutcome::Failed(AttestationError::Trust(d))
            if d.is(&SnpRefusal::ChipId) && d.text().contains("hwID 000102"))
    );
    assert!(
        matches!(outcome(&checks, check::REPORTED_TCB), CheckOutcome::Failed(AttestationError::Trust(d))
        if d.is(&SnpRefusal::ReportedTcb) && d.text().contains("snp: certificate 10, report 8")
            && d.text().contains("microcode: certificate 169, report 115"))
    );
}

#[test]
fn vlek_report_needs_the_asvk() {
    let f = vlek();
    let err = verify(&f, &f.evidence(), f.policy(), TrustRoots::builtin()).unwrap_err();
    assert_eq!(
        err,
        AttestationError::Trust(Detail::with(
            &SnpRefusal::ChainIntermediate,
            "no ASVK to verify the VLEK under the pinned ARKs (Milan, Genoa, Turin): configure one or send it in the evidence"
        ))
    );
    // With the ASVK configured it verifies ...
    verify(&f, &f.evidence(), f.policy(), roots_with_milan_asvk()).unwrap();
    // ... and with the ASVK sent in the evidence under the built-in roots too.
    let asvk = x509_parser::pem::Pem::iter_from_buffer(&testdata("milan_ask_ark_asvk.pem"))
        .map(|p| p.unwrap().contents)
        .find(|der| AmdCert::from_der(der).unwrap().role() == CertRole::Asvk)
        .unwrap();
    let mut ev = f.evidence();
    ev.certificates.push(CertEntry {
        kind: CertKind::Asvk,
        der: asvk.clone(),
    });
    verify(&f, &ev, f.policy(), TrustRoots::builtin()).unwrap();
    // The Genoa ASVK does not sign a Milan VLEK.
    let genoa_asvk = x509_parser::pem::Pem::iter_from_buffer(&testdata("genoa_ask_ark_asvk.pem"))
        .map(|p| p.unwrap().contents)
        .find(|der| AmdCert::from_der(der).unwrap().role() == CertRole::Asvk)
        .unwrap();
    let mut ev = f.evidence();
    ev.certificates.push(CertEntry {
        kind: CertKind::Asvk,
        der: genoa_asvk,
    });
    assert_eq!(
        verify(&f, &ev, f.policy(), TrustRoots::builtin()),
        Err(AttestationError::Trust(Detail::with(
            &SnpRefusal::Chain,
            "the VLEK does not chain to a pinned ARK (tried Genoa ASVK)"
        )))
    );
    // The same bundle's ASK still serves VCEK-signed reports.
    let t = trustee();
    verify(&t, &t.evidence(), t.policy(), roots_with_milan_asvk()).unwrap();
}

#[test]
fn tcb_below_a_minimum_is_refused() {
    let f = milan(); // reported = launch = bootloader 3, tee 0, snp 8, microcode 115
    for (min, want) in [
        (
            MinimumTcb {
                snp: 9,
                ..MinimumTcb::default()
            },
            "snp 8 < 9",
        ),
        (
            MinimumTcb {
                microcode: 116,
                ..MinimumTcb::default()
            },
            "microcode 115 < 116",
        ),
        (
            MinimumTcb {
                bootloader: 4,
                ..MinimumTcb::default()
            },
            "bootloader 3 < 4",
        ),
        (
            MinimumTcb {
                tee: 1,
                ..MinimumTcb::default()
            },
            "tee 0 < 1",
        ),
    ] {
        let mut policy = f.policy();
        policy.minimum_tcb = Some(min);
        let v = validator(policy, TrustRoots::builtin());
        assert_eq!(
            v.verify(&f.evidence(), &f.exact_report_data()),
            Err(AttestationError::Policy(Detail::with(
                &SnpRefusal::MinimumReportedTcb,
                format!("reported TCB below the minimum: {want}")
            )))
        );
        let checks = v.verify_report_detailed(&f.evidence(), &f.exact_report_data());
        assert_eq!(
            outcome(&checks, check::MIN_LAUNCH_TCB),
            &CheckOutcome::Failed(AttestationError::Policy(Detail::with(
                &SnpRefusal::MinimumLaunchTcb,
                format!("launch TCB below the minimum: {want}")
            )))
        );
    }
    // Exactly at the minimum passes.
    let mut policy = f.policy();
    policy.minimum_tcb = Some(MinimumTcb {
        bootloader: 3,
        tee: 0,
        snp: 8,
        microcode: 115,
        fmc: 0,
    });
    verify(&f, &f.evidence(), policy, TrustRoots::builtin()).unwrap();
    // The VLEK report's launch TCB (microcode 219) is above its reported TCB (217).
    let f = vlek();
    let mut policy = f.policy();
    policy.minimum_tcb = Some(MinimumTcb {
        microcode: 218,
        ..MinimumTcb::default()
    });
    let checks = validator(policy, roots_with_milan_asvk())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert_eq!(
        outcome(&checks, check::MIN_REPORTED_TCB),
        &CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::MinimumReportedTcb,
            "reported TCB below the minimum: microcode 217 < 218"
        )))
    );
    assert!(matches!(
        outcome(&checks, check::MIN_LAUNCH_TCB),
        CheckOutcome::Passed(_)
    ));
}

#[test]
fn measurement_not_in_the_policy_is_refused() {
    let f = trustee();
    let actual = hex::encode(f.parsed().measurement());
    let other = "ab".repeat(48);
    let text = format!(r#"{{"measurement": {{"expected": "{other}"}}}}"#);
    let policy = SnpPolicy::from_json(&text).unwrap();
    assert_eq!(
        verify(&f, &f.evidence(), policy, TrustRoots::builtin()),
        Err(AttestationError::Measurement {
            index: 0,
            expected: other.clone(),
            actual: actual.clone(),
            event: None,
        })
    );
    // warnOnly: allowed, and the check says so. (A policy that pins no image
    // this way must say so: insecureAnyImage.)
    let text = format!(
        r#"{{"measurement": {{"expected": "{other}", "warnOnly": true}}, "insecureAnyImage": true}}"#
    );
    let v = validator(SnpPolicy::from_json(&text).unwrap(), TrustRoots::builtin());
    v.verify(&f.evidence(), &f.exact_report_data()).unwrap();
    let checks = v.verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert!(
        matches!(outcome(&checks, check::MEASUREMENT), CheckOutcome::Passed(m) if m.starts_with("warning:"))
    );
    // No expected measurement at all: the validator fails closed.
    let policy = SnpPolicy {
        measurement: MeasurementPolicy::default(),
        ..f.policy()
    };
    assert!(matches!(
        verify(&f, &f.evidence(), policy, TrustRoots::builtin()),
        Err(AttestationError::Policy(d)) if d.is(&AttestRefusal::CheckNotPerformed)
            && d.text().starts_with("check \"measurement\" was not performed")
    ));
}

#[test]
fn vmpl_mismatch_is_refused() {
    let f = trustee();
    let mut policy = f.policy();
    policy.vmpl = 1;
    assert_eq!(
        verify(&f, &f.evidence(), policy, TrustRoots::builtin()),
        Err(AttestationError::Policy(Detail::with(
            &SnpRefusal::Vmpl,
            "report VMPL 0, policy requires 1"
        )))
    );
    let f = vlek();
    let mut policy = f.policy();
    policy.vmpl = 0;
    assert_eq!(
        verify(&f, &f.evidence(), policy, roots_with_milan_asvk()),
        Err(AttestationError::Policy(Detail::with(
            &SnpRefusal::Vmpl,
            "report VMPL 1, policy requires 0"
        )))
    );
}

#[test]
fn debug_bit_host_data_and_id_key_are_checked() {
    // A report whose DEBUG bit is set fails the debug check (and, being a
    // changed byte, the signature); allowDebug lifts only the former.
    let f = trustee();
    let mut bad = f.report.clone();
    bad[offset::POLICY + 2] |= 0x08; // bit 19
    let ev = f.evidence_of(&bad);
    let checks = validator(f.policy(), TrustRoots::builtin())
        .verify_report_detailed(&ev, &f.exact_report_data());
    assert!(
        matches!(outcome(&checks, check::DEBUG), CheckOutcome::Failed(AttestationError::Policy(d))
            if d.is(&SnpRefusal::Debug) && d.text().contains("allows debugging"))
    );
    assert!(matches!(
        outcome(&checks, check::SIGNATURE),
        CheckOutcome::Failed(_)
    ));
    let mut policy = f.policy();
    policy.allow_debug = true;
    let checks = validator(policy, TrustRoots::builtin())
        .verify_report_detailed(&ev, &f.exact_report_data());
    assert!(matches!(
        outcome(&checks, check::DEBUG),
        CheckOutcome::Passed(_)
    ));

    // HOST_DATA must equal the policy's when it names one.
    let mut policy = f.policy();
    policy.host_data = Some([0x11; 32]);
    assert_eq!(
        verify(&f, &f.evidence(), policy.clone(), TrustRoots::builtin()),
        Err(AttestationError::Policy(Detail::with(
            &SnpRefusal::HostData,
            format!(
                "host data {}, policy requires {}",
                "00".repeat(32),
                "11".repeat(32)
            )
        )))
    );
    policy.host_data = Some([0; 32]);
    verify(&f, &f.evidence(), policy, TrustRoots::builtin()).unwrap();

    // ID_KEY_DIGEST must be one of the policy's when it names some.
    let digest: [u8; 48] = f.parsed().id_key_digest().try_into().unwrap();
    let mut policy = f.policy();
    policy.id_key_digests = vec![[0x22; 48]];
    assert_eq!(
        verify(&f, &f.evidence(), policy.clone(), TrustRoots::builtin()),
        Err(AttestationError::Policy(Detail::with(
            &SnpRefusal::IdKey,
            format!(
                "ID key digest {} is not one the policy accepts",
                hex::encode(&digest)
            )
        )))
    );
    policy.id_key_digests.push(digest);
    verify(&f, &f.evidence(), policy, TrustRoots::builtin()).unwrap();
}

/// `allowedChipIds` pins the machines: each real report is admitted when
/// its chip id is listed and refused, with the check named, when it is not;
/// the VLEK report, whose chip id is masked, is refused while the policy
/// pins chips (it names no machine) and admitted when it pins none.
#[test]
fn only_the_chips_a_policy_allows_are_admitted() {
    let chip_of = |f: &Fixture| -> [u8; 64] { f.parsed().chip_id().try_into().unwrap() };
    let (milan_chip, trustee_chip) = (chip_of(&milan()), chip_of(&trustee()));
    assert_ne!(milan_chip, trustee_chip, "two machines");
    let pinned = |f: &Fixture, allowed: Vec<[u8; 64]>| SnpPolicy {
        allowed_chip_ids: Some(allowed),
        ..f.policy()
    };
    for (f, own, other) in [
        (milan(), milan_chip, trustee_chip),
        (trustee(), trustee_chip, milan_chip),
    ] {
        // Listed (alone, or among others): admitted, one check more.
        for allowed in [vec![own], vec![other, own]] {
            let v = validator(pinned(&f, allowed.clone()), TrustRoots::builtin());
            let checks = v.verify_report_detailed(&f.evidence(), &f.exact_report_data());
            assert_eq!(checks.len(), 22);
            assert_eq!(
                outcome(&checks, check::ALLOWED_CHIP),
                &CheckOutcome::Passed(format!(
                    "{}… is listed ({} allowed)",
                    hex::encode(&own[..8]),
                    allowed.len()
                ))
            );
            v.verify(&f.evidence(), &f.exact_report_data()).unwrap();
        }
        // Not listed: refused, with the chip named.
        let v = validator(pinned(&f, vec![other]), TrustRoots::builtin());
        let why = AttestationError::Policy(Detail::with(
            &SnpRefusal::AllowedChip,
            format!("chip id not allowed: {}…", hex::encode(&own[..8])),
        ));
        assert_eq!(
            v.verify(&f.evidence(), &f.exact_report_data()),
            Err(why.clone())
        );
        let checks = v.verify_report_detailed(&f.evidence(), &f.exact_report_data());
        let failed: Vec<&CheckResult> = checks
            .iter()
            .filter(|c| matches!(c.outcome, CheckOutcome::Failed(_)))
            .collect();
        assert_eq!(failed.len(), 1, "{checks:?}");
        assert_eq!(
            failed[0].to_string(),
            format!(
                "✗ allowed chip: policy violated: chip id not allowed: {}…",
                hex::encode(&own[..8])
            )
        );
    }
    // The masked VLEK report: refused while chips are pinned, whatever the list.
    let f = vlek();
    assert!(f.parsed().chip_id_masked());
    let v = validator(
        pinned(&f, vec![milan_chip, trustee_chip]),
        roots_with_milan_asvk(),
    );
    match v.verify(&f.evidence(), &f.exact_report_data()) {
        Err(AttestationError::Policy(d)) => assert!(
            d.is(&SnpRefusal::AllowedChip) && d.text().starts_with("chip id not allowed: masked"),
            "{d}"
        ),
        other => panic!("{other:?}"),
    }
    // A policy without the key: any chip, and no line about it.
    let checks = validator(f.policy(), roots_with_milan_asvk())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert!(checks.iter().all(|c| c.name != check::ALLOWED_CHIP));
    assert_eq!(first_failure(&checks), None);
}

#[test]
fn chip_id_must_match_the_vcek() {
    // The Milan report with trustee's VCEK: another chip (and another key).
    let mut f = milan();
    f.vek = testdata("test-vcek.der");
    let checks = validator(f.policy(), TrustRoots::builtin())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert!(matches!(
        outcome(&checks, check::CHAIN),
        CheckOutcome::Passed(_)
    ));
    assert!(matches!(
        outcome(&checks, check::CHIP_ID),
        CheckOutcome::Failed(AttestationError::Trust(d))
            if d.is(&SnpRefusal::ChipId) && d.text().starts_with("the VCEK's hwID c38427a3")
    ));
    assert_eq!(
        first_failure(&checks),
        Some(AttestationError::Signature(Detail::with(
            &SnpRefusal::ReportSignature,
            "report signature does not verify with the endorsement key"
        )))
    );
}

#[test]
fn truncated_or_oversized_reports_are_refused() {
    let f = trustee();
    let v = validator(f.policy(), TrustRoots::builtin());
    for len in [0, 1, REPORT_LEN - 1, REPORT_LEN + 1, 2 * REPORT_LEN] {
        let mut report = f.report.clone();
        report.resize(len, 0);
        let msg = confboot_proto::snp::Evidence {
            report,
            certificates: vec![confboot_proto::snp::Certificate {
                kind: confboot_proto::snp::CertificateKind::Vcek as i32,
                der: f.vek.clone(),
            }],
        };
        use confboot_proto::Message;
        assert_eq!(
            v.validate(&msg.encode_to_vec(), &[0; 32]),
            Err(AttestationError::Decode(Detail::with(
                &SnpRefusal::Evidence,
                format!("SNP report has {len} bytes, want exactly {REPORT_LEN}")
            ))),
        );
    }
}

#[test]
fn vcek_comes_from_the_cache_when_the_evidence_has_none() {
    let f = trustee();
    let ev = SnpEvidence {
        report: f.parsed(),
        certificates: vec![],
    };
    let v = validator(f.policy(), TrustRoots::builtin());
    assert_eq!(
        v.verify(&ev, &f.exact_report_data()),
        Err(AttestationError::Trust(Detail::with(
            &SnpRefusal::NoVek,
            "the evidence carries no VCEK or VLEK and no VCEK cache is configured"
        )))
    );
    let dir = std::env::temp_dir().join(format!("confboot-snp-cache-{}", std::process::id()));
    let mut policy = f.policy();
    policy.vcek_cache_dir = Some(dir.clone());
    let path = vcek_cache_path(&dir, &f.parsed());
    let v = validator(policy, TrustRoots::builtin());
    assert!(matches!(
        v.verify(&ev, &f.exact_report_data()),
        Err(AttestationError::Trust(d)) if d.is(&SnpRefusal::NoVek) && d.text().contains("none is cached at")
    ));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &f.vek).unwrap();
    let result = v.verify(&ev, &f.exact_report_data());
    std::fs::remove_dir_all(&dir).unwrap();
    result.unwrap();
    assert!(path.ends_with(format!(
        "{}/{}.der",
        hex::encode(f.parsed().chip_id()),
        "0300000000000873"
    )));
}

#[test]
fn policy_file_roots_replace_the_builtin_ones() {
    let f = vlek();
    let dir = format!("{}/testdata", env!("CARGO_MANIFEST_DIR"));
    let text = format!(
        r#"{{"measurement": {{"expected": "{}"}}, "vmpl": 1,
            "minimumTcb": {{"bootloader": 4, "snp": 24, "microcode": 217}},
            "rootBundles": ["milan_ask_ark_asvk.pem"], "signingKeys": ["VLEK"]}}"#,
        hex::encode(f.parsed().measurement())
    );
    let policy = SnpPolicy::from_json_at(&text, Some(std::path::Path::new(&dir))).unwrap();
    let v = SnpValidator::new(policy).unwrap().as_of(FIXTURES_VALID_AT);
    assert_eq!(v.roots().roots().len(), 1);
    v.verify(&f.evidence(), &f.exact_report_data()).unwrap();
}

/// What the device was asked: report data and VMPL.
type Request = ([u8; 64], u32);

/// A device that replays a real report and records what it was asked.
struct ReplayDevice {
    report: Vec<u8>,
    certs: Vec<CertEntry>,
    asked: Arc<Mutex<Vec<Request>>>,
}

impl SnpReportSource for ReplayDevice {
    fn report(&self, report_data: [u8; 64], vmpl: u32) -> Result<RawReport, AttestationError> {
        self.asked.lock().unwrap().push((report_data, vmpl));
        Ok(RawReport {
            report: self.report.clone(),
            cert_table: cert_table::encode(&self.certs),
        })
    }
}

#[test]
fn issuer_pads_extra_data_and_carries_the_certificate_table() {
    let f = trustee();
    let extra: [u8; 32] = f.parsed().report_data()[..32].try_into().unwrap();
    let device = ReplayDevice {
        report: f.report.clone(),
        certs: vec![CertEntry {
            kind: CertKind::Vcek,
            der: f.vek.clone(),
        }],
        asked: Arc::new(Mutex::new(Vec::new())),
    };
    let asked = Arc::clone(&device.asked);
    let issuer = SnpIssuer::new(device, 0);
    assert_eq!(issuer.variant(), Variant::SevSnp);
    let evidence = issuer.issue(&extra).unwrap();
    let decoded = SnpEvidence::decode(&evidence).unwrap();
    assert_eq!(decoded.report.as_bytes()[..], f.report[..]);
    assert_eq!(decoded.certificate(CertKind::Vcek), Some(f.vek.as_slice()));
    let v = validator(f.policy(), TrustRoots::builtin());
    v.validate(&evidence, &extra).unwrap();

    // A device answering for other report data is caught at the source.
    let mut other = extra;
    other[0] ^= 1;
    assert_eq!(
        issuer.issue(&other),
        Err(AttestationError::Issue(Detail::with(
            &SnpRefusal::DeviceReportData,
            "the SNP device returned a report for other report data"
        )))
    );
    let mut padded = [0u8; 64];
    padded[..32].copy_from_slice(&other);
    assert_eq!(asked.lock().unwrap().last(), Some(&(padded, 0)));
    assert_eq!(asked.lock().unwrap().len(), 2);
}

/// Fields that only a forged report could get wrong: each fails its own
/// check (besides the signature), so an operator sees what is off.
#[test]
fn tampered_fields_fail_their_own_checks_too() {
    let detailed = |f: &Fixture, report: &[u8], roots: TrustRoots| {
        validator(f.policy(), roots)
            .verify_report_detailed(&f.evidence_of(report), &f.exact_report_data())
    };
    let f = trustee();
    for version in [0u32, 1, 6, 0xffff_ffff] {
        let mut bad = f.report.clone();
        bad[offset::VERSION..offset::VERSION + 4].copy_from_slice(&version.to_le_bytes());
        let checks = detailed(&f, &bad, TrustRoots::builtin());
        assert_eq!(
            outcome(&checks, check::VERSION),
            &CheckOutcome::Failed(AttestationError::Decode(Detail::with(
                &SnpRefusal::Version,
                format!("unsupported SNP report version {version} (2 to 5 are read)")
            )))
        );
    }
    // KEY_INFO says VLEK, the certificate is a VCEK.
    let mut bad = f.report.clone();
    bad[offset::KEY_INFO] = 1 << 2;
    let checks = detailed(&f, &bad, TrustRoots::builtin());
    assert_eq!(
        outcome(&checks, check::SIGNING_KEY),
        &CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &SnpRefusal::SigningKey,
            "the report says it was signed by VLEK, the certificate is a VCEK"
        )))
    );
    // The VLEK report's CPUID (version 3) naming another product, or none.
    let f = vlek();
    let mut bad = f.report.clone();
    bad[offset::CPUID_MOD_ID] = 0x11;
    let checks = detailed(&f, &bad, roots_with_milan_asvk());
    assert_eq!(
        outcome(&checks, check::PRODUCT),
        &CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &SnpRefusal::Product,
            "the report's CPUID names Genoa, the certificate chain Milan"
        )))
    );
    let mut bad = f.report.clone();
    bad[offset::CPUID_FAM_ID] = 0x17;
    let checks = detailed(&f, &bad, roots_with_milan_asvk());
    assert_eq!(
        outcome(&checks, check::PRODUCT),
        &CheckOutcome::Failed(AttestationError::Decode(Detail::with(
            &SnpRefusal::Product,
            "the report's CPUID family 0x17 model 0x01 is not a known SEV-SNP product"
        )))
    );
    // An ASK presented as the endorsement key.
    let mut f = trustee();
    f.vek = x509_parser::pem::Pem::iter_from_buffer(&testdata("cert_chain_milan"))
        .next()
        .unwrap()
        .unwrap()
        .contents;
    let err = validator(f.policy(), TrustRoots::builtin())
        .verify(&f.evidence(), &f.exact_report_data())
        .unwrap_err();
    assert_eq!(
        err,
        AttestationError::Trust(Detail::with(
            &SnpRefusal::VekRole,
            "the evidence's endorsement key is an ASK (\"SEV-Milan\")"
        ))
    );
}

#[test]
fn turin_vcek_chains_to_the_builtin_turin_root_and_its_extensions_read() {
    let der = testdata("vcek_turin.der");
    let vcek = AmdCert::from_der(&der).unwrap();
    assert_eq!(vcek.role(), CertRole::Vcek);
    let chain = TrustRoots::builtin().verify_vek(&vcek, &[]).unwrap();
    assert_eq!(chain.product, Product::Turin);
    let info = VekInfo::from_der(&der).unwrap();
    assert_eq!(info.hw_id.as_ref().map(|h| h.len()), Some(8));
    assert_eq!(info.product, Some(Product::Turin));
    assert_eq!(
        (
            info.fmc,
            info.bootloader,
            info.tee,
            info.snp,
            info.microcode
        ),
        (Some(0), Some(0), Some(0), Some(0), Some(9))
    );
    // The Turin TCB layout puts FMC first; its extensions compare per component.
    let tcb = TcbVersion::decode([0, 0, 0, 0, 0, 0, 0, 9], Product::Turin);
    assert!(info.tcb_mismatches(&tcb).is_empty());
    let newer = TcbVersion::decode([1, 0, 0, 0, 0, 0, 0, 9], Product::Turin);
    assert_eq!(
        info.tcb_mismatches(&newer),
        vec!["fmc: certificate 0, report 1"]
    );
    // The Turin ASK/ARK file pins the same root.
    let roots = TrustRoots::new(vec![bundle("cert_chain_turin")]);
    assert_eq!(
        roots.verify_vek(&vcek, &[]).unwrap().product,
        Product::Turin
    );
    // A Turin chip id: the 8-byte hwID, then zeros. A report carrying it
    // (forged here, so only the chip id check can pass) matches the VCEK.
    let f = Fixture {
        report: {
            let mut r = testdata("test-report.bin");
            r[offset::CHIP_ID..offset::CHIP_ID + 64].fill(0);
            r[offset::CHIP_ID..offset::CHIP_ID + 8].copy_from_slice(info.hw_id.as_ref().unwrap());
            r
        },
        vek_kind: CertKind::Vcek,
        vek: der.clone(),
        vmpl: 0,
    };
    let checks = validator(f.policy(), TrustRoots::builtin())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert!(
        matches!(outcome(&checks, check::CHIP_ID), CheckOutcome::Passed(m) if m.contains("matches the VCEK's hwID"))
    );
    assert!(matches!(
        outcome(&checks, check::SIGNATURE),
        CheckOutcome::Failed(_)
    ));
}

/// The `sev` crate cannot parse a version-2 report whose chip id the host
/// masked (`MaskedChipId`); confboot's own reader can, and compares no hwID
/// then. (Such a report is forged here, so its signature fails.)
#[test]
fn masked_chip_id_in_a_version_2_report_is_read() {
    use sev::parser::ByteParser;
    let f = trustee();
    let mut masked = f.report.clone();
    masked[offset::CHIP_ID..offset::CHIP_ID + 64].fill(0);
    let sev_parse = sev::firmware::guest::AttestationReport::from_bytes(&masked);
    assert_eq!(
        format!("{:?}", sev_parse.unwrap_err()),
        "Custom { kind: Other, error: MaskedChipId }"
    );
    let report = SnpReport::from_bytes(&masked).unwrap();
    assert_eq!((report.version(), report.chip_id_masked()), (2, true));
    let checks = validator(f.policy(), TrustRoots::builtin())
        .verify_report_detailed(&f.evidence_of(&masked), &f.exact_report_data());
    assert_eq!(
        outcome(&checks, check::CHIP_ID),
        &CheckOutcome::Passed("masked by the host (all zero); not compared".into())
    );
    assert!(matches!(
        outcome(&checks, check::SIGNATURE),
        CheckOutcome::Failed(_)
    ));
}

#[test]
fn certificates_are_used_only_inside_their_validity_window() {
    let f = vlek();
    // The VLEK's notBefore and notAfter (the ASVK's and ARK's are wider).
    let (from, until) = (1_733_868_861, 1_765_404_861);
    let checked_at = |at: i64| {
        let v = SnpValidator::with_roots(f.policy(), roots_with_milan_asvk()).as_of(at);
        let checks = v.verify_report_detailed(&f.evidence(), &f.exact_report_data());
        let others_pass = checks
            .iter()
            .filter(|c| c.name != check::VALIDITY)
            .all(|c| matches!(c.outcome, CheckOutcome::Passed(_)));
        assert!(others_pass, "only validity depends on the time");
        (
            outcome(&checks, check::VALIDITY).clone(),
            v.verify(&f.evidence(), &f.exact_report_data()),
        )
    };
    for at in [FIXTURES_VALID_AT, from, until] {
        let (o, verdict) = checked_at(at);
        assert!(matches!(o, CheckOutcome::Passed(_)), "{at}: {o:?}");
        assert!(verdict.is_ok());
    }
    // The VLEK expired on 2025-12-10; it is refused after, and before it was issued.
    for at in [until + 1, crate_time("2026-11-22"), from - 1] {
        let (o, verdict) = checked_at(at);
        assert!(
            matches!(&o, CheckOutcome::Failed(e @ AttestationError::Trust(_)) if e.is(&SnpRefusal::Validity)),
            "{at}: {o:?}"
        );
        assert!(
            matches!(&verdict, Err(e @ AttestationError::Trust(_)) if e.is(&SnpRefusal::Validity))
        );
    }
    // And at the current time, as a validator without `as_of` checks it.
    let now = SnpValidator::with_roots(f.policy(), roots_with_milan_asvk());
    assert!(now.verify(&f.evidence(), &f.exact_report_data()).is_err());
}

fn crate_time(date: &str) -> i64 {
    confboot_util::time::parse_instant(date).unwrap()
}

#[test]
fn smt_migration_agent_and_minimum_abi_are_checked_against_the_policy() {
    let f = trustee();
    let report = f.parsed();
    let detailed = |policy: confboot_snp::SnpPolicy, bytes: &[u8]| {
        validator(policy, TrustRoots::builtin())
            .verify_report_detailed(&f.evidence_of(bytes), &f.exact_report_data())
    };
    // SMT: the guest lets the host run it; a policy that wants it off says no.
    let mut no_smt = f.policy();
    no_smt.allow_smt = false;
    let mut smt_off = f.report.clone();
    let policy_bits = u64::from_le_bytes(
        f.report[offset::POLICY..offset::POLICY + 8]
            .try_into()
            .unwrap(),
    );
    smt_off[offset::POLICY..offset::POLICY + 8]
        .copy_from_slice(&(policy_bits & !(1 << 16)).to_le_bytes());
    if report.smt_allowed() {
        assert!(matches!(
            outcome(&detailed(no_smt.clone(), &f.report), check::SMT),
            CheckOutcome::Failed(AttestationError::Policy(d))
                if d.is(&SnpRefusal::Smt) && d.text().contains("allows SMT")
        ));
    }
    assert!(matches!(
        outcome(&detailed(no_smt, &smt_off), check::SMT),
        CheckOutcome::Passed(_)
    ));
    // A migration agent is refused unless the policy accepts one.
    let mut with_ma = f.report.clone();
    with_ma[offset::POLICY..offset::POLICY + 8]
        .copy_from_slice(&(policy_bits | (1 << 18)).to_le_bytes());
    assert!(matches!(
        outcome(&detailed(f.policy(), &with_ma), check::MIGRATION_AGENT),
        CheckOutcome::Failed(AttestationError::Policy(d))
            if d.is(&SnpRefusal::MigrationAgent) && d.text().contains("migration agent")
    ));
    let mut accepts_ma = f.policy();
    accepts_ma.allow_migration_agent = true;
    assert!(matches!(
        outcome(&detailed(accepts_ma, &with_ma), check::MIGRATION_AGENT),
        CheckOutcome::Passed(_)
    ));
    // The firmware's ABI against a minimum above it, and at it.
    let (major, minor) = report.firmware_abi();
    let mut above = f.policy();
    above.minimum_abi = (major.saturating_add(1), 0);
    assert!(matches!(
        outcome(&detailed(above, &f.report), check::MIN_ABI),
        CheckOutcome::Failed(AttestationError::Policy(d))
            if d.is(&SnpRefusal::MinimumAbi) && d.text().contains("below the minimum")
    ));
    let mut at = f.policy();
    at.minimum_abi = (major, minor);
    assert!(matches!(
        outcome(&detailed(at, &f.report), check::MIN_ABI),
        CheckOutcome::Passed(_)
    ));
    // And from a policy file.
    let text = format!(
        r#"{{"measurement": {{"expected": "{}", "warnOnly": false}},
            "allowSmt": false, "allowMigrationAgent": true, "minimumAbi": "1.51"}}"#,
        "ab".repeat(48)
    );
    let p = confboot_snp::SnpPolicy::from_json(&text).unwrap();
    assert!(!p.allow_smt && p.allow_migration_agent && p.minimum_abi == (1, 51));
    let defaults = confboot_snp::SnpPolicy::from_json(&text.replace(
        r#""allowSmt": false, "allowMigrationAgent": true, "minimumAbi": "1.51""#,
        r#""vmpl": 0"#,
    ))
    .unwrap();
    assert!(
        defaults.allow_smt && !defaults.allow_migration_agent && defaults.minimum_abi == (0, 0)
    );
    for bad in [r#""1""#, r#""1.x""#, r#""256.0""#, "151"] {
        let text = format!(r#"{{"minimumAbi": {bad}, "insecureAnyImage": true}}"#);
        assert!(confboot_snp::SnpPolicy::from_json(&text).is_err(), "{text}");
    }
}

#[test]
fn without_a_minimum_tcb_in_the_policy_the_milan_default_applies() {
    let f = trustee();
    let policy = f.policy();
    assert_eq!(policy.minimum_tcb, None);
    // The genuine report sits exactly at the default (3/0/8/115): passes.
    let checks = validator(policy.clone(), TrustRoots::builtin())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert!(matches!(
        outcome(&checks, check::MIN_REPORTED_TCB),
        CheckOutcome::Passed(_)
    ));
    // One microcode step below it fails the default (the signature fails
    // too: the check is read from the detailed outcome).
    let mut bad = f.report.clone();
    bad[offset::REPORTED_TCB + 7] = 114;
    let checks = validator(policy, TrustRoots::builtin())
        .verify_report_detailed(&f.evidence_of(&bad), &f.exact_report_data());
    match outcome(&checks, check::MIN_REPORTED_TCB) {
        CheckOutcome::Failed(AttestationError::Policy(d)) => assert!(
            d.is(&SnpRefusal::MinimumReportedTcb) && d.text().contains("microcode 114 < 115"),
            "{d}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_tcb_within_the_warning_margin_of_the_minimum_is_admitted_with_a_warning() {
    let f = trustee();
    let mut policy = f.policy();
    // The genuine report sits exactly at the Milan default (3/0/8/115).
    policy.tcb_warning_margin = 1;
    let checks = validator(policy.clone(), TrustRoots::builtin())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    for check in [check::MIN_REPORTED_TCB, check::MIN_LAUNCH_TCB] {
        match outcome(&checks, check) {
            CheckOutcome::Passed(text) => assert!(
                text.contains("warning") && text.contains("microcode 115 (minimum 115)"),
                "{check}: {text}"
            ),
            other => panic!("{check}: {other:?}"),
        }
    }
    // The validator's verdict carries the warnings (joinsvc counts them).
    let attested = validator(policy.clone(), TrustRoots::builtin())
        .verify(&f.evidence(), &f.exact_report_data())
        .unwrap();
    assert_eq!(attested.warnings.len(), 2, "{:?}", attested.warnings);
    assert!(
        attested
            .warnings
            .iter()
            .all(|w| w.contains("microcode 115 (minimum 115)")),
        "{:?}",
        attested.warnings
    );
    // Without a margin, no warning.
    policy.tcb_warning_margin = 0;
    let checks = validator(policy.clone(), TrustRoots::builtin())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    match outcome(&checks, check::MIN_REPORTED_TCB) {
        CheckOutcome::Passed(text) => assert!(!text.contains("warning"), "{text}"),
        other => panic!("{other:?}"),
    }
    let attested = validator(policy, TrustRoots::builtin())
        .verify(&f.evidence(), &f.exact_report_data())
        .unwrap();
    assert!(attested.warnings.is_empty(), "{:?}", attested.warnings);
}

/// The policy says which kind of endorsement key it trusts: a VLEK report
/// (AWS: chip id zero, VLEK → ASVK → ARK) is refused by a policy that
/// names only the VCEK (the default), and a VCEK report by one that names
/// only the VLEK, though each verifies.
#[test]
fn the_policy_names_the_signing_keys_it_accepts() {
    let f = vlek();
    let default_keys = SnpPolicy {
        signing_keys: SnpPolicy::default().signing_keys,
        ..f.policy()
    };
    assert_eq!(default_keys.signing_keys, [SigningKey::Vcek]);
    let checks = validator(default_keys.clone(), roots_with_milan_asvk())
        .verify_report_detailed(&f.evidence(), &f.exact_report_data());
    assert!(matches!(
        outcome(&checks, check::SIGNATURE),
        CheckOutcome::Passed(_)
    ));
    match outcome(&checks, check::ACCEPTED_SIGNING_KEY) {
        CheckOutcome::Failed(AttestationError::Policy(d)) => {
            assert!(d.is(&SnpRefusal::SigningKeyNotAccepted), "{d}");
            assert_eq!(
                d.text(),
                "the report is signed by a VLEK, the policy accepts VCEK"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(verify(&f, &f.evidence(), default_keys, roots_with_milan_asvk()).is_err());

    let m = trustee();
    let vlek_only = SnpPolicy {
        signing_keys: vec![SigningKey::Vlek],
        ..m.policy()
    };
    let checks = validator(vlek_only, TrustRoots::builtin())
        .verify_report_detailed(&m.evidence(), &m.exact_report_data());
    match outcome(&checks, check::ACCEPTED_SIGNING_KEY) {
        CheckOutcome::Failed(AttestationError::Policy(d)) => {
            assert!(d.is(&SnpRefusal::SigningKeyNotAccepted), "{d}")
        }
        other => panic!("{other:?}"),
    }
    let both = SnpPolicy {
        signing_keys: vec![SigningKey::Vcek, SigningKey::Vlek],
        ..f.policy()
    };
    verify(&f, &f.evidence(), both, roots_with_milan_asvk()).unwrap();
}

#[test]
fn signing_keys_are_read_strictly() {
    let m = hex::encode(vlek().parsed().measurement());
    let with = |keys: &str| {
        SnpPolicy::from_json(&format!(
            r#"{{"measurement": {{"expected": "{m}"}}, "signingKeys": {keys}}}"#
        ))
    };
    assert_eq!(
        with(r#"["VLEK"]"#).unwrap().signing_keys,
        [SigningKey::Vlek]
    );
    assert_eq!(
        with(r#"["VCEK", "VLEK"]"#).unwrap().signing_keys,
        [SigningKey::Vcek, SigningKey::Vlek]
    );
    for bad in [
        r#"[]"#,
        r#"["VLEK", "VLEK"]"#,
        r#"["ASK"]"#,
        r#""VLEK""#,
        r#"[1]"#,
    ] {
        assert!(with(bad).is_err(), "{bad}");
    }
    let default = SnpPolicy::from_json(&format!(r#"{{"measurement": {{"expected": "{m}"}}}}"#));
    assert_eq!(default.unwrap().signing_keys, [SigningKey::Vcek]);
}
