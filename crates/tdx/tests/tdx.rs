//! The TDX verifier against real quotes and Intel's collateral
//! (`testdata/`, provenance in its README): genuine quotes verify with
//! their chain and collateral as of a time inside the collateral's window,
//! any flipped byte of the signed part fails, and every kind of tampering,
//! stale collateral, foreign root or policy breach is refused.

use confboot_attest::check::{CheckOutcome, CheckResult, ReportDataCheck};
use confboot_attest::{AttestationError, PolicyError};
use confboot_tdx::*;
use confboot_util::hex;

fn testdata(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Inside every window of the version-4 quote's collateral: TCB info
/// 2023-06-18..07-18, QE identity 06-08..07-08, PCK CRL 06-08..07-08,
/// root CRL 2023-04-03..2024-04-02, TCB signing certificate ..2025-05-21.
const AT_V4: i64 = 1_687_392_000; // 2023-06-22T00:00:00Z
/// Inside the version-5 quote's PCK certificate and TCB info windows
/// (2026-02-01..03-03).
const AT_V5: i64 = 1_770_681_600; // 2026-02-10T00:00:00Z

fn v4() -> Quote {
    Quote::parse(&testdata("quote_v4_spr_e4.dat")).unwrap()
}

fn collateral_v4() -> Collateral {
    Collateral {
        tcb_info: Some(SignedTcbInfo::parse(&testdata("tcb_info_50806f000000.json")).unwrap()),
        qe_identity: Some(SignedQeIdentity::parse(&testdata("qe_identity.json")).unwrap()),
        pck_crl: Some(Crl::parse(&testdata("pck_platform_crl.der")).unwrap()),
        root_crl: Some(Crl::parse(&testdata("root_crl.der")).unwrap()),
        tcb_signing: Vec::new(),
    }
}

/// A policy pinning the quote's own MRTD and RTMRs, accepting `statuses`.
fn policy_for(q: &Quote, statuses: &[TcbStatus]) -> TdxPolicy {
    TdxPolicy {
        mr_td: Some(q.report.mr_td),
        rtmrs: q.report.rtmr.map(Some),
        accepted_tcb_statuses: statuses.to_vec(),
        ..TdxPolicy::default()
    }
}

fn validator(policy: TdxPolicy, collateral: Collateral, at: i64) -> TdxValidator {
    TdxValidator::with_roots(policy, TdxRoots::intel())
        .with_collateral(collateral)
        .as_of(at)
}

fn outcome<'a>(checks: &'a [CheckResult], name: &str) -> &'a CheckOutcome {
    &checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
        .outcome
}

fn failures(checks: &[CheckResult]) -> Vec<&'static str> {
    checks
        .iter()
        .filter(|c| matches!(c.outcome, CheckOutcome::Failed(_)))
        .map(|c| c.name)
        .collect()
}

fn report_data(q: &Quote) -> ReportDataCheck {
    ReportDataCheck::Exact(q.report.report_data)
}

#[test]
fn the_real_quotes_parse() {
    let q = v4();
    assert_eq!(q.header.version, 4);
    assert_eq!(q.header.qe_vendor_id, INTEL_QE_VENDOR_ID);
    assert_eq!(q.report.body_type, BodyType::Td10);
    assert_eq!(q.signed_bytes().len(), HEADER_LEN + TD10_BODY_LEN);
    assert_eq!(q.qe_auth_data.len(), 32);
    assert_eq!(q.trailing_len(), 39, "the sample's appended test bytes");
    assert!(!q.report.debug());

    let v5 = Quote::parse(&testdata("quote_v5.dat")).unwrap();
    assert_eq!(v5.header.version, 5);
    assert_eq!(v5.report.body_type, BodyType::Td15);
    assert_eq!(v5.signed_bytes().len(), HEADER_LEN + 6 + TD15_BODY_LEN);
    assert!(v5.report.tee_tcb_svn_2.is_some() && v5.report.mr_service_td.is_some());
    assert_eq!(v5.trailing_len(), 0);

    let cos = Quote::parse(&testdata("quote_v4_cos113.dat")).unwrap();
    assert_eq!(
        cos.trailing_len(),
        8000 - 4935,
        "zero padding of the buffer"
    );
}

