//! What the targets check against: validators built once per process, the
//! keys that sign the seed evidence, and the exact bytes those keys signed
//! (the oracle of "never Ok without a valid signature").
//!
//! - vTPM: an attestation key (AK) and an AK-certificate CA, both fixed
//!   P-256 keys below. They are **test keys, published here**: nothing may
//!   trust them. The AK signs a few quotes ([`Vtpm::signed_attests`]); a
//!   fuzzed evidence may only validate if its quote is one of them.
//! - SEV-SNP: the genuine AMD-signed reports in `crates/snp/testdata/` with
//!   their VCEK/VLEK; a fuzzed evidence may only validate if its signed part
//!   is byte for byte one of theirs.
//! - aTLS: a fixed certificate key and nonce, and a fixed time inside both
//!   the certificates' and the SNP fixtures' validity ([`NOW`]).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use confboot_attest::{MeasurementPolicy, Validator, Variant};
use confboot_snp::{
    CertEntry, CertKind, ProductRoot, SIGNED_LEN, SigningKey, SnpEvidence, SnpPolicy, SnpReport,
    SnpValidator, TrustRoots,
};
use confboot_tpm::event_log::EventLog;
use confboot_tpm::structures::{
    PCR_COUNT, TPM_ALG_ECC, TPM_ALG_ECDSA, TPM_ALG_NULL, TPM_ALG_SHA256, TPM_ECC_NIST_P256,
    TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE, Writer, ecdsa_signature_bytes, object_attributes,
    pcr_bitmap,
};
use confboot_tpm::{CLUSTER_ID_PCR, Quote, TPM_RH_OWNER, pcr_digest, primary_qualified_name};
use confboot_vtpm::{AkTrust, VtpmValidator, encode_evidence_with_log, issue_ak_certificate};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};

/// The time the targets validate at (Unix seconds, 2025-06-01): inside the
/// validity of the SNP fixtures' certificates.
pub const NOW: u64 = 1_748_736_000;

/// The `extra_data` vTPM evidence is validated against.
pub const EXTRA: [u8; 32] = [0x11; 32];

/// The `extra_data` of the fuzz targets' aTLS session for a message
/// without a sealing key (what the session's exporter gives in a real
/// connection).
pub const SESSION_EXTRA: [u8; 32] = [0x5a; 32];

/// The `extra_data` of that session for a message with a sealing key (any
/// key: the targets' stand-in for the exporter does not hash it in).
pub const SEALED_SESSION_EXTRA: [u8; 32] = [0x5b; 32];

/// The `extra_data` the fuzz targets' session gives for `sealing_key`.
pub fn session_extra(sealing_key: Option<&[u8; 32]>) -> [u8; 32] {
    match sealing_key {
        None => SESSION_EXTRA,
        Some(_) => SEALED_SESSION_EXTRA,
    }
}

/// The PCR the vTPM policy enforces, and its value in the fixture quotes.
pub const POLICY_PCR: u32 = 4;

/// PKCS#8 of the fixture AK (P-256). A published test key.
const AK_PKCS8: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b020101042045995097e707593c9cf0f11ee130be06aafa05e1fd6bca9320ef8e88596d8609a14403420004c70161909f4e9f3cd7fc174504c1b8002be17b2e6eb48ecf66e1be79597f8111800fcb3db80aac88f4311c7ac3ac87eaa4a3bf5cd0eb2acb7299f3ae9bc0371b";
/// PKCS#8 of the fixture AK-certificate CA (P-256). A published test key.
const CA_PKCS8: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b02010104209220e736c006093244a7068c153154dc38caa795ad09afba83e28794927e1830a1440342000423074165d07594ce73d508c2af18ee84c8cf1c21151c5dc1f90925e5959eaecd5b7822cd6d2e21211126567a8d499e8105bd85babf10a30272e094a6ffb7dadd";

fn unhex(s: &str) -> Vec<u8> {
    confboot_util::hex::decode(s).expect("fixture hex")
}

/// Which PCRs a fixture quote covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcrSet {
    /// All 24, PCR 15 all-zero (an unbootstrapped node).
    All,
    /// PCRs 4 and 15 only.
    PolicyAndMark,
    /// All 24, PCR 15 marked (a bootstrapped node: the join-time validator refuses it).
    Marked,
    /// All 24, PCRs 0, 7 and 9 as [`event_log`] replays them.
    Logged,
}

