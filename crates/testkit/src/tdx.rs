//! A test Intel for TDX without TDX hardware, as bytes and keys: its own
//! root CA, PCK CA and TCB signing certificate (ECDSA P-256, as Intel's),
//! PCK certificates with the SGX extensions, TCB info and QE identity
//! documents signed as Intel's PCS serves them, CRLs, and platforms whose
//! PCK and attestation keys sign what a quote carries.
//!
//! The quote itself (its layout is confboot-attest's contract) is made in
//! `confboot-tests` (`tdx::TestQuoteSource`) with these keys.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, CustomExtension, DnType,
    IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, RevokedCertParams,
    SerialNumber, date_time_ymd,
};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};

/// The FMSPC of the test platforms.
pub const FMSPC: [u8; 6] = [0x00, 0x90, 0x6e, 0xd5, 0x00, 0x00];
/// The test QE's MRSIGNER.
pub const QE_MRSIGNER: [u8; 32] = [0xdc; 32];
/// The test QE's ISVPRODID.
pub const QE_ISV_PROD_ID: u16 = 2;
/// The test QE's ISVSVN.
pub const QE_ISV_SVN: u16 = 4;

fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    let n = content.len();
    if n < 0x80 {
        v.push(n as u8);
    } else if n < 0x100 {
        v.extend_from_slice(&[0x81, n as u8]);
    } else {
        v.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]);
    }
    v.extend_from_slice(content);
    v
}

fn der_seq(parts: &[Vec<u8>]) -> Vec<u8> {
    der_tlv(0x30, &parts.concat())
}

/// An OID under Intel's SGX arc 1.2.840.113741.1.13.1.
fn sgx_oid(suffix: &[u8]) -> Vec<u8> {
    let mut oid = vec![0x2a, 0x86, 0x48, 0x86, 0xf8, 0x4d, 0x01, 0x0d, 0x01];
    oid.extend_from_slice(suffix);
    der_tlv(0x06, &oid)
}

fn der_small_uint(v: u16) -> Vec<u8> {
    let be = v.to_be_bytes();
    let bytes: Vec<u8> = if v < 0x80 {
        vec![be[1]]
    } else if v < 0x100 {
        vec![0, be[1]]
    } else if be[0] < 0x80 {
        be.to_vec()
    } else {
        vec![0, be[0], be[1]]
    };
    der_tlv(0x02, &bytes)
}

/// The PCK certificate's SGX extension: TCB (16 components, PCESVN,
/// CPUSVN), PCE-ID and FMSPC.
fn sgx_extension(components: u8, pce_svn: u16) -> Vec<u8> {
    let mut tcb = Vec::new();
    for i in 1..=16u8 {
        tcb.push(der_seq(&[
            sgx_oid(&[2, i]),
            der_small_uint(u16::from(components)),
        ]));
    }
    tcb.push(der_seq(&[sgx_oid(&[2, 17]), der_small_uint(pce_svn)]));
    tcb.push(der_seq(&[
        sgx_oid(&[2, 18]),
        der_tlv(0x04, &[components; 16]),
    ]));
    der_seq(&[
        der_seq(&[sgx_oid(&[1]), der_tlv(0x04, &[0x11; 16])]),
        der_seq(&[sgx_oid(&[2]), der_seq(&tcb)]),
        der_seq(&[sgx_oid(&[3]), der_tlv(0x04, &[0, 0])]),
        der_seq(&[sgx_oid(&[4]), der_tlv(0x04, &FMSPC)]),
    ])
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = confboot_util::base64::encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.distinguished_name.push(DnType::CommonName, cn);
    p
}

fn p256() -> KeyPair {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("P-256 key")
}

fn signer(key: &KeyPair) -> EcdsaKeyPair {
    EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        &key.serialize_der(),
        &SystemRandom::new(),
    )
    .expect("a P-256 PKCS#8 key")
}

/// An ECDSA P-256 SHA-256 signature of `data` with `key`, `r ‖ s`.
fn sign(key: &EcdsaKeyPair, data: &[u8]) -> Vec<u8> {
    key.sign(&SystemRandom::new(), data)
        .expect("ECDSA signing")
        .as_ref()
        .to_vec()
}

/// `YYYY-MM-DDTHH:MM:SSZ` of now plus `days` (negative: past).
fn date_in(days: i64) -> String {
    let now = SystemTime::now();
    let t = if days >= 0 {
        now + Duration::from_secs(days as u64 * 86_400)
    } else {
        now - Duration::from_secs((-days) as u64 * 86_400)
    };
    confboot_util::time::rfc3339(t)
}