/// The checks that fail for the genuine version-4 quote with its genuine
/// collateral: only the TCB status. The sample platform's SGX TCB
/// (components 3 3 2 2 2 1 0 2) is below every level Intel's TCB info
/// lists for its FMSPC (5 5 2 2 3 1 0 3), so Intel's algorithm finds no
/// level: the platform's TCB is not supported.
const V4_FAILS: [&str; 1] = [check::TCB_STATUS];

#[test]
fn the_v4_quote_verifies_with_all_its_collateral() {
    let q = v4();
    let v = validator(
        policy_for(&q, &[TcbStatus::UpToDate]),
        collateral_v4(),
        AT_V4,
    );
    let checks = v.verify_quote_detailed(&q, &report_data(&q));
    for c in &checks {
        eprintln!("{c}");
    }
    for c in &checks {
        assert!(
            matches!(c.outcome, CheckOutcome::Passed(_)) || V4_FAILS.contains(&c.name),
            "{c} (every check passes, none skipped)"
        );
    }
    assert!(
        matches!(outcome(&checks, check::TCB_STATUS), CheckOutcome::Failed(AttestationError::Policy(d))
            if d.is(&TdxRefusal::TcbStatus) && d.text().contains("no TCB level")),
        "{checks:#?}"
    );
    assert!(
        matches!(outcome(&checks, check::QE_TCB_STATUS), CheckOutcome::Passed(s) if s == "UpToDate")
    );
    // The validator's verdict is that failure.
    assert!(matches!(
        v.verify(&q, &report_data(&q)),
        Err(e @ AttestationError::Policy(_)) if e.is(&TdxRefusal::TcbStatus)
    ));
}

#[test]
fn the_v5_quote_verifies_its_chain_and_signatures() {
    let q = Quote::parse(&testdata("quote_v5.dat")).unwrap();
    let v = validator(
        policy_for(&q, &[TcbStatus::UpToDate]),
        Collateral::default(),
        AT_V5,
    );
    let checks = v.verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(failures(&checks), Vec::<&str>::new(), "{checks:#?}");
    for name in [
        check::PCK_CHAIN,
        check::VALIDITY,
        check::QE_REPORT_SIGNATURE,
        check::QE_REPORT_DATA,
        check::QUOTE_SIGNATURE,
    ] {
        assert!(
            matches!(outcome(&checks, name), CheckOutcome::Passed(_)),
            "{name}"
        );
    }
    // Without collateral the TCB is unknown: a validator refuses.
    assert!(matches!(
        outcome(&checks, check::TCB_STATUS),
        CheckOutcome::Skipped(_)
    ));
    assert!(v.verify(&q, &report_data(&q)).is_err());
}

#[test]
fn the_v5_tcb_info_is_signed_by_a_certificate_that_had_expired() {
    // Intel kept the 2018 TCB signing key: its signature over the 2026 TCB
    // info verifies, but the certificate built in (and in the recorded
    // issuer chain) expired on 2025-05-21, so the TCB info is refused at a
    // time inside its own window; the TCB status is still computed the same
    // way when its signer is valid.
    let q = Quote::parse(&testdata("quote_v5.dat")).unwrap();
    let signed = SignedTcbInfo::parse(&testdata("tcb_info_90c06f000000.json")).unwrap();
    let signing = IntelCert::from_der(INTEL_SGX_TCB_SIGNING_2018_DER).unwrap();
    let info = signed.verify(&signing).unwrap();
    let collateral = Collateral {
        tcb_info: Some(signed.clone()),
        ..Collateral::default()
    };
    let v = validator(policy_for(&q, &[TcbStatus::UpToDate]), collateral, AT_V5);
    let checks = v.verify_quote_detailed(&q, &report_data(&q));
    assert!(
        matches!(outcome(&checks, check::TCB_INFO), CheckOutcome::Failed(AttestationError::Trust(d))
            if d.is(&TdxRefusal::TcbInfo) && d.text().contains("Intel SGX TCB Signing")),
        "{checks:#?}"
    );
    let chain = TdxRoots::intel()
        .verify_pck_chain(&q.pck_chain_pem)
        .unwrap();
    let sgx = chain.leaf.sgx_extensions().unwrap();
    assert_eq!(sgx.fmspc, info.fmspc());
    // TDX module 1.x (TEE_TCB_SVN byte 1 is 1) with SVN 11: the module
    // identity TDX_01 decides the module (its level from SVN 6), the
    // platform level the rest; both are UpToDate.
    assert_eq!(
        hex::encode(&q.report.tee_tcb_svn),
        "0b010400000000000000000000000000"
    );
    let m = info.tcb_status(&sgx, &q.report.tee_tcb_svn).unwrap();
    assert_eq!(m.status, TcbStatus::UpToDate);
    assert_eq!(m.platform.tcb_date, "2024-11-13T00:00:00Z");
    assert_eq!(m.module.map(|l| l.isv_svn), Some(6));
}