impl PcrSet {
    /// Every set.
    pub const ALL: [PcrSet; 4] = [
        PcrSet::All,
        PcrSet::PolicyAndMark,
        PcrSet::Marked,
        PcrSet::Logged,
    ];

    /// The PCR values of the set: PCR i holds `[i; 32]` (or, logged, the
    /// event log's replay), PCR 15 zero or marked.
    pub fn values(self) -> Vec<(u32, [u8; 32])> {
        let replayed = EventLog::parse(&event_log())
            .expect("fixture event log")
            .replay();
        let value = |i: u32| match replayed.get(&i) {
            Some(v) if self == PcrSet::Logged => *v,
            _ if i != CLUSTER_ID_PCR => [i as u8; 32],
            _ if self == PcrSet::Marked => confboot_cluster::mark::marked_pcr15(b"fixture cluster"),
            _ => [0; 32],
        };
        let indices: Vec<u32> = match self {
            PcrSet::All | PcrSet::Marked | PcrSet::Logged => (0..PCR_COUNT as u32).collect(),
            PcrSet::PolicyAndMark => vec![POLICY_PCR, CLUSTER_ID_PCR],
        };
        indices.into_iter().map(|i| (i, value(i))).collect()
    }
}

/// The vTPM fixture: the AK, its CA, two validators and what the AK signed.
pub struct Vtpm {
    ak: EcdsaKeyPair,
    /// The AK's `TPMT_PUBLIC`.
    pub ak_public: Vec<u8>,
    /// The AK's SEC1 point.
    pub ak_point: Vec<u8>,
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Trusts exactly the fixture AK.
    pub pinned: VtpmValidator,
    /// Trusts AKs certified by the fixture CA.
    pub ca_trusted: VtpmValidator,
    /// Every `TPMS_ATTEST` the fixture AK signs, ever: the quotes over each
    /// [`PcrSet`] for [`EXTRA`] and for the aTLS session's extra data (with
    /// and without a sealing key; the verify service's too).
    pub signed_attests: Vec<Vec<u8>>,
}

/// The vTPM fixture (made once per process).
pub fn vtpm() -> &'static Vtpm {
    static V: OnceLock<Vtpm> = OnceLock::new();
    V.get_or_init(Vtpm::new)
}

impl Vtpm {
    fn new() -> Vtpm {
        let ak = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &unhex(AK_PKCS8),
            &SystemRandom::new(),
        )
        .expect("fixture AK");
        let ak_point = ak.public_key().as_ref().to_vec();
        let mut w = Writer::default();
        w.u16(TPM_ALG_ECC)
            .u16(TPM_ALG_SHA256)
            .u32(object_attributes::AK)
            .tpm2b(&[])
            .u16(TPM_ALG_NULL)
            .u16(TPM_ALG_ECDSA)
            .u16(TPM_ALG_SHA256)
            .u16(TPM_ECC_NIST_P256)
            .u16(TPM_ALG_NULL)
            .tpm2b(&ak_point[1..33])
            .tpm2b(&ak_point[33..]);
        let ak_public = w.bytes;

