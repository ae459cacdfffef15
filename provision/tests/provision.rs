//! confboot-tpm-provision against a real swtpm, and the cross-checks between
//! the C stack (tss-esapi) and confboot's pure-Rust TPM layer and verifier.

use std::process::{Command, Output};
use std::str::FromStr;

use confboot_attest::{AttestationError, Detail, Issuer, MeasurementPolicy, Validator};
use confboot_testkit::TempDir;
use confboot_tpm::swtpm::Swtpm;
use confboot_tpm::{AK_CERT_NV_INDEX, DEFAULT_AK_HANDLE};
use confboot_vtpm::{
    AkTrust, VtpmIssuer, VtpmRefusal, VtpmValidator, encode_evidence, load_ca_certificates,
};
use tss_esapi::traits::Marshall;
use tss_esapi::{
    Context, TctiNameConf,
    handles::{KeyHandle, PersistentTpmHandle, TpmHandle},
    interface_types::{algorithm::HashingAlgorithm, session_handles::AuthSession},
    structures::{Data, HashScheme, PcrSelectionListBuilder, PcrSlot, SignatureScheme},
};

const EXTRA: [u8; 32] = [0x42; 32];

fn provision(swtpm: &Swtpm, out_dir: &std::path::Path, more: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_confboot-tpm-provision"))
        .args(["--tcti", &swtpm.tcti(), "--out-dir"])
        .arg(out_dir)
        .args(["-v", "0"])
        .args(more)
        .output()
        .expect("the provisioning binary runs")
}

fn no_policy() -> MeasurementPolicy {
    MeasurementPolicy::new(Default::default())
}