#[test]
fn every_flipped_byte_of_the_signed_part_fails() {
    let raw = testdata("quote_v4_spr_e4.dat");
    let genuine = v4();
    let signed_len = genuine.signed_bytes().len();
    let v = validator(
        policy_for(&genuine, &[TcbStatus::UpToDate]),
        collateral_v4(),
        AT_V4,
    );
    // The signed part, and the signature, attestation key, QE report, its
    // signature and the QE authentication data after it.
    let sig_data = signed_len + 4;
    let qe_end = sig_data + 64 + 64 + 6 + QE_REPORT_LEN + 64 + 2 + 32;
    for i in (0..signed_len).chain(sig_data..qe_end) {
        let mut bytes = raw.clone();
        bytes[i] ^= 0x01;
        let Ok(q) = Quote::parse(&bytes) else {
            continue; // a header field the parser refuses
        };
        // The expected report data is the genuine one: a flipped report
        // data byte must fail the signature, not only the binding.
        let checks = v.verify_quote_detailed(&q, &report_data(&genuine));
        let signature_failed = [
            check::QUOTE_SIGNATURE,
            check::QE_REPORT_SIGNATURE,
            check::QE_REPORT_DATA,
        ]
        .iter()
        .any(|n| matches!(outcome(&checks, n), CheckOutcome::Failed(_)));
        assert!(
            signature_failed,
            "byte {i} flipped, yet every signature verifies"
        );
        assert!(v.verify(&q, &report_data(&genuine)).is_err(), "byte {i}");
    }
}

#[test]
fn another_root_is_refused_and_configured_roots_replace_intels() {
    let q = v4();
    // A self-signed CA of our own as the only root.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Intel SGX Root CA");
    let other = params.self_signed(&key).unwrap();
    let roots = TdxRoots::new(&[other.der().to_vec()]).unwrap();
    let v = TdxValidator::with_roots(policy_for(&q, &[TcbStatus::UpToDate]), roots)
        .with_collateral(collateral_v4())
        .as_of(AT_V4);
    let checks = v.verify_quote_detailed(&q, &report_data(&q));
    assert!(
        matches!(
            outcome(&checks, check::PCK_CHAIN),
            CheckOutcome::Failed(e @ (AttestationError::Trust(_) | AttestationError::Signature(_)))
                if e.is(&TdxRefusal::PckChain)
        ),
        "{checks:#?}"
    );
    assert!(matches!(
        outcome(&checks, check::TCB_INFO),
        CheckOutcome::Failed(_)
    ));
    assert!(v.verify(&q, &report_data(&q)).is_err());
    // A root that is not self-signed is not a root.
    let intermediate = certificates_from_pem_or_der(&q.pck_chain_pem).unwrap()[1].clone();
    assert!(TdxRoots::new(&[intermediate]).is_err());
}