        let ca_key = rcgen::KeyPair::try_from(&unhex(CA_PKCS8)[..]).expect("fixture CA key");
        let mut ca_params = rcgen::CertificateParams::default();
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "confboot fuzz AK CA");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let ca_der = ca_params
            .self_signed(&ca_key)
            .expect("fixture CA certificate")
            .der()
            .to_vec();
        let ca = rcgen::Issuer::new(ca_params, ca_key);

        let mut policy = MeasurementPolicy::new(BTreeMap::new());
        policy.set(POLICY_PCR, vec![POLICY_PCR as u8; 32], false);
        let pinned = VtpmValidator::new(AkTrust::Pinned(vec![ak_point.clone()]), policy.clone());
        let ca_trusted = VtpmValidator::new(AkTrust::CertificateRoots(vec![ca_der]), policy);

        let signed_attests = [EXTRA, SESSION_EXTRA, SEALED_SESSION_EXTRA]
            .iter()
            .flat_map(|extra| {
                PcrSet::ALL
                    .iter()
                    .map(|set| attest(&ak_public, extra, &set.values()))
            })
            .collect();
        Vtpm {
            ak,
            ak_public,
            ak_point,
            ca,
            pinned,
            ca_trusted,
            signed_attests,
        }
    }

    /// Evidence the fixture AK signs: a quote over `set` bound to `extra`
    /// (one of [`EXTRA`], [`SESSION_EXTRA`] and [`SEALED_SESSION_EXTRA`]),
    /// with the AK certificate
    /// when `with_certificate`, and [`event_log`] for [`PcrSet::Logged`].
    pub fn evidence(&self, extra: &[u8; 32], set: PcrSet, with_certificate: bool) -> Vec<u8> {
        let values = set.values();
        let attest = attest(&self.ak_public, extra, &values);
        assert!(
            self.signed_attests.contains(&attest),
            "the fixture AK signs only the quotes listed in signed_attests"
        );
        let sig = self
            .ak
            .sign(&SystemRandom::new(), &attest)
            .expect("ECDSA signing");
        let (r, s) = sig.as_ref().split_at(32);
        let quote = Quote {
            attest,
            signature: ecdsa_signature_bytes(r, s),
        };
        let certificate = with_certificate.then(|| {
            issue_ak_certificate(&self.ak_point, "confboot fuzz AK", &self.ca)
                .expect("fixture AK certificate")
        });
        let log = if set == PcrSet::Logged {
            event_log()
        } else {
            Vec::new()
        };
        encode_evidence_with_log(
            &quote,
            &values,
            &self.ak_public,
            certificate.as_deref(),
            &log,
        )
    }
}

/// A crypto-agile TCG event log (SHA-1 and SHA-256 banks) as OVMF writes
/// one: the startup locality (3), a firmware blob and a Secure Boot state
/// (PCR 0, 7), a tagged initrd and an application (PCR 9).
pub fn event_log() -> Vec<u8> {
    const SHA1: u16 = 0x0004;
    const SHA256: u16 = 0x000b;
    let mut spec = b"Spec ID Event03\0".to_vec();
    spec.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 2]);
    spec.extend_from_slice(&2u32.to_le_bytes());
    for (alg, size) in [(SHA1, 20u16), (SHA256, 32)] {
        spec.extend_from_slice(&alg.to_le_bytes());
        spec.extend_from_slice(&size.to_le_bytes());
    }
    spec.push(0);
    let mut log = Vec::new();
    log.extend_from_slice(&0u32.to_le_bytes());
    log.extend_from_slice(&3u32.to_le_bytes()); // EV_NO_ACTION
    log.extend_from_slice(&[0; 20]);
    log.extend_from_slice(&(spec.len() as u32).to_le_bytes());
    log.extend_from_slice(&spec);
    let mut tagged = 0x8F3B_22EDu32.to_le_bytes().to_vec();
    tagged.extend_from_slice(&11u32.to_le_bytes());
    tagged.extend_from_slice(b"initrd=foo\0");
    let events: [(u32, u32, Vec<u8>); 5] = [
        (0, 3, b"StartupLocality\0\x03".to_vec()),
        (0, 0x8000_0008, vec![0xaa; 16]),
        (7, 0x8000_0001, b"SecureBoot\0\0".to_vec()),
        (9, 6, tagged),
        (
            9,
            0x8000_0007,
            b"Calling EFI Application from Boot Option".to_vec(),
        ),
    ];
    for (pcr, ty, data) in events {
        log.extend_from_slice(&pcr.to_le_bytes());
        log.extend_from_slice(&ty.to_le_bytes());
        log.extend_from_slice(&2u32.to_le_bytes());
        log.extend_from_slice(&SHA1.to_le_bytes());
        log.extend_from_slice(&[0x11; 20]);
        log.extend_from_slice(&SHA256.to_le_bytes());
        log.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, &data).as_ref());
        log.extend_from_slice(&(data.len() as u32).to_le_bytes());
        log.extend_from_slice(&data);
    }
    log
}

