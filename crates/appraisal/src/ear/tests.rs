use super::*;
use confboot_attest::Detail;

/// The reason of the refusals these tests make up.
#[derive(PartialEq)]
struct Made;
use confboot_snp::check as snp;
use confboot_tdx::check as tdx;

const NOW: i64 = 1_767_225_600;
const DAY: i64 = 86_400;

fn passed(name: &'static str) -> CheckResult {
    CheckResult {
        name,
        outcome: CheckOutcome::Passed("ok".into()),
    }
}

fn failed(name: &'static str) -> CheckResult {
    CheckResult {
        name,
        outcome: CheckOutcome::Failed(AttestationError::Policy(Detail::with(&Made, "no"))),
    }
}

/// Every SEV-SNP check, in the order they run.
const SNP_CHECKS: [&str; 21] = [
    snp::VEK,
    snp::CHAIN,
    snp::VALIDITY,
    snp::SIGNATURE,
    snp::VERSION,
    snp::SIGNING_KEY,
    snp::PRODUCT,
    snp::CHIP_ID,
    snp::ALLOWED_CHIP,
    snp::REPORTED_TCB,
    snp::REPORT_DATA,
    snp::DEBUG,
    snp::VMPL,
    snp::SMT,
    snp::MIGRATION_AGENT,
    snp::MIN_ABI,
    snp::MIN_REPORTED_TCB,
    snp::MIN_LAUNCH_TCB,
    snp::MEASUREMENT,
    snp::HOST_DATA,
    snp::ID_KEY,
];

/// Every TDX check, and the event log's.
fn tdx_checks() -> Vec<&'static str> {
    let mut all = vec![
        tdx::QE_VENDOR,
        tdx::PCK_CHAIN,
        tdx::VALIDITY,
        tdx::ROOT_CRL,
        tdx::PCK_CRL,
        tdx::QE_REPORT_SIGNATURE,
        tdx::QE_REPORT_DATA,
        tdx::QUOTE_SIGNATURE,
        tdx::TCB_INFO,
        tdx::TDX_MODULE,
        tdx::TCB_STATUS,
        tdx::QE_IDENTITY,
        tdx::QE_TCB_STATUS,
        tdx::REPORT_DATA,
        tdx::DEBUG,
        tdx::TD_ATTRIBUTES,
        tdx::XFAM,
        tdx::MIN_TEE_TCB_SVN,
        tdx::MRTD,
        tdx::MRCONFIGID,
        tdx::MROWNER,
        tdx::MROWNERCONFIG,
        TDX_EVENT_LOG_CHECK,
    ];
    all.extend(tdx::RTMR);
    all
}

const CLEAN: Verdict = Verdict {
    passed: true,
    debuggable: false,
};
const REFUSED: Verdict = Verdict {
    passed: false,
    debuggable: false,
};

fn result(status: Status, trust_vector: TrustVector) -> AttestationResult {
    AttestationResult {
        status,
        trust_vector,
        attester: "sev-snp".into(),
        policy_id: "confboot-node 1.2.0".into(),
        evidence_digest: EvidenceDigest::sha384(b"evidence"),
        verifier: VerifierId::confboot("confboot verify"),
        issued_at: NOW,
    }
}

/// Signs any header and payload bytes with `key` (what a forger holding
/// the key, or a test, can do).
fn sign_raw(header: &[u8], payload: &[u8], key: &EarSigningKey) -> String {
    let input = format!("{}.{}", base64url(header), base64url(payload));
    let sig = key
        .pair
        .sign(&SystemRandom::new(), input.as_bytes())
        .unwrap();
    format!("{input}.{}", base64url(sig.as_ref()))
}

fn read_now(token: &str, key: &EarSigningKey) -> Result<AttestationResult, EarError> {
    read(
        token.as_bytes(),
        std::slice::from_ref(key.verifying_key()),
        NOW,
        DAY,
    )
}

#[test]
fn every_check_counts_for_a_claim() {
    for name in SNP_CHECKS {
        assert!(snp_mapping(name).is_some(), "SEV-SNP check {name:?}");
    }
    for name in tdx_checks() {
        assert!(tdx_mapping(name).is_some(), "TDX check {name:?}");
    }
}