/// The current year, for CRL dates.
fn this_year() -> i32 {
    date_in(0)[..4].parse().expect("a year")
}

/// A test Intel: root CA, PCK CA, TCB signing certificate.
pub struct TestIntel {
    root_der: Vec<u8>,
    root_issuer: Issuer<'static, KeyPair>,
    pck_ca_der: Vec<u8>,
    pck_ca_issuer: Issuer<'static, KeyPair>,
    tcb_signing_der: Vec<u8>,
    tcb_signing: EcdsaKeyPair,
}

impl TestIntel {
    /// Mints a root CA, a PCK CA under it and a TCB signing certificate.
    pub fn new() -> TestIntel {
        let root_key = p256();
        let root = ca_params("Test SGX Root CA");
        let root_der = root.self_signed(&root_key).expect("root").der().to_vec();
        let root_issuer = Issuer::new(root, root_key);
        let pck_ca_key = p256();
        let pck_ca = ca_params("Test SGX PCK Platform CA");
        let pck_ca_der = pck_ca
            .signed_by(&pck_ca_key, &root_issuer)
            .expect("PCK CA")
            .der()
            .to_vec();
        let pck_ca_issuer = Issuer::new(pck_ca, pck_ca_key);
        let tcb_key = p256();
        let mut tcb = CertificateParams::new(Vec::<String>::new()).expect("params");
        tcb.distinguished_name
            .push(DnType::CommonName, "Test SGX TCB Signing");
        let tcb_signing_der = tcb
            .signed_by(&tcb_key, &root_issuer)
            .expect("TCB signing")
            .der()
            .to_vec();
        TestIntel {
            root_der,
            root_issuer,
            pck_ca_der,
            pck_ca_issuer,
            tcb_signing_der,
            tcb_signing: signer(&tcb_key),
        }
    }

    /// The root certificate, PEM (what a policy's `rootCertificates` pins).
    pub fn root_pem(&self) -> String {
        pem("CERTIFICATE", &self.root_der)
    }

    /// The TCB info's issuer chain (TCB signing certificate, root), PEM.
    pub fn tcb_info_issuer_chain(&self) -> String {
        pem("CERTIFICATE", &self.tcb_signing_der) + &self.root_pem()
    }

    /// A platform: its PCK key and certificate (serial `serial`), and an
    /// attestation key of its QE.
    pub fn platform(&self, serial: u8) -> TestPlatform {
        let pck_key = p256();
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name
            .push(DnType::CommonName, "Test SGX PCK Certificate");
        p.serial_number = Some(SerialNumber::from(vec![serial]));
        p.custom_extensions = vec![CustomExtension::from_oid_content(
            &[1, 2, 840, 113741, 1, 13, 1],
            sgx_extension(3, 11),
        )];
        let leaf = p.signed_by(&pck_key, &self.pck_ca_issuer).expect("PCK");
        let chain_pem = pem("CERTIFICATE", leaf.der())
            + &pem("CERTIFICATE", &self.pck_ca_der)
            + &self.root_pem();
        let rng = SystemRandom::new();
        let ak_pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("attestation key");
        TestPlatform {
            pck: signer(&pck_key),
            chain_pem: chain_pem.into_bytes(),
            attestation_key: EcdsaKeyPair::from_pkcs8(
                &ECDSA_P256_SHA256_FIXED_SIGNING,
                ak_pkcs8.as_ref(),
                &rng,
            )
            .expect("attestation key"),
        }
    }