#[test]
fn collateral_is_refused_outside_its_window() {
    let q = v4();
    let policy = policy_for(&q, &[TcbStatus::UpToDate]);
    // A month later: TCB info, QE identity and the PCK CRL are due for update.
    let later = AT_V4 + 31 * 86_400;
    let checks = validator(policy.clone(), collateral_v4(), later)
        .verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(
        failures(&checks),
        vec![check::PCK_CRL, check::TCB_INFO, check::QE_IDENTITY],
        "{checks:#?}"
    );
    // Before the TCB info was issued.
    let earlier = AT_V4 - 30 * 86_400;
    let checks = validator(policy.clone(), collateral_v4(), earlier)
        .verify_quote_detailed(&q, &report_data(&q));
    assert!(failures(&checks).contains(&check::TCB_INFO));
    // After the TCB signing certificate expired, with fresh-looking dates
    // nowhere: everything signed by it is refused.
    let checks = validator(policy, collateral_v4(), 1_750_000_000)
        .verify_quote_detailed(&q, &report_data(&q));
    assert!(
        matches!(outcome(&checks, check::TCB_INFO), CheckOutcome::Failed(AttestationError::Trust(d))
            if d.is(&TdxRefusal::TcbInfo) && d.text().contains("TCB Signing"))
    );
}

#[test]
fn a_clock_set_back_does_not_make_stale_collateral_current() {
    use confboot_util::floor::TimeFloor;
    use std::sync::Arc;
    let q = v4();
    let policy = policy_for(&q, &[TcbStatus::UpToDate]);
    let floor = Arc::new(TimeFloor::in_memory(0));
    let stale = vec![check::PCK_CRL, check::TCB_INFO, check::QE_IDENTITY];
    // Read a month after AT_V4: TCB info, QE identity and PCK CRL are due.
    let later = AT_V4 + 31 * 86_400;
    let checks = validator(policy.clone(), collateral_v4(), later)
        .with_time_floor(Arc::clone(&floor))
        .verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(failures(&checks), stale, "{checks:#?}");
    // The host sets the clock back into the collateral's window: the floor
    // holds, the collateral stays stale.
    let checks = validator(policy.clone(), collateral_v4(), AT_V4)
        .with_time_floor(Arc::clone(&floor))
        .verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(failures(&checks), stale, "{checks:#?}");
    assert_eq!(floor.get(), later);
    // A validator that has seen no later time finds it current.
    let checks =
        validator(policy, collateral_v4(), AT_V4).verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(failures(&checks), V4_FAILS, "{checks:#?}");
}

#[test]
fn tampered_collateral_is_refused() {
    let q = v4();
    let policy = policy_for(&q, &[TcbStatus::UpToDate]);
    // One status changed inside the signed member: the signature fails.
    let text = String::from_utf8(testdata("tcb_info_50806f000000.json")).unwrap();
    let forged = text.replacen("\"OutOfDate\"", "\"UpToDate\"", 1);
    assert_ne!(forged, text);
    let mut c = collateral_v4();
    c.tcb_info = Some(SignedTcbInfo::parse(forged.as_bytes()).unwrap());
    let checks = validator(policy.clone(), c, AT_V4).verify_quote_detailed(&q, &report_data(&q));
    assert!(matches!(
        outcome(&checks, check::TCB_INFO),
        CheckOutcome::Failed(e @ AttestationError::Signature(_)) if e.is(&TdxRefusal::TcbInfo)
    ));
    assert!(matches!(
        outcome(&checks, check::TCB_STATUS),
        CheckOutcome::Skipped(_)
    ));
    // Same for the QE identity.
    let text = String::from_utf8(testdata("qe_identity.json")).unwrap();
    let forged = text.replacen("\"isvprodid\":2", "\"isvprodid\":3", 1);
    let mut c = collateral_v4();
    c.qe_identity = Some(SignedQeIdentity::parse(forged.as_bytes()).unwrap());
    let checks = validator(policy.clone(), c, AT_V4).verify_quote_detailed(&q, &report_data(&q));
    assert!(matches!(
        outcome(&checks, check::QE_IDENTITY),
        CheckOutcome::Failed(e @ AttestationError::Signature(_)) if e.is(&TdxRefusal::QeIdentity)
    ));
    // TCB info for another platform (its FMSPC) is refused even when signed.
    let other = SignedTcbInfo::parse(&testdata("tcb_info_90c06f000000.json")).unwrap();
    let mut c = collateral_v4();
    c.tcb_info = Some(other);
    let checks = validator(policy, c, AT_V4).verify_quote_detailed(&q, &report_data(&q));
    assert!(matches!(
        outcome(&checks, check::TCB_INFO),
        CheckOutcome::Failed(_)
    ));
}

