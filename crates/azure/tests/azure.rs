//! The recorded Azure samples (`testdata/`, byte for byte as captured, see
//! each folder's `PROVENANCE.md`) give the verdicts their provenance
//! states, and each is refused, by the check named, when a signed byte
//! changes, a key or chain is another's, or the nonce is another session's.

use std::path::PathBuf;

use confboot_attest::check::{CheckOutcome, CheckResult};
use confboot_attest::measurements::MeasurementPolicy;
use confboot_attest::{AttestRefusal, AttestationError};
use confboot_azure::{
    AzureEvidence, AzureRefusal, AzureValidator, Hardware, Nonce, TpmQuote, check,
    read_evidence_json,
};
use confboot_snp::{ProductRoot, SnpPolicy, SnpRefusal, SnpValidator, TrustRoots};
use confboot_tdx::{TdxPolicy, TdxRefusal, TdxRoots, TdxValidator};
use confboot_util::hex;

/// 2026-12-01T00:00:00Z: every certificate of the samples is valid then.
const AT: i64 = 1_796_083_200;

fn testdata(path: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn amd_roots(bundles: &[&str]) -> TrustRoots {
    TrustRoots::new(
        bundles
            .iter()
            .map(|b| ProductRoot::from_pem_bundle(&testdata(b)).unwrap())
            .collect(),
    )
}

fn both_amd_roots() -> TrustRoots {
    amd_roots(&[
        "azure-snp/milan_ask_ark_asvk.pem",
        "azure-snp/genoa_ask_ark_asvk.pem",
    ])
}

/// A recorded SEV-SNP sample, its nonce, launch measurement and PCR 0 as
/// the provenance states them.
struct Sample {
    name: &'static str,
    evidence: AzureEvidence,
    nonce: Vec<u8>,
    measurement: &'static str,
    pcr0: &'static str,
}

fn hcl_report_sample(quote: TpmQuote) -> AzureEvidence {
    AzureEvidence {
        hcl_report: testdata("azure-snp/hcl-report.bin"),
        tpm_quote: quote,
        vcek_chain: confboot_snp::certificates_from_pem_or_der(&testdata("azure-snp/vcek.pem"))
            .unwrap(),
        td_quote: None,
    }
}

const HCL_MEASUREMENT: &str = "9ac48fcac8a2d88aeeff8d427ad4f2be0e3917c748a18bdf52cc317e7fe20308b459d5ef1a12e0c22944eb386d17c315";
const V0_MEASUREMENT: &str = "6a063be9dd79f6371c842e480f8dc3b5c725961344e57130e88c5adf49e8f7f6c79b75a5eb77fc769959f4aeb2f9401e";

fn snp_samples() -> Vec<Sample> {
    let hcl_pcr0 = "f3a7e99a5f819a03";
    vec![
        Sample {
            name: "hcl-report.bin + tpm-quote-v1.json",
            evidence: hcl_report_sample(
                TpmQuote::from_json(&testdata("azure-snp/tpm-quote-v1.json")).unwrap(),
            ),
            nonce: b"challenge".to_vec(),
            measurement: HCL_MEASUREMENT,
            pcr0: hcl_pcr0,
        },
        Sample {
            name: "hcl-report.bin + quote.bin",
            evidence: hcl_report_sample(
                TpmQuote::from_length_prefixed(&testdata("azure-snp/quote.bin")).unwrap(),
            ),
            nonce: b"challenge".to_vec(),
            measurement: HCL_MEASUREMENT,
            pcr0: hcl_pcr0,
        },
        Sample {
            name: "evidence-v0.json",
            evidence: read_evidence_json(&testdata("azure-snp/evidence-v0.json")).unwrap(),
            nonce: b"challenge".to_vec(),
            measurement: V0_MEASUREMENT,
            pcr0: "e15c44796beabf46abcec7c57e590942041e47497e4ec27571c8b7664f48dced",
        },
        Sample {
            name: "evidence-v1.json",
            evidence: read_evidence_json(&testdata("azure-snp/evidence-v1.json")).unwrap(),
            nonce: b"challenge".to_vec(),
            measurement: V0_MEASUREMENT,
            pcr0: "e15c44796beabf46abcec7c57e590942041e47497e4ec27571c8b7664f48dced",
        },
        Sample {
            name: "evidence-v2.json",
            evidence: read_evidence_json(&testdata("azure-snp/evidence-v2.json")).unwrap(),
            nonce: hex::decode("982f5c6e45df0ed3f10b6f60b02f0c8390e281300f3805e2279c16168cd6ae9aa398f647caa2338748cd0fd9f5f819ef").unwrap(),
            measurement: "5b0ce64ad1c1f6375dbda5f760b98526ca1bcf91b8195091afc28e7b024251d68fe32e05af34048d6607678cd23283ff",
            pcr0: "84275b2f4312cd4fc6cbe6b152ad3c3683e513d9f1e23c34fca160c8cca7a6a7",
        },
        Sample {
            name: "evidence-genoa.json",
            evidence: read_evidence_json(&testdata("azure-snp/evidence-genoa.json")).unwrap(),
            nonce: hex::decode("0218488bae25d2509232bf676f1a66a30d7372add909109b36016ef136f2938ca05475f8b46094de6b64270ea35d950f").unwrap(),
            measurement: "f57dc09a507c6ecd82369bffb600f0003792f4d99bc26e985ec0c266fc34faf3706faf814c9e61065768a6ff917c89ae",
            pcr0: "afd689d0bb1c5f36f023fbaf574135f555a28a10c1f6b938d2a25e70c7783338",
        },
    ]
}

/// PCRs 4 and 9 (the boot chain; the initrd and command line) as the
/// sample's quote holds them.
fn image_pcrs(evidence: &AzureEvidence) -> MeasurementPolicy {
    let mut p = MeasurementPolicy::default();
    for i in [4, 9] {
        p.set(i, evidence.tpm_quote.pcrs[i as usize].to_vec(), false);
    }
    p
}

fn snp_validator(sample: &Sample, roots: TrustRoots) -> AzureValidator {
    let mut policy = SnpPolicy::default();
    policy
        .measurement
        .set(0, hex::decode(sample.measurement).unwrap(), false);
    let hardware = Hardware::SevSnp(Box::new(SnpValidator::with_roots(policy, roots).as_of(AT)));
    AzureValidator::new(hardware, image_pcrs(&sample.evidence))
}

fn outcome<'a>(checks: &'a [CheckResult], name: &str) -> &'a CheckOutcome {
    &checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {checks:#?}"))
        .outcome
}