/// The `TPMS_ATTEST` of a quote by the AK with public area `ak_public` over
/// `values`, bound to `extra`.
fn attest(ak_public: &[u8], extra: &[u8; 32], values: &[(u32, [u8; 32])]) -> Vec<u8> {
    let indices: Vec<u32> = values.iter().map(|(i, _)| *i).collect();
    let digest = pcr_digest(values.iter().map(|(_, v)| &v[..]));
    let mut w = Writer::default();
    w.u32(TPM_GENERATED_VALUE)
        .u16(TPM_ST_ATTEST_QUOTE)
        .tpm2b(&primary_qualified_name(TPM_RH_OWNER, ak_public))
        .tpm2b(extra)
        .raw(&1_000_000u64.to_be_bytes()) // clock
        .u32(3) // resetCount
        .u32(0) // restartCount
        .u8(1) // safe
        .raw(&0x2023_0101u64.to_be_bytes()) // firmwareVersion
        .u32(1)
        .u16(TPM_ALG_SHA256)
        .u8(3)
        .raw(&pcr_bitmap(&indices))
        .tpm2b(&digest);
    w.bytes
}

/// One genuine SEV-SNP report with its endorsement key and a validator
/// whose policy it satisfies.
pub struct SnpFixture {
    /// The raw report.
    pub report: &'static [u8],
    /// What signed it.
    pub vek_kind: CertKind,
    /// Its VCEK or VLEK (DER).
    pub vek: &'static [u8],
    /// A validator for it (policy: its measurement and VMPL), as of [`NOW`].
    pub validator: SnpValidator,
}

impl SnpFixture {
    /// The report as evidence with its endorsement key.
    pub fn evidence(&self) -> SnpEvidence {
        SnpEvidence {
            report: SnpReport::from_bytes(self.report).expect("fixture report"),
            certificates: vec![CertEntry {
                kind: self.vek_kind,
                der: self.vek.to_vec(),
            }],
        }
    }

    /// Its `REPORT_DATA`.
    pub fn report_data(&self) -> [u8; 64] {
        self.report[0x50..0x90].try_into().expect("64 bytes")
    }

    /// Its launch measurement.
    pub fn measurement(&self) -> &[u8] {
        &self.report[0x90..0xC0]
    }

    /// The part of the report its signature covers.
    pub fn signed_part(&self) -> &[u8] {
        &self.report[..SIGNED_LEN]
    }
}

/// The Milan ASK, ARK and ASVK bundle (the VLEK report needs the ASVK).
pub const MILAN_ASK_ARK_ASVK: &[u8] =
    include_bytes!("../../crates/snp/testdata/milan_ask_ark_asvk.pem");

/// The SEV-SNP fixtures: a Milan VCEK report, another Milan VCEK report
/// whose `REPORT_DATA` is 32 bytes and zeros (the aTLS form), and a VLEK
/// report (VMPL 1, masked chip id, version 3).
pub fn snp() -> &'static [SnpFixture; 3] {
    static S: OnceLock<[SnpFixture; 3]> = OnceLock::new();
    S.get_or_init(|| {
        let builtin = TrustRoots::builtin();
        let with_asvk = TrustRoots::new(vec![
            ProductRoot::from_pem_bundle(MILAN_ASK_ARK_ASVK).expect("Milan bundle"),
        ]);
        let fixture =
            |report: &'static [u8], vek_kind, vek: &'static [u8], vmpl, roots: &TrustRoots| {
                let mut measurement = MeasurementPolicy::default();
                measurement.set(0, report[0x90..0xC0].to_vec(), false);
                let policy = SnpPolicy {
                    measurement,
                    vmpl,
                    signing_keys: vec![SigningKey::Vcek, SigningKey::Vlek],
                    ..SnpPolicy::default()
                };
                SnpFixture {
                    report,
                    vek_kind,
                    vek,
                    validator: SnpValidator::with_roots(policy, roots.clone()).as_of(NOW as i64),
                }
            };
        [
            fixture(
                include_bytes!("../../crates/snp/testdata/report_milan.bin"),
                CertKind::Vcek,
                include_bytes!("../../crates/snp/testdata/vcek_milan.der"),
                0,
                &builtin,
            ),
            fixture(
                include_bytes!("../../crates/snp/testdata/test-report.bin"),
                CertKind::Vcek,
                include_bytes!("../../crates/snp/testdata/test-vcek.der"),
                0,
                &builtin,
            ),
            fixture(
                include_bytes!("../../crates/snp/testdata/test-vlek-report.bin"),
                CertKind::Vlek,
                include_bytes!("../../crates/snp/testdata/test-vlek.der"),
                1,
                &with_asvk,
            ),
        ]
    })
}