#[test]
fn crls_revoke_and_must_be_signed_by_their_issuer() {
    let q = v4();
    let policy = policy_for(&q, &[TcbStatus::UpToDate]);
    // The root CRL given as the PCK CRL: issued by another CA.
    let mut c = collateral_v4();
    c.pck_crl = Some(Crl::parse(&testdata("root_crl.der")).unwrap());
    let checks = validator(policy.clone(), c, AT_V4).verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(failures(&checks), vec![check::PCK_CRL, check::TCB_STATUS]);
    // A CRL is current only between its updates.
    let crl = Crl::parse(&testdata("pck_platform_crl.der")).unwrap();
    let chain = TdxRoots::intel()
        .verify_pck_chain(&q.pck_chain_pem)
        .unwrap();
    crl.check(&chain.intermediate, AT_V4).unwrap();
    assert!(matches!(
        crl.check(&chain.intermediate, AT_V4 + 40 * 86_400),
        Err(CertError::Expired { .. })
    ));
    assert!(matches!(
        crl.check(&chain.root, AT_V4),
        Err(CertError::Issuer { .. })
    ));
    crl.check_not_revoked(&chain.leaf).unwrap();
    assert!(crl.revoked_count() > 0);
}

#[test]
fn the_tcb_status_follows_intels_algorithm() {
    let q = v4();
    let signing = IntelCert::from_der(INTEL_SGX_TCB_SIGNING_2018_DER).unwrap();
    let info = SignedTcbInfo::parse(&testdata("tcb_info_50806f000000.json"))
        .unwrap()
        .verify(&signing)
        .unwrap();
    let chain = TdxRoots::intel()
        .verify_pck_chain(&q.pck_chain_pem)
        .unwrap();
    let genuine = chain.leaf.sgx_extensions().unwrap();
    assert_eq!(hex::encode(&genuine.fmspc), "50806f000000");
    assert_eq!(
        hex::encode(&genuine.sgx_tcb_components),
        "03030202020100020000000000000000"
    );
    assert_eq!(genuine.pce_svn, 11);
    let mut svn = q.report.tee_tcb_svn;
    assert_eq!(hex::encode(&svn), "03000400000000000000000000000000");
    // The genuine platform is below every level (see V4_FAILS).
    assert!(matches!(
        info.tcb_status(&genuine, &svn),
        Err(CollateralError::NoMatchingLevel { .. })
    ));
    // The platform brought to the levels' SGX components and TDX late
    // microcode SVN (5, the quote has 4): the newest level.
    let mut sgx = genuine.clone();
    sgx.sgx_tcb_components = [5, 5, 2, 2, 3, 1, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0];
    assert!(info.tcb_status(&sgx, &svn).is_err());
    svn[2] = 5;
    let m = info.tcb_status(&sgx, &svn).unwrap();
    assert_eq!((m.status, m.module.is_none()), (TcbStatus::UpToDate, true));
    // A PCESVN between the two levels' (5 and 11): the older level.
    sgx.pce_svn = 6;
    assert_eq!(
        info.tcb_status(&sgx, &svn).unwrap().status,
        TcbStatus::OutOfDate
    );
    // The OutOfDate level names its advisories.
    assert!(
        !info
            .tcb_status(&sgx, &svn)
            .unwrap()
            .platform
            .advisory_ids
            .is_empty()
    );
    // Below every level: no status.
    sgx.pce_svn = 4;
    assert!(matches!(
        info.tcb_status(&sgx, &svn),
        Err(CollateralError::NoMatchingLevel { .. })
    ));
    // An SGX component below the levels'.
    sgx.pce_svn = 11;
    sgx.sgx_tcb_components[7] = 2;
    assert!(info.tcb_status(&sgx, &svn).is_err());
    sgx.sgx_tcb_components[7] = 3;
    // A TDX module SVN below the level's (minor version 0: byte 0 counts).
    let mut low = svn;
    low[0] = 0;
    low[1] = 0;
    assert!(info.tcb_status(&sgx, &low).is_err());
    // A module with minor version 1 needs the module identity TDX_01,
    // which this TCB info (no tdxModuleIdentities) lacks.
    let mut minor = svn;
    minor[1] = 1;
    assert!(info.tcb_status(&sgx, &minor).is_err());
}