    /// The PCK CA's CRL revoking the PCK certificates with these serials,
    /// DER, current this year.
    pub fn pck_crl(&self, revoked: &[u8]) -> Vec<u8> {
        let year = this_year();
        CertificateRevocationListParams {
            this_update: date_time_ymd(year - 1, 1, 1),
            next_update: date_time_ymd(year + 1, 12, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|s| RevokedCertParams {
                    serial_number: SerialNumber::from(vec![*s]),
                    revocation_time: date_time_ymd(year - 1, 6, 1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        }
        .signed_by(&self.pck_ca_issuer)
        .expect("CRL")
        .der()
        .to_vec()
    }

    /// The root's CRL (revoking nothing), DER.
    pub fn root_crl(&self) -> Vec<u8> {
        let year = this_year();
        CertificateRevocationListParams {
            this_update: date_time_ymd(year - 1, 1, 1),
            next_update: date_time_ymd(year + 1, 12, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: Vec::new(),
            key_identifier_method: KeyIdMethod::Sha256,
        }
        .signed_by(&self.root_issuer)
        .expect("CRL")
        .der()
        .to_vec()
    }

    fn signed_document(&self, member: &str, body: &str) -> String {
        let signature = sign(&self.tcb_signing, body.as_bytes());
        format!(
            r#"{{"{member}":{body},"signature":"{}"}}"#,
            confboot_util::hex::encode(&signature)
        )
    }

    /// TCB info for [`FMSPC`], current for 30 days: one level, UpToDate,
    /// that the test platforms reach; the TDX module Intel's (MRSIGNERSEAM
    /// and SEAMATTRIBUTES zero).
    pub fn tcb_info(&self) -> String {
        let sgx: Vec<String> = (0..16).map(|_| r#"{"svn":2}"#.to_string()).collect();
        let tdx: Vec<String> = (0..16).map(|_| r#"{"svn":0}"#.to_string()).collect();
        let body = format!(
            r#"{{"id":"TDX","version":3,"issueDate":"{}","nextUpdate":"{}","fmspc":"{}","pceId":"0000","tcbType":0,"tcbEvaluationDataNumber":17,"tdxModule":{{"mrsigner":"{}","attributes":"0000000000000000","attributesMask":"FFFFFFFFFFFFFFFF"}},"tcbLevels":[{{"tcb":{{"sgxtcbcomponents":[{}],"pcesvn":10,"tdxtcbcomponents":[{}]}},"tcbDate":"2024-01-01T00:00:00Z","tcbStatus":"UpToDate"}}]}}"#,
            date_in(-1),
            date_in(30),
            confboot_util::hex::encode(&FMSPC),
            "00".repeat(48),
            sgx.join(","),
            tdx.join(",")
        );
        self.signed_document("tcbInfo", &body)
    }

    /// The TD QE identity, current for 30 days: [`QE_MRSIGNER`],
    /// [`QE_ISV_PROD_ID`], UpToDate from ISVSVN [`QE_ISV_SVN`].
    pub fn qe_identity(&self) -> String {
        let body = format!(
            r#"{{"id":"TD_QE","version":2,"issueDate":"{}","nextUpdate":"{}","tcbEvaluationDataNumber":17,"miscselect":"00000000","miscselectMask":"FFFFFFFF","attributes":"11000000000000000000000000000000","attributesMask":"FBFFFFFFFFFFFFFF0000000000000000","mrsigner":"{}","isvprodid":{QE_ISV_PROD_ID},"tcbLevels":[{{"tcb":{{"isvsvn":{QE_ISV_SVN}}},"tcbDate":"2024-01-01T00:00:00Z","tcbStatus":"UpToDate"}}]}}"#,
            date_in(-1),
            date_in(30),
            confboot_util::hex::encode(&QE_MRSIGNER)
        );
        self.signed_document("enclaveIdentity", &body)
    }
}

impl Default for TestIntel {
    fn default() -> Self {
        Self::new()
    }
}

/// A platform of a [`TestIntel`]: its PCK key and chain, and its QE's
/// attestation key.
pub struct TestPlatform {
    pck: EcdsaKeyPair,
    chain_pem: Vec<u8>,
    attestation_key: EcdsaKeyPair,
}

impl TestPlatform {
    /// The attestation key as a quote carries it: `x ‖ y`.
    pub fn attestation_key_raw(&self) -> [u8; 64] {
        let mut raw = [0u8; 64];
        raw.copy_from_slice(&self.attestation_key.public_key().as_ref()[1..65]);
        raw
    }

    /// Signs `data` with the attestation key (a quote's signature), `r ‖ s`.
    pub fn sign_with_attestation_key(&self, data: &[u8]) -> Vec<u8> {
        sign(&self.attestation_key, data)
    }

    /// Signs `data` with the PCK key (the QE report's signature), `r ‖ s`.
    pub fn sign_with_pck(&self, data: &[u8]) -> Vec<u8> {
        sign(&self.pck, data)
    }

    /// The PCK certificate chain (PCK, PCK CA, root), PEM.
    pub fn chain_pem(&self) -> &[u8] {
        &self.chain_pem
    }
}

/// Signs `data` with a fresh P-256 key that no platform has: a forger's
/// signature, `r ‖ s`.
pub fn sign_with_a_fresh_key(data: &[u8]) -> Vec<u8> {
    let rng = SystemRandom::new();
    let other = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
    let other = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, other.as_ref(), &rng)
        .expect("key");
    sign(&other, data)
}