#[test]
fn a_passing_snp_appraisal_affirms_every_claim_it_speaks_for() {
    let checks: Vec<CheckResult> = SNP_CHECKS.iter().map(|n| passed(n)).collect();
    let v = TrustVector::of_snp_checks(&checks, CLEAN);
    assert_eq!(v.instance_identity, InstanceIdentity::Recognized);
    assert_eq!(v.hardware, Hardware::Genuine);
    assert_eq!(v.executables, Executables::ApprovedBoot);
    assert_eq!(v.configuration, Configuration::Approved);
    assert_eq!(v.runtime_opaque, RuntimeOpaque::EncryptedMemory);
    assert_eq!(v.file_system, FileSystem::NoClaim);
    assert_eq!(v.storage_opaque, StorageOpaque::NoClaim);
    assert_eq!(v.sourced_data, SourcedData::NoClaim);
    assert_eq!(v.worst(), Status::Affirming);
    let r = result(Status::of_verdict(true), v);
    assert_eq!(r.status, Status::Affirming);
    r.check().unwrap();
    // A debuggable VM a policy admits gets no claim on its memory.
    let debuggable = Verdict {
        passed: true,
        debuggable: true,
    };
    let v = TrustVector::of_snp_checks(&checks, debuggable);
    assert_eq!(v.runtime_opaque, RuntimeOpaque::NoClaim);
}

#[test]
fn each_failed_check_gives_its_claim_the_mapped_value() {
    // One row per check: the claim its failure lands on and the value.
    let snp_expected: &[(&str, &str, i8)] = &[
        (snp::VEK, "instance-identity", 99),
        (snp::CHAIN, "instance-identity", 99),
        (snp::VALIDITY, "instance-identity", 99),
        (snp::SIGNATURE, "instance-identity", 99),
        (snp::VERSION, "hardware", 96),
        (snp::SIGNING_KEY, "instance-identity", 99),
        (snp::PRODUCT, "hardware", 97),
        (snp::CHIP_ID, "instance-identity", 99),
        (snp::ALLOWED_CHIP, "instance-identity", 97),
        (snp::REPORTED_TCB, "hardware", 96),
        (snp::REPORT_DATA, "instance-identity", 99),
        (snp::DEBUG, "configuration", 96),
        (snp::VMPL, "configuration", 96),
        (snp::SMT, "configuration", 96),
        (snp::MIGRATION_AGENT, "configuration", 96),
        (snp::MIN_ABI, "hardware", 96),
        (snp::MIN_REPORTED_TCB, "hardware", 96),
        (snp::MIN_LAUNCH_TCB, "hardware", 96),
        (snp::MEASUREMENT, "executables", 96),
        (snp::HOST_DATA, "configuration", 96),
        (snp::ID_KEY, "configuration", 96),
    ];
    assert_eq!(snp_expected.len(), SNP_CHECKS.len());
    for &(name, claim, value) in snp_expected {
        let checks: Vec<CheckResult> = SNP_CHECKS
            .iter()
            .map(|n| if *n == name { failed(n) } else { passed(n) })
            .collect();
        let v = TrustVector::of_snp_checks(&checks, REFUSED);
        let codes = v.codes();
        let got = codes.iter().find(|(n, _)| *n == claim).unwrap().1;
        assert_eq!(got, value, "failed SEV-SNP check {name:?} on {claim}");
        assert_eq!(v.worst(), Status::Contraindicated, "{name:?}");
        // The refusal is contraindicated, and the result says so.
        let r = result(Status::of_verdict(false), v);
        assert_eq!(r.status, Status::Contraindicated);
        r.check().unwrap();
    }
    let tdx_expected: &[(&str, &str, i8)] = &[
        (tdx::QUOTE_SIGNATURE, "instance-identity", 99),
        (tdx::PCK_CRL, "instance-identity", 99),
        (tdx::TCB_STATUS, "hardware", 96),
        (tdx::MIN_TEE_TCB_SVN, "hardware", 96),
        (tdx::MRTD, "executables", 96),
        (tdx::RTMR[2], "executables", 96),
        (TDX_EVENT_LOG_CHECK, "executables", 96),
        (tdx::MROWNER, "configuration", 96),
        (tdx::DEBUG, "configuration", 96),
    ];
    for &(name, claim, value) in tdx_expected {
        let checks: Vec<CheckResult> = tdx_checks()
            .into_iter()
            .map(|n| if n == name { failed(n) } else { passed(n) })
            .collect();
        let v = TrustVector::of_tdx_checks(&checks, REFUSED);
        let got = v.codes().iter().find(|(n, _)| *n == claim).unwrap().1;
        assert_eq!(got, value, "failed TDX check {name:?} on {claim}");
    }
}