/// The validators an aTLS attestation message is verified with, per variant: the
/// pinned-AK vTPM validator, and an SEV-SNP validator for the second SNP
/// fixture's image that knows every fixture's roots.
pub fn atls_validators(variant: Variant) -> &'static [Arc<dyn Validator>] {
    static VTPM: OnceLock<Vec<Arc<dyn Validator>>> = OnceLock::new();
    static SNP: OnceLock<Vec<Arc<dyn Validator>>> = OnceLock::new();
    static TDX: OnceLock<Vec<Arc<dyn Validator>>> = OnceLock::new();
    static AZURE: OnceLock<Vec<Arc<dyn Validator>>> = OnceLock::new();
    match variant {
        Variant::QemuVtpm => VTPM.get_or_init(|| vec![Arc::new(vtpm().pinned.clone())]),
        Variant::SevSnp => SNP.get_or_init(|| {
            let f = &snp()[1];
            let mut roots = TrustRoots::builtin().roots().to_vec();
            roots.push(ProductRoot::from_pem_bundle(MILAN_ASK_ARK_ASVK).expect("Milan bundle"));
            let v = SnpValidator::with_roots(f.validator.policy().clone(), TrustRoots::new(roots))
                .as_of(NOW as i64);
            vec![Arc::new(v)]
        }),
        Variant::Tdx => TDX.get_or_init(|| {
            use confboot_tdx::{TdxPolicy, TdxRoots, TdxValidator};
            let policy = TdxPolicy {
                insecure_any_image: true,
                ..TdxPolicy::default()
            };
            vec![Arc::new(TdxValidator::with_roots(
                policy,
                TdxRoots::intel(),
            ))]
        }),
        Variant::AzureSevSnp => AZURE.get_or_init(|| {
            let policy = confboot_snp::SnpPolicy {
                insecure_any_image: true,
                ..confboot_snp::SnpPolicy::default()
            };
            let snp = SnpValidator::with_roots(policy, TrustRoots::builtin()).as_of(NOW as i64);
            vec![Arc::new(confboot_azure::AzureSnpValidator::with_snp(
                snp,
                confboot_attest::MeasurementPolicy::default(),
            ))]
        }),
    }
}

/// A cluster CA's kubelet-certificate signer (a fresh P-256 CA, once).
pub fn kubelet_cert_signer() -> &'static confboot_cluster::kubelet_cert::KubeletCertSigner {
    use confboot_cluster::kubelet_cert::{DEFAULT_KUBELET_CERT_VALIDITY, KubeletCertSigner};
    static S: OnceLock<KubeletCertSigner> = OnceLock::new();
    S.get_or_init(|| {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA certificate");
        KubeletCertSigner::new(
            &cert.pem(),
            &key.serialize_pem(),
            DEFAULT_KUBELET_CERT_VALIDITY,
        )
        .expect("signer")
    })
}

/// A genuine TDX quote and when its chain was valid.
#[derive(Clone, Copy, Debug)]
pub struct TdxQuoteFixture {
    /// The raw quote.
    pub quote: &'static [u8],
    /// A time inside its PCK chain's validity (and, for the version-4
    /// quote, its collateral's), Unix seconds.
    pub at: i64,
}

/// The TDX fixtures (`crates/tdx/testdata/`): a version-4 quote
/// (its collateral current at its time) and a version-5 quote.
pub const TDX_QUOTES: [TdxQuoteFixture; 2] = [
    TdxQuoteFixture {
        quote: include_bytes!("../../crates/tdx/testdata/quote_v4_spr_e4.dat"),
        at: 1_687_392_000,
    },
    TdxQuoteFixture {
        quote: include_bytes!("../../crates/tdx/testdata/quote_v5.dat"),
        at: 1_770_681_600,
    },
];

/// Intel's TCB info answers for the two quotes' FMSPCs.
pub const TDX_TCB_INFOS: [&[u8]; 2] = [
    include_bytes!("../../crates/tdx/testdata/tcb_info_50806f000000.json"),
    include_bytes!("../../crates/tdx/testdata/tcb_info_90c06f000000.json"),
];