#[test]
fn the_policy_decides_statuses_and_measurements() {
    let q = v4();
    let rd = report_data(&q);
    // Only statuses other than UpToDate accepted: refused.
    let v = validator(
        policy_for(&q, &[TcbStatus::OutOfDate]),
        collateral_v4(),
        AT_V4,
    );
    let checks = v.verify_quote_detailed(&q, &rd);
    assert_eq!(
        failures(&checks),
        vec![check::TCB_STATUS, check::QE_TCB_STATUS]
    );
    let mut policy = policy_for(&q, &[TcbStatus::UpToDate]);
    policy.mr_td.as_mut().unwrap()[0] ^= 1;
    policy.rtmrs[2].as_mut().unwrap()[47] ^= 1;
    policy.mr_owner = Some([0x11; 48]);
    policy.xfam = Some([0; 8]);
    policy.minimum_tee_tcb_svn = Some([0xff; 16]);
    policy.td_attributes = Some(td_attributes::PERFMON);
    let checks = validator(policy, collateral_v4(), AT_V4).verify_quote_detailed(&q, &rd);
    assert_eq!(
        failures(&checks),
        vec![
            check::TCB_STATUS,
            check::TD_ATTRIBUTES,
            check::XFAM,
            check::MIN_TEE_TCB_SVN,
            check::MRTD,
            check::RTMR[2],
            check::MROWNER
        ]
    );
    // The report data binding.
    let v = validator(
        policy_for(&q, &[TcbStatus::UpToDate]),
        collateral_v4(),
        AT_V4,
    );
    let checks = v.verify_quote_detailed(&q, &ReportDataCheck::ExtraData([0; 32]));
    assert!(matches!(
        outcome(&checks, check::REPORT_DATA),
        CheckOutcome::Failed(e @ AttestationError::Binding(_)) if e.is(&TdxRefusal::ReportData)
    ));
    // No MRTD pinned: the MRTD check is skipped, and a validator refuses.
    let mut policy = policy_for(&q, &[TcbStatus::UpToDate]);
    policy.mr_td = None;
    let checks = validator(policy.clone(), collateral_v4(), AT_V4).verify_quote_detailed(&q, &rd);
    assert!(matches!(
        outcome(&checks, check::MRTD),
        CheckOutcome::Skipped(_)
    ));
    policy.insecure_any_image = true;
    let checks = validator(policy, collateral_v4(), AT_V4).verify_quote_detailed(&q, &rd);
    assert!(matches!(
        outcome(&checks, check::MRTD),
        CheckOutcome::Passed(_)
    ));
    assert_eq!(failures(&checks), V4_FAILS);
}

#[test]
fn a_debuggable_td_is_refused_unless_allowed() {
    // A debug TD's quote: the real quote with the DEBUG bit set fails its
    // signature, so the debug check is shown on the parsed body directly.
    let mut q = v4();
    q.report.td_attributes[0] |= 1;
    let policy = policy_for(&q, &[TcbStatus::UpToDate]);
    let checks = validator(policy.clone(), collateral_v4(), AT_V4)
        .verify_quote_detailed(&q, &report_data(&q));
    assert!(matches!(
        outcome(&checks, check::DEBUG),
        CheckOutcome::Failed(e @ AttestationError::Policy(_)) if e.is(&TdxRefusal::Debug)
    ));
    let allowed = TdxPolicy {
        allow_debug: true,
        ..policy
    };
    let checks =
        validator(allowed, collateral_v4(), AT_V4).verify_quote_detailed(&q, &report_data(&q));
    assert!(matches!(
        outcome(&checks, check::DEBUG),
        CheckOutcome::Passed(_)
    ));
}