#[test]
fn a_failed_debug_check_makes_memory_visible() {
    let checks: Vec<CheckResult> = SNP_CHECKS
        .iter()
        .map(|n| {
            if *n == snp::DEBUG {
                failed(n)
            } else {
                passed(n)
            }
        })
        .collect();
    let v = TrustVector::of_snp_checks(&checks, REFUSED);
    assert_eq!(v.runtime_opaque, RuntimeOpaque::VisibleMemory);
}

#[test]
fn skipped_checks_keep_their_claim_from_being_affirmed() {
    let skipped = |name| CheckResult {
        name,
        outcome: CheckOutcome::Skipped("no expected value".into()),
    };
    let checks = vec![
        passed(snp::SIGNATURE),
        skipped(snp::MEASUREMENT),
        passed(snp::VMPL),
        skipped(snp::HOST_DATA),
    ];
    let v = TrustVector::of_snp_checks(&checks, REFUSED);
    assert_eq!(v.executables, Executables::NoClaim);
    assert_eq!(v.configuration, Configuration::NoClaim);
    assert_eq!(v.instance_identity, InstanceIdentity::Recognized);
}

#[test]
fn vtpm_and_refusal_vectors() {
    let ok = TrustVector::of_vtpm(true, true);
    assert_eq!(ok.worst(), Status::Affirming);
    assert_eq!(ok.hardware, Hardware::NoClaim);
    assert_eq!(
        TrustVector::of_vtpm(false, true).executables,
        Executables::ContraindicatedRuntime
    );
    assert_eq!(
        TrustVector::of_vtpm(true, false).configuration,
        Configuration::Unsupportable
    );
    let cases = [
        (
            AttestationError::Signature(Detail::with(&Made, "x")),
            "instance-identity",
            99,
        ),
        (
            AttestationError::Binding(Detail::with(&Made, "x")),
            "instance-identity",
            99,
        ),
        (
            AttestationError::Trust(Detail::with(&Made, "x")),
            "instance-identity",
            97,
        ),
        (
            AttestationError::EventLog(Detail::with(&Made, "x")),
            "executables",
            96,
        ),
        (
            AttestationError::Policy(Detail::with(&Made, "x")),
            "configuration",
            96,
        ),
        (
            AttestationError::Measurement {
                index: 4,
                expected: "aa".into(),
                actual: "bb".into(),
                event: None,
            },
            "executables",
            96,
        ),
    ];
    for (error, claim, value) in cases {
        let v = TrustVector::of_refusal(&error);
        let got = v.codes().iter().find(|(n, _)| *n == claim).unwrap().1;
        assert_eq!(got, value, "{error}");
        result(Status::Contraindicated, v).check().unwrap();
    }
}

#[test]
fn the_status_is_never_better_than_the_worst_claim() {
    let refused = TrustVector::of_vtpm(false, true);
    let e = result(Status::Affirming, refused).check().unwrap_err();
    assert_eq!(
        e,
        EarError::Inconsistent {
            status: Status::Affirming,
            worst: Status::Contraindicated
        }
    );
    assert!(result(Status::Warning, refused).check().is_err());
    // Affirming needs a claim that affirms.
    assert!(
        result(Status::Affirming, TrustVector::default())
            .check()
            .is_err()
    );
    // Warning over an affirming vector: admitted with a reservation.
    result(Status::Warning, TrustVector::of_vtpm(true, true))
        .check()
        .unwrap();
}