/// Intel's TD QE identity answer.
pub const TDX_QE_IDENTITY: &[u8] = include_bytes!("../../crates/tdx/testdata/qe_identity.json");

/// Intel's CRLs for the version-4 quote: the PCK Platform CA's and the
/// root's.
pub const TDX_CRLS: [&[u8]; 2] = [
    include_bytes!("../../crates/tdx/testdata/pck_platform_crl.der"),
    include_bytes!("../../crates/tdx/testdata/root_crl.der"),
];

/// The release key the signed reference-value seeds carry: P-256 PKCS#8
/// as `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`
/// writes it. A published test key.
pub const REFERENCE_RELEASE_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgYuo1K7CxIIC3ynL3
5xhCcutXNt7PoytzNd1GafJ/mWGhRANCAAT8mSPKNDG2Q9eG9gOUzgc0+V2Yr3fK
ISEfkv0CEXelWLN/mToCDk4smvyVe0wm8OGKYPWMJEiGSLFMTO2OtAKR
-----END PRIVATE KEY-----
";

/// The fixture release key.
pub fn reference_signing_key() -> confboot_appraisal::reference::SigningKey {
    confboot_appraisal::reference::SigningKey::from_pem(REFERENCE_RELEASE_KEY.as_bytes())
        .expect("the fixture release key")
}

/// The key that signs the fixture attestation results (the fixture
/// release key: any P-256 PKCS#8 key signs EARs).
pub fn ear_signing_key() -> confboot_appraisal::ear::EarSigningKey {
    confboot_appraisal::ear::EarSigningKey::from_pem(REFERENCE_RELEASE_KEY.as_bytes())
        .expect("the fixture release key")
}

/// An attestation result of `status` for SEV-SNP evidence, issued at
/// [`NOW`].
pub fn ear_result(
    status: confboot_appraisal::ear::Status,
) -> confboot_appraisal::ear::AttestationResult {
    use confboot_appraisal::ear::{AttestationResult, EvidenceDigest, TrustVector, VerifierId};
    AttestationResult {
        status,
        trust_vector: TrustVector::of_vtpm(
            true,
            status != confboot_appraisal::ear::Status::Contraindicated,
        ),
        attester: "sev-snp".into(),
        policy_id: "confboot-node 1.2.0".into(),
        evidence_digest: EvidenceDigest::sha384(b"fixture evidence"),
        verifier: VerifierId::confboot("fuzz"),
        issued_at: NOW as i64,
    }
}

/// A reference-value set of the shape `confboot measure` predicts (kernel
/// and action in PCR 4, separators in 3 to 6, command line and initrd in
/// 9, exit actions in 5), for the image `version`, valid from
/// `not_before` to `not_after`.
pub fn reference_set(
    version: &str,
    not_before: i64,
    not_after: i64,
) -> confboot_appraisal::reference::ReferenceSet {
    use confboot_tpm::event_log::{EventList, EventSummary};
    let event = |pcr: u32, event_type: &str, what: &str| EventSummary {
        pcr,
        event_type: event_type.into(),
        sha256: ring::digest::digest(&ring::digest::SHA256, what.as_bytes())
            .as_ref()
            .try_into()
            .expect("32 bytes"),
        description: what.into(),
    };
    let kernel = format!("the kernel of {version}");
    let mut events = vec![
        event(4, "EV_EFI_BOOT_SERVICES_APPLICATION", &kernel),
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
    let events = EventList { events };
    confboot_appraisal::reference::ReferenceSet {
        name: "confboot-node".into(),
        version: version.into(),
        not_before,
        not_after,
        variants: vec![confboot_appraisal::reference::VariantReference {
            variant: Variant::QemuVtpm,
            policy: confboot_measure::predicted_policy(&events),
            events,
            launch: None,
        }],
    }
}

/// The reference-value sets the seeds sign with the fixture key: version
/// 1 valid around [`NOW`], version 2 expired before it.
pub fn reference_sets() -> [confboot_appraisal::reference::ReferenceSet; 2] {
    let now = NOW as i64;
    [
        reference_set("1", now - 86_400, now + 86_400),
        reference_set("2", now - 2 * 86_400, now - 86_400),
    ]
}