#[test]
fn a_qe_report_that_does_not_bind_the_key_is_refused() {
    let mut q = v4();
    q.qe_auth_data[0] ^= 1;
    let v = validator(
        policy_for(&q, &[TcbStatus::UpToDate]),
        collateral_v4(),
        AT_V4,
    );
    let checks = v.verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(
        failures(&checks),
        vec![check::QE_REPORT_DATA, check::TCB_STATUS]
    );
    // Another attestation key: the binding and the quote signature fail.
    let mut q = v4();
    q.attestation_key[5] ^= 1;
    let checks = v.verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(
        failures(&checks),
        vec![
            check::QE_REPORT_DATA,
            check::QUOTE_SIGNATURE,
            check::TCB_STATUS
        ]
    );
}

#[test]
fn malformed_quotes_are_refused_at_every_length() {
    let raw = testdata("quote_v4_spr_e4.dat");
    let end = 4935;
    for len in 0..end {
        assert!(Quote::parse(&raw[..len]).is_err(), "length {len}");
    }
    let mut bad = raw.clone();
    bad[0] = 3;
    assert_eq!(Quote::parse(&bad), Err(QuoteError::Version(3)));
    let mut bad = raw.clone();
    bad[4] = 0;
    assert_eq!(Quote::parse(&bad), Err(QuoteError::TeeType(0)));
    let mut bad = raw.clone();
    bad[2] = 3;
    assert_eq!(Quote::parse(&bad), Err(QuoteError::KeyType(3)));
}

#[test]
fn policy_files_load() {
    let q = v4();
    let text = format!(
        r#"{{"mrtd": "{}", "rtmrs": {{"0": "{}", "1": "{}", "2": "{}"}},
            "acceptedTcbStatuses": ["UpToDate"]}}"#,
        hex::encode(&q.report.mr_td),
        hex::encode(&q.report.rtmr[0]),
        hex::encode(&q.report.rtmr[1]),
        hex::encode(&q.report.rtmr[2])
    );
    let p = TdxPolicy::from_json(&text).unwrap();
    let checks = validator(p, collateral_v4(), AT_V4).verify_quote_detailed(&q, &report_data(&q));
    assert_eq!(failures(&checks), V4_FAILS);
    assert!(matches!(
        TdxPolicy::from_json("{}"),
        Err(PolicyError::TdxImageNotPinned { .. })
    ));
}