#[test]
fn help_explains_the_tool() {
    let out = Command::new(env!("CARGO_BIN_EXE_confboot-tpm-provision"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for opt in [
        "--tcti",
        "--ak-handle",
        "--nv-index",
        "--ca-cert",
        "--ca-key",
        "--out-dir",
        "--force",
        "-v",
    ] {
        assert!(help.contains(opt), "{opt} missing from:\n{help}");
    }
}

#[test]
fn provisioned_ak_and_certificate_are_read_by_confboot_and_verify() {
    let swtpm = Swtpm::start().unwrap();
    let dir = TempDir::new("ok");
    let out = provision(&swtpm, dir.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let cert_file = std::fs::read(dir.path().join("ak-cert.der")).unwrap();
    assert!(dir.path().join("ca.pem").exists() && dir.path().join("ca-key.pem").exists());

    // Our own TPM layer reads what tss-esapi wrote.
    let mut tpm = swtpm.connect().unwrap();
    let ak = tpm.load_ak(DEFAULT_AK_HANDLE).unwrap();
    assert!(!ak.transient);
    let point = confboot_tpm::structures::parse_ecc_public(&ak.public_area)
        .unwrap()
        .point;
    assert_eq!(confboot_util::hex::encode(&point), printed);
    assert_eq!(tpm.nv_read(AK_CERT_NV_INDEX).unwrap(), cert_file);
    // Same template on both stacks: our CreatePrimary derives the same key.
    let ours = tpm.create_ak().unwrap();
    assert_eq!(ours.public_area, ak.public_area);
    tpm.flush(ours.handle).unwrap();

    // The issuer picks up the persistent AK and the certificate.
    let issuer = VtpmIssuer::new(tpm).unwrap();
    assert_eq!(issuer.ak_certificate(), Some(&cert_file[..]));
    let evidence = issuer.issue(&EXTRA).unwrap();
    let roots = load_ca_certificates(&dir.path().join("ca.pem")).unwrap();
    let validator = VtpmValidator::new(AkTrust::CertificateRoots(roots), no_policy());
    validator.validate(&evidence, &EXTRA).unwrap();
    let pinned = VtpmValidator::new(AkTrust::Pinned(vec![point]), no_policy());
    pinned.validate(&evidence, &EXTRA).unwrap();

    // A second run refuses to overwrite; --force replaces, reusing the CA.
    drop(issuer);
    let again = provision(&swtpm, dir.path(), &[]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("already exists at 0x81000003; use --force"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let forced = provision(&swtpm, dir.path(), &["--force"]);
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    // Deterministic owner-hierarchy key: same AK after re-provisioning.
    assert_eq!(String::from_utf8(forced.stdout).unwrap().trim(), printed);
}

#[test]
fn certificate_from_a_given_ca_is_refused_by_a_validator_trusting_another() {
    let swtpm = Swtpm::start().unwrap();
    let ca_dir = TempDir::new("ca");
    let other_dir = TempDir::new("other");
    // Generate CA "A" into ca_dir via a first provisioning of a throwaway swtpm.
    {
        let scratch = Swtpm::start().unwrap();
        assert!(provision(&scratch, ca_dir.path(), &[]).status.success());
        assert!(
            provision(&Swtpm::start().unwrap(), other_dir.path(), &[])
                .status
                .success()
        );
    }
    // Provision the real one with CA "A" given as files.
    let out_dir = TempDir::new("out");
    let ca_cert = ca_dir.path().join("ca.pem");
    let ca_key = ca_dir.path().join("ca-key.pem");
    let out = provision(
        &swtpm,
        out_dir.path(),
        &[
            "--ca-cert",
            ca_cert.to_str().unwrap(),
            "--ca-key",
            ca_key.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out_dir.path().join("ca.pem").exists(),
        "no CA generated when one is given"
    );
    let issuer = VtpmIssuer::new(swtpm.connect().unwrap()).unwrap();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let trusts_a = VtpmValidator::new(
        AkTrust::CertificateRoots(load_ca_certificates(&ca_cert).unwrap()),
        no_policy(),
    );
    trusts_a.validate(&evidence, &EXTRA).unwrap();
    let trusts_b = VtpmValidator::new(
        AkTrust::CertificateRoots(load_ca_certificates(&other_dir.path().join("ca.pem")).unwrap()),
        no_policy(),
    );
    // Both CAs are named alike (generated by the tool): the signature decides.
    assert_eq!(
        trusts_b.validate(&evidence, &EXTRA).unwrap_err(),
        AttestationError::Trust(Detail::with(
            &VtpmRefusal::AkChain,
            "AK certificate (issuer \"CN=confboot test AK CA\") is not signed by any of the 1 configured CAs (CN=confboot test AK CA: signature does not verify)"
        ))
    );
}

/// A quote made entirely through tss-esapi (the C stack) verifies with
/// confboot's verifier, and a tampered one does not.
#[test]
fn tss_esapi_quote_verifies_with_confboot_validator() {
    let swtpm = Swtpm::start().unwrap();
    let dir = TempDir::new("tss");
    assert!(provision(&swtpm, dir.path(), &[]).status.success());

    let mut context = Context::new(TctiNameConf::from_str(&swtpm.tcti()).unwrap()).unwrap();
    context.set_sessions((Some(AuthSession::Password), None, None));
    // Without sessions: tpm2-tss 3.2's Esys_TR_FromTPMPublic crashes when
    // handed the password session.
    let ak_object = context
        .execute_without_session(|ctx| {
            ctx.tr_from_tpm_public(TpmHandle::Persistent(
                PersistentTpmHandle::new(DEFAULT_AK_HANDLE).unwrap(),
            ))
        })
        .unwrap();
    let ak: KeyHandle = ak_object.into();
    let (ak_public, _, _) = context
        .execute_without_session(|ctx| ctx.read_public(ak))
        .unwrap();
    let slots: Vec<PcrSlot> = (0..24u32)
        .map(|i| PcrSlot::try_from(1u32 << i).unwrap())
        .collect();
    let selection = PcrSelectionListBuilder::new()
        .with_selection(HashingAlgorithm::Sha256, &slots)
        .build()
        .unwrap();
    let (attest, signature) = context
        .quote(
            ak,
            Data::try_from(EXTRA.to_vec()).unwrap(),
            SignatureScheme::EcDsa {
                hash_scheme: HashScheme::new(HashingAlgorithm::Sha256),
            },
            selection.clone(),
        )
        .unwrap();
    let pcr_data = context.execute_without_session(|ctx| {
        tss_esapi::abstraction::pcr::read_all(ctx, selection).unwrap()
    });
    let bank = pcr_data.pcr_bank(HashingAlgorithm::Sha256).unwrap();
    let pcr_values: Vec<(u32, [u8; 32])> = slots
        .iter()
        .enumerate()
        .map(|(i, slot)| {
            let d = bank.get_digest(*slot).unwrap();
            (i as u32, d.value().try_into().unwrap())
        })
        .collect();
    drop(context);

    let quote = confboot_tpm::Quote {
        attest: attest.marshall().unwrap(),
        signature: signature.marshall().unwrap(),
    };
    let cert = std::fs::read(dir.path().join("ak-cert.der")).unwrap();
    let evidence = encode_evidence(
        &quote,
        &pcr_values,
        &ak_public.marshall().unwrap(),
        Some(&cert),
    );
    let roots = load_ca_certificates(&dir.path().join("ca.pem")).unwrap();
    let validator = VtpmValidator::new(AkTrust::CertificateRoots(roots), no_policy());
    let attested = validator.validate(&evidence, &EXTRA).unwrap();
    assert_eq!(attested.measurements.len(), 24);

    let mut tampered = quote.clone();
    let last = tampered.attest.len() - 1;
    tampered.attest[last] ^= 1;
    let bad = encode_evidence(
        &tampered,
        &pcr_values,
        &ak_public.marshall().unwrap(),
        Some(&cert),
    );
    assert!(matches!(
        validator.validate(&bad, &EXTRA),
        Err(e @ AttestationError::Signature(_)) if e.is(&VtpmRefusal::PcrDigest)
    ));
}