fn failed(checks: &[CheckResult], name: &str) -> AttestationError {
    match outcome(checks, name) {
        CheckOutcome::Failed(e) => e.clone(),
        other => panic!("check {name:?} did not fail: {other:?}"),
    }
}

fn detail(e: &AttestationError) -> &confboot_attest::Detail {
    match e {
        AttestationError::Decode(d)
        | AttestationError::Signature(d)
        | AttestationError::Binding(d)
        | AttestationError::Trust(d)
        | AttestationError::Policy(d)
        | AttestationError::EventLog(d)
        | AttestationError::Issue(d) => d,
        other => panic!("no detail in {other:?}"),
    }
}

fn assert_refused_by(
    checks: &[CheckResult],
    name: &str,
    reason: &(impl confboot_attest::Reason + std::fmt::Debug),
) {
    let e = failed(checks, name);
    assert!(
        detail(&e).is(reason),
        "check {name:?} refused with {e} , want {reason:?}"
    );
}

#[test]
fn every_recorded_snp_sample_is_admitted() {
    for s in snp_samples() {
        assert_eq!(
            hex::encode(&s.evidence.tpm_quote.pcrs[0])[..s.pcr0.len()],
            *s.pcr0,
            "{}",
            s.name
        );
        for roots in [both_amd_roots(), TrustRoots::builtin()] {
            let v = snp_validator(&s, roots);
            let checks = v.verify_detailed(&s.evidence, &Nonce::Expected(s.nonce.clone()));
            for c in &checks {
                assert!(
                    matches!(c.outcome, CheckOutcome::Passed(_)),
                    "{}: {c}",
                    s.name
                );
            }
            v.verify(&s.evidence, &Nonce::Expected(s.nonce.clone()))
                .unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}

/// One byte changed in each signed part, of every sample.
#[test]
fn a_flipped_byte_is_refused_by_name() {
    for s in snp_samples() {
        let v = snp_validator(&s, both_amd_roots());
        let nonce = Nonce::Expected(s.nonce.clone());
        let run = |e: &AzureEvidence| v.verify_detailed(e, &nonce);

        // The SNP report's measurement: its signature no longer verifies.
        let mut e = s.evidence.clone();
        e.hcl_report[0x20 + 0x90] ^= 1;
        assert_refused_by(
            &run(&e),
            confboot_snp::check::SIGNATURE,
            &SnpRefusal::ReportSignature,
        );
        assert!(v.verify(&e, &nonce).is_err());

        // The SNP report's reported TCB (the byte the source's test zeroes).
        let mut e = s.evidence.clone();
        e.hcl_report[0x1a6] ^= 0x40;
        assert_refused_by(
            &run(&e),
            confboot_snp::check::SIGNATURE,
            &SnpRefusal::ReportSignature,
        );
        assert_refused_by(
            &run(&e),
            confboot_snp::check::REPORTED_TCB,
            &SnpRefusal::ReportedTcb,
        );

        // A byte of the runtime claims (inside HCLAkPub's modulus).
        let mut e = s.evidence.clone();
        let at = 0x4d4 + 200;
        e.hcl_report[at] = if e.hcl_report[at] == b'A' { b'B' } else { b'A' };
        let checks = run(&e);
        assert_refused_by(&checks, check::CLAIMS_BINDING, &AzureRefusal::ClaimsBinding);
        assert_refused_by(
            &checks,
            check::QUOTE_SIGNATURE,
            &AzureRefusal::QuoteSignature,
        );

        // A NUL in the claims: the key cannot be read.
        let mut e = s.evidence.clone();
        e.hcl_report[0x540] = 0;
        let checks = run(&e);
        assert_refused_by(
            &checks,
            check::ATTESTATION_KEY,
            &AzureRefusal::AttestationKey,
        );
        assert_refused_by(&checks, check::CLAIMS_BINDING, &AzureRefusal::ClaimsBinding);

        // The quote's message (its clock) and its signature.
        let mut e = s.evidence.clone();
        let last = e.tpm_quote.message.len() - 40;
        e.tpm_quote.message[last] ^= 1;
        assert_refused_by(
            &run(&e),
            check::QUOTE_SIGNATURE,
            &AzureRefusal::QuoteSignature,
        );
        let mut e = s.evidence.clone();
        e.tpm_quote.signature[0] ^= 1;
        assert_refused_by(
            &run(&e),
            check::QUOTE_SIGNATURE,
            &AzureRefusal::QuoteSignature,
        );

        // A PCR value: no longer the quoted digest.
        let mut e = s.evidence.clone();
        e.tpm_quote.pcrs[0][0] ^= 1;
        assert_refused_by(&run(&e), check::PCR_DIGEST, &AzureRefusal::PcrDigest);
        assert!(v.verify(&e, &nonce).is_err());
    }
}

#[test]
fn another_sessions_nonce_is_refused() {
    for s in snp_samples() {
        let v = snp_validator(&s, both_amd_roots());
        let mut other = s.nonce.clone();
        other.reverse();
        let checks = v.verify_detailed(&s.evidence, &Nonce::Expected(other.clone()));
        assert_refused_by(&checks, check::NONCE, &AzureRefusal::Nonce);
        let e = v.verify(&s.evidence, &Nonce::Expected(other)).unwrap_err();
        assert!(detail(&e).is(&AzureRefusal::Nonce), "{e}");
        let e = v
            .verify(&s.evidence, &Nonce::Expected([0; 32].to_vec()))
            .unwrap_err();
        assert!(detail(&e).is(&AzureRefusal::Nonce), "{e}");
        // No nonce given: the check is skipped, and a skipped check refuses.
        let e = v.verify(&s.evidence, &Nonce::NotChecked).unwrap_err();
        assert!(detail(&e).is(&AttestRefusal::CheckNotPerformed), "{e}");
    }
}

#[test]
fn a_foreign_key_or_chain_is_refused() {
    let samples = snp_samples();
    let [hcl, _, v0, _, _, genoa] = &samples[..] else {
        panic!("six samples")
    };
    // Another VM's VCEK (same product, another chip).
    let mut e = hcl.evidence.clone();
    e.vcek_chain = v0.evidence.vcek_chain.clone();
    let checks = snp_validator(hcl, both_amd_roots())
        .verify_detailed(&e, &Nonce::Expected(hcl.nonce.clone()));
    assert_refused_by(&checks, confboot_snp::check::CHIP_ID, &SnpRefusal::ChipId);
    assert_refused_by(
        &checks,
        confboot_snp::check::SIGNATURE,
        &SnpRefusal::ReportSignature,
    );

    // The Genoa VCEK for a Milan report: it chains, to another product's ARK.
    let mut e = hcl.evidence.clone();
    e.vcek_chain = genoa.evidence.vcek_chain.clone();
    let checks = snp_validator(hcl, both_amd_roots())
        .verify_detailed(&e, &Nonce::Expected(hcl.nonce.clone()));
    assert_refused_by(
        &checks,
        confboot_snp::check::SIGNATURE,
        &SnpRefusal::ReportSignature,
    );

    // Only the Genoa root pinned: the Milan VCEK chains to no pinned ARK.
    let checks = snp_validator(hcl, amd_roots(&["azure-snp/genoa_ask_ark_asvk.pem"]))
        .verify_detailed(&hcl.evidence, &Nonce::Expected(hcl.nonce.clone()));
    let e = failed(&checks, confboot_snp::check::CHAIN);
    assert!(
        detail(&e).is(&SnpRefusal::Chain) || detail(&e).is(&SnpRefusal::ChainIntermediate),
        "{e}"
    );

    // Another VM's quote: signed by another AK than the report binds.
    let mut e = hcl.evidence.clone();
    e.tpm_quote = genoa.evidence.tpm_quote.clone();
    let checks = snp_validator(hcl, both_amd_roots())
        .verify_detailed(&e, &Nonce::Expected(genoa.nonce.clone()));
    assert_refused_by(
        &checks,
        check::QUOTE_SIGNATURE,
        &AzureRefusal::QuoteSignature,
    );

    // Another VM's HCL report with this quote and its VCEK: the report is
    // signed, the AK it binds did not sign the quote.
    let mut e = v0.evidence.clone();
    e.tpm_quote = hcl.evidence.tpm_quote.clone();
    let checks = snp_validator(v0, both_amd_roots())
        .verify_detailed(&e, &Nonce::Expected(hcl.nonce.clone()));
    assert_refused_by(
        &checks,
        check::QUOTE_SIGNATURE,
        &AzureRefusal::QuoteSignature,
    );
}

#[test]
fn another_image_or_firmware_is_refused() {
    let s = &snp_samples()[0];
    let nonce = Nonce::Expected(s.nonce.clone());
    // PCRs of another image.
    let mut pcrs = image_pcrs(&s.evidence);
    pcrs.set(9, vec![0x11; 32], false);
    let mut policy = SnpPolicy::default();
    policy
        .measurement
        .set(0, hex::decode(s.measurement).unwrap(), false);
    let v = AzureValidator::new(
        Hardware::SevSnp(Box::new(
            SnpValidator::with_roots(policy.clone(), both_amd_roots()).as_of(AT),
        )),
        pcrs,
    );
    assert!(matches!(
        failed(&v.verify_detailed(&s.evidence, &nonce), check::PCRS),
        AttestationError::Measurement { index: 9, .. }
    ));
    // No PCRs at all: skipped, so refused.
    let v = AzureValidator::new(
        Hardware::SevSnp(Box::new(
            SnpValidator::with_roots(policy, both_amd_roots()).as_of(AT),
        )),
        MeasurementPolicy::default(),
    );
    let e = v.verify(&s.evidence, &nonce).unwrap_err();
    assert!(detail(&e).is(&AttestRefusal::CheckNotPerformed), "{e}");
    // Another paravisor (launch measurement).
    let other = &snp_samples()[2];
    let v = snp_validator(other, both_amd_roots());
    let v = AzureValidator::new(v.hardware().clone(), image_pcrs(&s.evidence));
    assert!(matches!(
        failed(
            &v.verify_detailed(&s.evidence, &nonce),
            confboot_snp::check::MEASUREMENT
        ),
        AttestationError::Measurement { index: 0, .. }
    ));
    // After the VCEK's expiry (2030-05-02) the chain is no longer valid.
    let mut policy = SnpPolicy::default();
    policy
        .measurement
        .set(0, hex::decode(s.measurement).unwrap(), false);
    let late = 1_900_000_000 + 200_000_000;
    let v = AzureValidator::new(
        Hardware::SevSnp(Box::new(
            SnpValidator::with_roots(policy, both_amd_roots()).as_of(late),
        )),
        image_pcrs(&s.evidence),
    );
    assert_refused_by(
        &v.verify_detailed(&s.evidence, &nonce),
        confboot_snp::check::VALIDITY,
        &SnpRefusal::Validity,
    );
}

// ---- TDX ----

const MRTD: &str = "024a32b070383331181619fa387cb4d55d1e38879f989933055ccad5bc2db795d1737b66205949d15469dc8c1ba7ab7b";

fn tdx_samples() -> Vec<(&'static str, AzureEvidence)> {
    vec![
        (
            "hcl-report.bin + td-quote.bin + tpm-quote-v1.json",
            AzureEvidence {
                hcl_report: testdata("azure-tdx/hcl-report.bin"),
                tpm_quote: TpmQuote::from_json(&testdata("azure-tdx/tpm-quote-v1.json")).unwrap(),
                vcek_chain: Vec::new(),
                td_quote: Some(testdata("azure-tdx/td-quote.bin")),
            },
        ),
        (
            "evidence-v0.json",
            read_evidence_json(&testdata("azure-tdx/evidence-v0.json")).unwrap(),
        ),
        (
            "evidence-v1.json",
            read_evidence_json(&testdata("azure-tdx/evidence-v1.json")).unwrap(),
        ),
    ]
}

fn tdx_validator(evidence: &AzureEvidence) -> AzureValidator {
    // A TDX policy pins MRTD and RTMR0-2. Under Azure's paravisor the
    // TD's RTMRs stay zero (the image is measured into the vTPM's PCRs,
    // which the PCR policy pins): the recorded TD quote's values.
    let policy = TdxPolicy {
        mr_td: Some(hex::decode(MRTD).unwrap().try_into().unwrap()),
        rtmrs: [Some([0; 48]), Some([0; 48]), Some([0; 48]), None],
        ..TdxPolicy::default()
    };
    let hardware = Hardware::Tdx(Box::new(
        TdxValidator::with_roots(policy, TdxRoots::intel()).as_of(AT),
    ));
    AzureValidator::new(hardware, image_pcrs(evidence))
}

/// Intel's collateral for the platform is not recorded: these checks cannot run offline.
const NEEDS_COLLATERAL: [&str; 7] = [
    confboot_tdx::check::ROOT_CRL,
    confboot_tdx::check::PCK_CRL,
    confboot_tdx::check::TCB_INFO,
    confboot_tdx::check::TDX_MODULE,
    confboot_tdx::check::TCB_STATUS,
    confboot_tdx::check::QE_IDENTITY,
    confboot_tdx::check::QE_TCB_STATUS,
];

#[test]
fn the_recorded_tdx_sample_passes_every_check_it_can_and_is_refused_for_collateral() {
    let nonce = Nonce::Expected(b"challenge".to_vec());
    for (name, e) in tdx_samples() {
        assert_eq!(
            hex::encode(&e.tpm_quote.pcrs[0]),
            "782b20b10f55cc46e2142cc2145d548698073e5beb82752c8d7f9279f0d8a273"
        );
        let v = tdx_validator(&e);
        let checks = v.verify_detailed(&e, &nonce);
        for c in &checks {
            if NEEDS_COLLATERAL.contains(&c.name) {
                assert!(matches!(c.outcome, CheckOutcome::Skipped(_)), "{name}: {c}");
            } else {
                assert!(matches!(c.outcome, CheckOutcome::Passed(_)), "{name}: {c}");
            }
        }
        let e = v.verify(&e, &nonce).unwrap_err();
        assert!(detail(&e).is(&AttestRefusal::CheckNotPerformed), "{e}");
        assert!(e.to_string().contains("root CRL"), "{e}");
    }
}

#[test]
fn a_tdx_sample_changed_is_refused_by_name() {
    let (_, s) = tdx_samples().remove(0);
    let v = tdx_validator(&s);
    let nonce = Nonce::Expected(b"challenge".to_vec());
    let run = |e: &AzureEvidence| v.verify_detailed(e, &nonce);

    // MRTD in the TD quote's body: the quote's signature breaks.
    let mut e = s.clone();
    e.td_quote.as_mut().unwrap()[48 + 136] ^= 1;
    assert_refused_by(
        &run(&e),
        confboot_tdx::check::QUOTE_SIGNATURE,
        &TdxRefusal::QuoteSignature,
    );
    // The runtime claims (the byte the source's test changes).
    let mut e = s.clone();
    e.hcl_report[0x880] += 1;
    assert_refused_by(
        &run(&e),
        check::CLAIMS_BINDING,
        &AzureRefusal::ClaimsBinding,
    );
    // The TDREPORT's REPORTDATA in the HCL report.
    let mut e = s.clone();
    e.hcl_report[0x20 + 128] ^= 1;
    assert_refused_by(&run(&e), check::TD_REPORT, &AzureRefusal::TdReport);
    // The TDREPORT's MRTD in the HCL report.
    let mut e = s.clone();
    e.hcl_report[0x20 + 528] ^= 1;
    assert_refused_by(&run(&e), check::TD_REPORT, &AzureRefusal::TdReport);
    // The quote: signature, PCR, nonce.
    let mut e = s.clone();
    e.tpm_quote.signature[0] ^= 1;
    assert_refused_by(
        &run(&e),
        check::QUOTE_SIGNATURE,
        &AzureRefusal::QuoteSignature,
    );
    let mut e = s.clone();
    e.tpm_quote.pcrs[0][0] ^= 1;
    assert_refused_by(&run(&e), check::PCR_DIGEST, &AzureRefusal::PcrDigest);
    assert_refused_by(
        &v.verify_detailed(&s, &Nonce::Expected(b"egnellahc".to_vec())),
        check::NONCE,
        &AzureRefusal::Nonce,
    );
    // Without the TD quote, the TDREPORT cannot be verified.
    let mut e = s.clone();
    e.td_quote = None;
    assert_refused_by(
        &run(&e),
        check::HARDWARE_REPORT,
        &AzureRefusal::HardwareReport,
    );
    // The SNP sample's quote: another AK.
    let mut e = s.clone();
    e.tpm_quote = snp_samples().remove(0).evidence.tpm_quote;
    assert_refused_by(
        &run(&e),
        check::QUOTE_SIGNATURE,
        &AzureRefusal::QuoteSignature,
    );
}

#[test]
fn the_hardware_kind_is_the_validators() {
    let (_, tdx) = tdx_samples().remove(0);
    let snp = &snp_samples()[0];
    let checks = snp_validator(snp, both_amd_roots())
        .verify_detailed(&tdx, &Nonce::Expected(b"challenge".to_vec()));
    assert_refused_by(&checks, check::HCL_REPORT, &AzureRefusal::HardwareKind);
    let checks =
        tdx_validator(&tdx).verify_detailed(&snp.evidence, &Nonce::Expected(b"challenge".to_vec()));
    assert_refused_by(&checks, check::HCL_REPORT, &AzureRefusal::HardwareKind);
}

/// The recorded samples in the join path's form: encoded as the issuer
/// encodes evidence for aTLS, each reads back whole and is admitted by the
/// join-path validator's checks with its recorded nonce; bound to a
/// session's exporter it is refused, by the nonce, before any signature
/// (the recorded quotes were made for a challenge, not a TLS session).
#[test]
fn the_recorded_samples_travel_in_the_join_paths_encoding() {
    use confboot_attest::Validator;
    use confboot_azure::{AzureSnpValidator, encode_evidence};
    for sample in snp_samples() {
        let encoded = encode_evidence(&sample.evidence);
        let decoded = read_evidence_json(&encoded).unwrap();
        assert_eq!(decoded, sample.evidence, "{}", sample.name);
        let mut policy = SnpPolicy::default();
        policy
            .measurement
            .set(0, hex::decode(sample.measurement).unwrap(), false);
        let snp = SnpValidator::with_roots(policy, both_amd_roots()).as_of(AT);
        let validator = AzureSnpValidator::with_snp(snp, image_pcrs(&sample.evidence));
        let checks = validator
            .checks()
            .verify_detailed(&decoded, &Nonce::Expected(sample.nonce.clone()));
        assert!(
            confboot_attest::check::first_failure(&checks).is_none(),
            "{}: {checks:?}",
            sample.name
        );
        let e = validator.validate(&encoded, &[7; 32]).unwrap_err();
        assert!(
            matches!(e, AttestationError::Binding(_)) && e.is(&AzureRefusal::Nonce),
            "{}: {e}",
            sample.name
        );
    }
}