/// The registers that measure the image are `MRTD`, `RTMR0` (the
/// firmware's configuration, the host's ACPI tables included), `RTMR1` (the
/// kernel) and `RTMR2` (the command line and initrd): a policy that leaves
/// one out is refused when it is read or becomes a validator, and the
/// check of a register it leaves out fails closed (skipped), so that a TD
/// with genuine firmware and the host's own kernel, initrd or command line
/// is not admitted.
#[test]
fn a_policy_that_pins_only_mrtd_admits_no_td() {
    let q = v4();
    let rd = report_data(&q);
    let hex48 = |b: &[u8; 48]| hex::encode(b);
    // Read from a file, as every binary reads it: refused, naming the
    // registers.
    let dir = confboot_testkit::TempDir::new("tdx-mrtd-only");
    let file = dir.path().join("tdx.json");
    std::fs::write(
        &file,
        format!(r#"{{"mrtd": "{}"}}"#, hex48(&q.report.mr_td)),
    )
    .unwrap();
    let e = TdxValidator::load(&file).unwrap_err();
    assert!(
        matches!(&e, PolicyError::TdxImageNotPinned { missing } if *missing == ["RTMR0", "RTMR1", "RTMR2"]),
        "{e:?}"
    );
    assert!(e.to_string().contains("RTMR0, RTMR1, RTMR2"), "{e}");
    // Built in code: refused by the validator too.
    let mrtd_only = TdxPolicy {
        mr_td: Some(q.report.mr_td),
        ..TdxPolicy::default()
    };
    assert!(matches!(
        TdxValidator::new(mrtd_only.clone()),
        Err(PolicyError::TdxImageNotPinned { .. })
    ));
    // And where a policy skips the rule (a validator with explicit
    // roots), each register it leaves out is a skipped check, which
    // refuses.
    for left_out in 0..3 {
        let mut policy = policy_for(&q, &[TcbStatus::UpToDate]);
        policy.rtmrs[left_out] = None;
        let v = validator(policy, collateral_v4(), AT_V4);
        let checks = v.verify_quote_detailed(&q, &rd);
        assert!(
            matches!(
                outcome(&checks, check::RTMR[left_out]),
                CheckOutcome::Skipped(_)
            ),
            "{checks:#?}"
        );
        assert!(v.verify(&q, &rd).is_err());
    }
    let checks = validator(
        TdxPolicy {
            accepted_tcb_statuses: vec![TcbStatus::UpToDate],
            ..mrtd_only.clone()
        },
        collateral_v4(),
        AT_V4,
    )
    .verify_quote_detailed(&q, &rd);
    for i in 0..3 {
        assert!(matches!(
            outcome(&checks, check::RTMR[i]),
            CheckOutcome::Skipped(_)
        ));
    }
    // RTMR3, the cluster mark, is not the image's: left out, it passes.
    let mut policy = policy_for(&q, &[TcbStatus::UpToDate]);
    policy.rtmrs[3] = None;
    let checks = validator(policy, collateral_v4(), AT_V4).verify_quote_detailed(&q, &rd);
    assert_eq!(failures(&checks), V4_FAILS);
    assert!(matches!(
        outcome(&checks, check::RTMR[3]),
        CheckOutcome::Passed(_)
    ));
    // insecureAnyImage keeps its meaning: the registers pass unconstrained.
    let insecure = TdxPolicy {
        insecure_any_image: true,
        ..mrtd_only
    };
    assert!(TdxValidator::new(insecure.clone()).is_ok());
    let checks = validator(insecure, collateral_v4(), AT_V4).verify_quote_detailed(&q, &rd);
    assert_eq!(failures(&checks), V4_FAILS);
    assert!(
        checks
            .iter()
            .all(|c| !matches!(c.outcome, CheckOutcome::Skipped(_)))
    );
}

#[test]
fn a_revoked_certificate_is_refused() {
    use rcgen::{
        BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, IsCa, Issuer,
        KeyIdMethod, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, RevokedCertParams,
        SerialNumber, date_time_ymd,
    };
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(DnType::CommonName, "Test PCK CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, &ca_key);
    let leaf_of = |serial: u8| {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "Test PCK");
        p.serial_number = Some(SerialNumber::from(vec![serial]));
        IntelCert::from_der(p.signed_by(&key, &issuer).unwrap().der()).unwrap()
    };
    let crl = CertificateRevocationListParams {
        this_update: date_time_ymd(2023, 6, 1),
        next_update: date_time_ymd(2023, 7, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: vec![RevokedCertParams {
            serial_number: SerialNumber::from(vec![0x42]),
            revocation_time: date_time_ymd(2023, 6, 1),
            reason_code: None,
            invalidity_date: None,
        }],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&issuer)
    .unwrap();
    let crl = Crl::parse(crl.der()).unwrap();
    let ca = IntelCert::from_der(ca_cert.der()).unwrap();
    crl.check(&ca, AT_V4).unwrap();
    assert!(matches!(
        crl.check_not_revoked(&leaf_of(0x42)),
        Err(CertError::Revoked { .. })
    ));
    crl.check_not_revoked(&leaf_of(0x43)).unwrap();
    // The CRL of another CA (Intel's root CRL) does not count for this one.
    let other = Crl::parse(&testdata("root_crl.der")).unwrap();
    assert!(other.check(&ca, AT_V4).is_err());
}
