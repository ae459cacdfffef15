//! Property tests: decoding and verifying SEV-SNP evidence never panics,
//! whatever the bytes, and mutated real reports are refused unless only
//! their unsigned tail changed. The test-support crate's deterministic
//! xorshift generator drives them (fixed seeds: every run tests the same
//! inputs).

use confboot_attest::check::*;
use confboot_attest::{AttestationError, MeasurementPolicy, Validator};
use confboot_snp::*;
use confboot_testkit::XorShift;

fn testdata(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn validator_for(report: &[u8]) -> SnpValidator {
    let r = SnpReport::from_bytes(report).unwrap();
    let mut measurement = MeasurementPolicy::default();
    measurement.set(0, r.measurement().to_vec(), false);
    SnpValidator::with_roots(
        SnpPolicy {
            measurement,
            ..SnpPolicy::default()
        },
        TrustRoots::builtin(),
    )
}

fn evidence(report: &[u8], vcek: &[u8]) -> SnpEvidence {
    SnpEvidence {
        report: SnpReport::from_bytes(report).unwrap(),
        certificates: vec![CertEntry {
            kind: CertKind::Vcek,
            der: vcek.to_vec(),
        }],
    }
}

#[test]
fn random_bytes_never_panic_and_never_verify() {
    let mut rng = XorShift::new(0x5eed_0001);
    let report = testdata("test-report.bin");
    let v = validator_for(&report);
    for i in 0..5000 {
        let len = match i % 4 {
            0 => rng.below(64),
            1 => rng.below(4096),
            2 => REPORT_LEN + rng.below(200),
            _ => rng.below(MAX_EVIDENCE_LEN + 1024),
        };
        let bytes = rng.bytes(len);
        let extra: [u8; 32] = rng.bytes(32).try_into().unwrap();
        assert!(v.validate(&bytes, &extra).is_err(), "iteration {i}");
        let _ = SnpEvidence::decode(&bytes);
        let _ = AmdCert::from_der(&bytes);
        let _ = VekInfo::from_der(&bytes);
        let _ = ProductRoot::from_pem_bundle(&bytes);
        let _ = SnpPolicy::from_json(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn random_reports_with_a_real_vcek_never_panic_and_never_verify() {
    let mut rng = XorShift::new(0x5eed_0002);
    let vcek = testdata("test-vcek.der");
    let v = validator_for(&testdata("test-report.bin"));
    for i in 0..3000 {
        let mut report = rng.bytes(REPORT_LEN);
        // Make some look plausible, so later checks run too.
        if i % 2 == 0 {
            report[0..4].copy_from_slice(&(2 + (i as u32 % 4)).to_le_bytes());
            report[offset::SIGNATURE_ALGO..offset::SIGNATURE_ALGO + 4]
                .copy_from_slice(&1u32.to_le_bytes());
            report[offset::SIGNATURE + 48..offset::SIGNATURE + 72].fill(0);
            report[offset::SIGNATURE + 120..offset::SIGNATURE + 144].fill(0);
        }
        let ev = evidence(&report, &vcek);
        let checks = v.verify_report_detailed(&ev, &ReportDataCheck::NotChecked);
        assert_eq!(checks.len(), 21);
        assert!(first_failure(&checks).is_some(), "iteration {i}");
        let bytes = ev.encode().unwrap();
        assert!(v.validate(&bytes, &[0; 32]).is_err());
    }
}

#[test]
fn mutated_real_reports_are_refused_unless_only_the_unsigned_tail_changed() {
    let mut rng = XorShift::new(0x5eed_0003);
    let signed_with_signature = offset::SIGNATURE + 144;
    for (report_name, vcek_name) in [
        ("test-report.bin", "test-vcek.der"),
        ("report_milan.bin", "vcek_milan.der"),
    ] {
        let report = testdata(report_name);
        let vcek = testdata(vcek_name);
        let v = validator_for(&report);
        let want = ReportDataCheck::Exact(
            SnpReport::from_bytes(&report)
                .unwrap()
                .report_data()
                .try_into()
                .unwrap(),
        );
        v.verify(&evidence(&report, &vcek), &want).unwrap();
        let mut tail_only = 0;
        for i in 0..1500 {
            let mut bad = report.clone();
            let n = 1 + rng.below(4);
            let (mut touched_signed, mut touched_report_data) = (false, false);
            for _ in 0..n {
                // Half the mutations land in the unsigned tail.
                let pos = if i % 2 == 0 {
                    rng.below(REPORT_LEN)
                } else {
                    signed_with_signature + rng.below(REPORT_LEN - signed_with_signature)
                };
                bad[pos] ^= rng.flip();
                touched_signed |= pos < signed_with_signature;
                touched_report_data |=
                    (offset::REPORT_DATA..offset::REPORT_DATA + 64).contains(&pos);
            }
            let result = v.verify(&evidence(&bad, &vcek), &want);
            if touched_report_data {
                // Not this handshake's: refused before the signature.
                assert!(
                    matches!(&result, Err(e @ AttestationError::Binding(_)) if e.is(&SnpRefusal::ReportData)),
                    "{report_name} iteration {i}: {result:?}"
                );
            } else if touched_signed {
                assert!(
                    matches!(&result, Err(e @ AttestationError::Signature(_)) if e.is(&SnpRefusal::ReportSignature)),
                    "{report_name} iteration {i}: {result:?}"
                );
            } else {
                result.unwrap();
                tail_only += 1;
            }
        }
        assert!(tail_only > 500);
    }
}

#[test]
fn mutated_certificates_never_panic() {
    let mut rng = XorShift::new(0x5eed_0004);
    let report = testdata("test-report.bin");
    let vcek = testdata("test-vcek.der");
    let v = validator_for(&report);
    let want = ReportDataCheck::Exact(
        SnpReport::from_bytes(&report)
            .unwrap()
            .report_data()
            .try_into()
            .unwrap(),
    );
    for _ in 0..300 {
        let mut bad = vcek.clone();
        for _ in 0..1 + rng.below(3) {
            let pos = rng.below(bad.len());
            bad[pos] ^= rng.flip();
        }
        // Truncate or extend now and then.
        match rng.below(8) {
            0 => {
                let n = rng.below(bad.len());
                bad.truncate(n);
            }
            1 => {
                let n = rng.below(64);
                bad.extend(rng.bytes(n));
            }
            _ => {}
        }
        let _ = AmdCert::from_der(&bad);
        let _ = VekInfo::from_der(&bad);
        let checks = v.verify_report_detailed(&evidence(&report, &bad), &want);
        assert_eq!(checks.len(), 21);
    }
}