#[test]
fn signed_results_read_back() {
    let key = EarSigningKey::generate().unwrap();
    for (status, v) in [
        (Status::Affirming, TrustVector::of_vtpm(true, true)),
        (Status::Contraindicated, TrustVector::of_vtpm(true, false)),
    ] {
        let r = result(status, v);
        let token = r.sign(&key).unwrap();
        assert_eq!(read_now(&token, &key).unwrap(), r);
        // The claims are the draft's, as an independent reader sees them.
        let payload = token.split('.').nth(1).unwrap();
        let claims: Value = serde_json::from_slice(&base64url_decode(payload).unwrap()).unwrap();
        assert_eq!(claims["eat_profile"], PROFILE);
        assert_eq!(claims["iat"], NOW);
        let appraisal = &claims["submods"]["sev-snp"];
        assert_eq!(appraisal["ear.status"], status.name());
        assert_eq!(appraisal["ear.appraisal-policy-id"], "confboot-node 1.2.0");
        assert_eq!(
            appraisal["ear.trustworthiness-vector"]["instance-identity"],
            2
        );
        assert_eq!(appraisal[EVIDENCE_DIGEST_CLAIM]["alg"], "sha-384");
    }
}

#[test]
fn a_tampered_result_is_refused() {
    let key = EarSigningKey::generate().unwrap();
    let r = result(Status::Contraindicated, TrustVector::of_vtpm(false, true));
    let token = r.sign(&key).unwrap();
    let parts: Vec<&str> = token.split('.').collect();

    // The claims changed (contraindicated → affirming), signature kept.
    let mut claims = r.to_claims();
    claims["submods"]["sev-snp"]["ear.status"] = "affirming".into();
    claims["submods"]["sev-snp"]["ear.trustworthiness-vector"]["executables"] = 3.into();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        base64url(&serde_json::to_vec(&claims).unwrap()),
        parts[2]
    );
    assert_eq!(read_now(&forged, &key), Err(EarError::Signature));

    // One bit of the signature flipped.
    let mut sig = base64url_decode(parts[2]).unwrap();
    sig[10] ^= 1;
    let forged = format!("{}.{}.{}", parts[0], parts[1], base64url(&sig));
    assert_eq!(read_now(&forged, &key), Err(EarError::Signature));

    // Signed by another key.
    let other = EarSigningKey::generate().unwrap();
    assert_eq!(
        read_now(&r.sign(&other).unwrap(), &key),
        Err(EarError::Signature)
    );

    // alg none, or HS256, whatever the signature.
    for alg in ["none", "HS256", "ES384"] {
        let header = format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#);
        let t = format!("{}.{}.{}", base64url(header.as_bytes()), parts[1], parts[2]);
        assert!(
            matches!(read_now(&t, &key), Err(EarError::Header(_))),
            "{alg}"
        );
    }
    let crit = sign_raw(
        br#"{"alg":"ES256","crit":["exp"]}"#,
        &base64url_decode(parts[1]).unwrap(),
        &key,
    );
    assert!(matches!(read_now(&crit, &key), Err(EarError::Header(_))));
    // Padding, extra parts, oversized.
    assert!(matches!(
        read_now(&format!("{token}="), &key),
        Err(EarError::Format(_))
    ));
    assert!(matches!(
        read_now(&format!("{token}.x"), &key),
        Err(EarError::Format(_))
    ));
    let big = "a".repeat(MAX_TOKEN_LEN + 1);
    assert!(matches!(read_now(&big, &key), Err(EarError::Format(_))));
}

#[test]
fn claims_other_than_written_are_refused_even_when_signed() {
    let key = EarSigningKey::generate().unwrap();
    let header = br#"{"alg":"ES256","typ":"JWT"}"#;
    let r = result(Status::Affirming, TrustVector::of_vtpm(true, true));
    let good = serde_json::to_vec(&r.to_claims()).unwrap();
    assert_eq!(
        read_now(&sign_raw(header, &good, &key), &key),
        Ok(r.clone())
    );

    let with = |edit: &dyn Fn(&mut Value)| {
        let mut c = r.to_claims();
        edit(&mut c);
        sign_raw(header, &serde_json::to_vec(&c).unwrap(), &key)
    };
    let cases: Vec<(&str, String)> = vec![
        ("extra claim", with(&|c| c["exp"] = 1.into())),
        ("profile", with(&|c| c["eat_profile"] = "tag:x".into())),
        ("negative iat", with(&|c| c["iat"] = (-1).into())),
        (
            "unknown trust claim",
            with(&|c| c["submods"]["sev-snp"]["ear.trustworthiness-vector"]["x"] = 2.into()),
        ),
        (
            "value out of range",
            with(&|c| {
                c["submods"]["sev-snp"]["ear.trustworthiness-vector"]["hardware"] = 500.into()
            }),
        ),
        (
            "undefined value",
            with(&|c| c["submods"]["sev-snp"]["ear.trustworthiness-vector"]["hardware"] = 3.into()),
        ),
        (
            "status",
            with(&|c| c["submods"]["sev-snp"]["ear.status"] = "fine".into()),
        ),
        (
            "inconsistent status",
            with(&|c| {
                c["submods"]["sev-snp"]["ear.trustworthiness-vector"]["executables"] = 96.into()
            }),
        ),
        (
            "digest length",
            with(&|c| c["submods"]["sev-snp"][EVIDENCE_DIGEST_CLAIM]["alg"] = "sha-256".into()),
        ),
        (
            "two attesters",
            with(&|c| {
                let a = c["submods"]["sev-snp"].clone();
                c["submods"]["tdx"] = a;
            }),
        ),
        (
            "control character",
            with(&|c| c["ear.verifier-id"]["build"] = "a\nb".into()),
        ),
    ];
    for (what, token) in cases {
        assert!(read_now(&token, &key).is_err(), "{what} was read");
    }
    // The same claims in another encoding (a duplicate key, spaces).
    let text = String::from_utf8(good.clone()).unwrap();
    let duplicated = text.replacen(
        r#""iat":"#,
        &format!(r#""iat":{},"iat":"#, NOW - 5 * DAY),
        1,
    );
    let spaced = text.replacen(':', ": ", 1);
    for other in [duplicated, spaced] {
        let t = sign_raw(header, other.as_bytes(), &key);
        assert!(
            matches!(read_now(&t, &key), Err(EarError::Claims(_))),
            "{other}"
        );
    }
}

#[test]
fn results_too_old_or_from_the_future_are_refused() {
    let key = EarSigningKey::generate().unwrap();
    let mut r = result(Status::Affirming, TrustVector::of_vtpm(true, true));
    r.issued_at = NOW - DAY - 1;
    assert!(matches!(
        read_now(&r.sign(&key).unwrap(), &key),
        Err(EarError::Stale { .. })
    ));
    r.issued_at = NOW + MAX_CLOCK_SKEW_SECS + 1;
    assert!(matches!(
        read_now(&r.sign(&key).unwrap(), &key),
        Err(EarError::Stale { .. })
    ));
    r.issued_at = NOW + MAX_CLOCK_SKEW_SECS;
    assert!(read_now(&r.sign(&key).unwrap(), &key).is_ok());
}

#[test]
fn keys_read_from_pem() {
    let key = EarSigningKey::generate().unwrap();
    let public = key.verifying_key().to_pem();
    assert_eq!(
        &EarVerifyingKey::from_pem(public.as_bytes()).unwrap(),
        key.verifying_key()
    );
    assert!(EarSigningKey::from_pem(public.as_bytes()).is_err());
    assert!(
        EarVerifyingKey::from_pem(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
            .is_err()
    );
    assert!(format!("{key:?}").contains(&key.verifying_key().kid_hex()));
}

#[test]
fn claim_values_round_trip_and_tiers() {
    for code in i8::MIN..=i8::MAX {
        if let Some(v) = Hardware::from_code(i64::from(code)) {
            assert_eq!(v.code(), code);
        }
    }
    assert_eq!(Status::of_value(0), Status::None);
    assert_eq!(Status::of_value(-1), Status::None);
    assert_eq!(Status::of_value(2), Status::Affirming);
    assert_eq!(Status::of_value(32), Status::Warning);
    assert_eq!(Status::of_value(96), Status::Contraindicated);
    assert_eq!(Status::of_value(99), Status::Contraindicated);
    assert_eq!(Status::of_value(-128), Status::Contraindicated);
    for s in Status::ALL {
        assert_eq!(Status::from_name(s.name()), Some(s));
    }
}
