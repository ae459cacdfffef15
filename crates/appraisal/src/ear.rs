//! Attestation results as EAT Attestation Results (EAR,
//! draft-ietf-rats-ear), signed as a JWT (RFC 7519) with ES256 (ECDSA
//! P-256, SHA-256; a P-256 key in PKCS#8 PEM, as `confboot keygen` and
//! `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` make).
//!
//! An [`AttestationResult`] holds one appraisal: its overall [`Status`],
//! the AR4SI trust vector ([`TrustVector`], one typed value per claim), the
//! reference-value set or policy it was appraised against, the evidence's
//! digest, the verifier and when it was issued. Its claims:
//!
//! ```text
//! { "eat_profile": "tag:github.com,2023:veraison/ear",
//!   "iat": 1767225600,
//!   "ear.verifier-id": { "developer": "...", "build": "..." },
//!   "submods": { "<variant>": {
//!       "ear.status": "affirming" | "warning" | "contraindicated" | "none",
//!       "ear.trustworthiness-vector": { "instance-identity": 2, ... },
//!       "ear.appraisal-policy-id": "<set or policy>",
//!       "confboot.evidence-digest": { "alg": "sha-256" | "sha-384",
//!                                     "val": "<base64url, no padding>" } } } }
//! ```
//!
//! The submodule is named after the evidence's variant (`qemu-vtpm`,
//! `sev-snp`, `tdx`). The draft carries the evidence itself
//! (`ear.raw-evidence`) but names no claim for its digest, so the digest is
//! an extension of the appraisal under this project's own prefix. The
//! profile is the one veraison's verifiers and the `ear` crate read.
//!
//! # How our checks map to the trust vector
//!
//! Each check of a verifier counts for one claim. A claim is affirmed
//! when its checks all ran and passed; a failed check sets the value the
//! table names (the last failure of a claim wins); a skipped check (no
//! expected value given) keeps its claim from being affirmed, so a
//! report whose measurement nobody pinned makes no claim on executables. Claims no check speaks for stay
//! "no claim" (absent from the JSON): `file-system`, `storage-opaque` and
//! `sourced-data` always, `hardware` and `runtime-opaque` for a vTPM (a
//! QEMU vTPM quote says nothing of the machine or its memory).
//!
//! | claim (affirmed as) | SEV-SNP checks | TDX checks | vTPM | failed as |
//! |---|---|---|---|---|
//! | `instance-identity` (2 recognized) | endorsement key, certificate chain and validity, report signature, signing key, chip id, report data | QE vendor, PCK chain and validity, root and PCK CRLs, QE report signature and data, quote signature, report data | AK trust, quote signature, nonce | 99 crypto failed; 97 unrecognized for an untrusted key, an unlisted chip or a variant not accepted |
//! | `hardware` (2 genuine) | report version, product, reported TCB, minimum ABI, minimum TCB (reported, launch) | TCB info, TDX module, TCB status, QE identity, QE TCB status, minimum TEE TCB SVN | none | 96 contraindicated; 97 unrecognized product |
//! | `executables` (3 approved boot) | measurement | MRTD, RTMR0 to RTMR3, event log | every enforced PCR but 15, event log replay | 96 contraindicated |
//! | `configuration` (2 approved) | debug, VMPL, SMT, migration agent, host data, ID key digest, allowed chip | debug, TD attributes, XFAM, MRCONFIGID, MROWNER, MROWNERCONFIG | PCR 15 (the cluster mark) | 96 unsupportable |
//! | `runtime-opaque` (2 encrypted memory) | debug off (and the verdict passed) | debug off (and the verdict passed) | none | 96 visible memory (debug on) |
//!
//! The overall status is the verdict's (affirming when the verifier
//! admitted the evidence, contraindicated when it refused it; a caller
//! may say warning for evidence it admits with a reservation). It is never
//! better than the worst claim: [`AttestationResult::check`] refuses an
//! affirming status over a contraindicated claim, and an affirming status
//! that no claim supports.
//!
//! # Reading
//!
//! [`read`] takes a token from anyone: at most [`MAX_TOKEN_LEN`] bytes;
//! the header must say ES256 (no other algorithm, `none` included, no
//! `crit`); the signature must verify under one of the keys the caller
//! configured; the claims must be exactly what [`AttestationResult`]
//! writes (the JSON re-encodes to the same bytes, so duplicate keys, other
//! claims and other encodings are refused); and the result must be issued
//! no later than `now` plus [`MAX_CLOCK_SKEW_SECS`] and no earlier than
//! `now` minus the caller's maximum age.
//!
//! The claims are read as a JSON value, not with a serde derive: that they
//! re-encode to the very bytes signed already refuses repeated keys, other
//! members and other encodings.

use std::fmt;

use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

use confboot_attest::check::{CheckOutcome, CheckResult};
use confboot_attest::{AttestationError, Variant};

/// The EAT profile of every result written and the only one read.
pub const PROFILE: &str = "tag:github.com,2023:veraison/ear";
/// The JWS algorithm of every token written and the only one read.
pub const ALGORITHM: &str = "ES256";
/// Longest token read (bytes).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
/// Longest text claim read (verifier id parts, policy id, submodule name).
pub const MAX_TEXT_LEN: usize = 512;
/// How far in the future an `iat` may lie (seconds of clock difference
/// between verifier and relying party).
pub const MAX_CLOCK_SKEW_SECS: i64 = 300;
/// Longest PEM text read for a key.
pub const MAX_KEY_PEM_LEN: usize = 16 * 1024;
/// The claim of the evidence's digest, an extension of the appraisal.
pub const EVIDENCE_DIGEST_CLAIM: &str = "confboot.evidence-digest";

/// Why a result could not be written or was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EarError {
    /// A key's PEM text or its DER is not a P-256 key of the expected form.
    #[error("key: {0}")]
    Key(String),
    /// The token is not three base64url parts, or is too large.
    #[error("not a compact JWS: {0}")]
    Format(String),
    /// The JOSE header is not ES256 or holds what is not read.
    #[error("JOSE header refused: {0}")]
    Header(String),
    /// The signature does not verify under any configured key.
    #[error("the signature does not verify under any configured key")]
    Signature,
    /// The claims are not an EAR as this module writes it.
    #[error("claims refused: {0}")]
    Claims(String),
    /// The result was issued too long ago or in the future.
    #[error("issued at {iat}, outside [{earliest}, {latest}]")]
    Stale {
        /// The result's `iat`.
        iat: i64,
        /// The earliest `iat` accepted.
        earliest: i64,
        /// The latest `iat` accepted.
        latest: i64,
    },
    /// The status and the trust vector disagree.
    #[error("status {status} over a trust vector whose worst tier is {worst}")]
    Inconsistent {
        /// The overall status.
        status: Status,
        /// The worst tier of the trust vector.
        worst: Status,
    },
}

/// The trust tier of an appraisal or a claim value (AR4SI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// No claim is made.
    None,
    /// The evidence is trustworthy in this respect.
    Affirming,
    /// Admitted with a reservation.
    Warning,
    /// Refused.
    Contraindicated,
}

impl Status {
    /// Every status, from least to most severe.
    pub const ALL: [Status; 4] = [
        Status::None,
        Status::Affirming,
        Status::Warning,
        Status::Contraindicated,
    ];

    /// Its name in `ear.status` (and in logs and metric labels).
    pub fn name(self) -> &'static str {
        match self {
            Status::None => "none",
            Status::Affirming => "affirming",
            Status::Warning => "warning",
            Status::Contraindicated => "contraindicated",
        }
    }

    /// The status named `name`.
    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The status of a verdict: affirming when the evidence passed,
    /// contraindicated when it was refused.
    pub fn of_verdict(passed: bool) -> Status {
        if passed {
            Status::Affirming
        } else {
            Status::Contraindicated
        }
    }

    /// The tier of a trust-claim value: -1 to 1 none, then by magnitude
    /// below 32 affirming, below 96 warning, else contraindicated.
    pub fn of_value(value: i8) -> Status {
        match value.unsigned_abs() {
            0 | 1 => Status::None,
            2..=31 => Status::Affirming,
            32..=95 => Status::Warning,
            _ => Status::Contraindicated,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One AR4SI trust claim: its values, with the ones every claim shares.
macro_rules! trust_claim {
    (
        $(#[$doc:meta])* $name:ident = $json:literal {
            $($(#[$vdoc:meta])* $variant:ident = $code:literal,)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            /// No claim is made (0).
            #[default]
            NoClaim,
            /// The verifier malfunctioned (-1).
            VerifierMalfunction,
            /// The evidence holds what the verifier cannot parse (1).
            UnexpectedEvidence,
            /// Cryptographic validation of the evidence failed (99).
            CryptoFailed,
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// The claim's name in the trust vector's JSON.
            pub const NAME: &'static str = $json;

            /// Its value on the wire.
            pub const fn code(self) -> i8 {
                match self {
                    $name::NoClaim => 0,
                    $name::VerifierMalfunction => -1,
                    $name::UnexpectedEvidence => 1,
                    $name::CryptoFailed => 99,
                    $($name::$variant => $code,)*
                }
            }

            /// The value with `code`, when the claim defines one.
            pub fn from_code(code: i64) -> Option<$name> {
                match code {
                    0 => Some($name::NoClaim),
                    -1 => Some($name::VerifierMalfunction),
                    1 => Some($name::UnexpectedEvidence),
                    99 => Some($name::CryptoFailed),
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

trust_claim! {
    /// `instance-identity`: whether the attesting environment is one the
    /// verifier recognizes (its signing key, chain and binding).
    InstanceIdentity = "instance-identity" {
        /// A recognized, trustworthy instance (2).
        Recognized = 2,
        /// A recognized instance that is not trustworthy (96).
        Untrustworthy = 96,
        /// An instance the verifier does not recognize (97).
        Unrecognized = 97,
    }
}

trust_claim! {
    /// `configuration`: the attester's configuration (guest policy bits,
    /// owner data, the cluster mark).
    Configuration = "configuration" {
        /// An approved configuration (2).
        Approved = 2,
        /// No known vulnerability in the configuration (3).
        NoKnownVulnerabilities = 3,
        /// A configuration with known vulnerabilities (32).
        Unsafe = 32,
        /// Elements of the configuration are unavailable (36).
        UnavailableElements = 36,
        /// An unsupportable configuration (96).
        Unsupportable = 96,
    }
}

trust_claim! {
    /// `executables`: what was loaded and run (launch measurement, PCRs,
    /// MRTD and RTMRs, their event logs).
    Executables = "executables" {
        /// Only approved runtime executables (2).
        ApprovedRuntime = 2,
        /// Only approved boot-time executables (3).
        ApprovedBoot = 3,
        /// Approved executables with known vulnerabilities (32).
        UnsafeRuntime = 32,
        /// Executables the verifier does not recognize (33).
        UnrecognizedRuntime = 33,
        /// Executables the verifier refuses (96).
        ContraindicatedRuntime = 96,
    }
}

trust_claim! {
    /// `file-system`: the attester's files.
    FileSystem = "file-system" {
        /// Only approved files (2).
        Approved = 2,
        /// Files the verifier does not recognize (32).
        Unrecognized = 32,
        /// Files the verifier refuses (96).
        Contraindicated = 96,
    }
}

trust_claim! {
    /// `hardware`: the platform and its TCB (product, firmware versions,
    /// TCB status).
    Hardware = "hardware" {
        /// Genuine hardware (2).
        Genuine = 2,
        /// Hardware with known vulnerabilities (32).
        Unsafe = 32,
        /// Hardware the verifier refuses (96).
        Contraindicated = 96,
        /// Hardware the verifier does not recognize (97).
        Unrecognized = 97,
    }
}

trust_claim! {
    /// `runtime-opaque`: whether the attester's memory is hidden from
    /// others (the host).
    RuntimeOpaque = "runtime-opaque" {
        /// Encrypted memory (2).
        EncryptedMemory = 2,
        /// Memory isolated but not encrypted (32).
        IsolatedMemory = 32,
        /// Memory others can read (96).
        VisibleMemory = 96,
    }
}

trust_claim! {
    /// `storage-opaque`: whether the attester's stored secrets are
    /// encrypted.
    StorageOpaque = "storage-opaque" {
        /// Encrypted with hardware-bound keys (2).
        HardwareKeys = 2,
        /// Encrypted with software keys (32).
        SoftwareKeys = 32,
        /// Stored in the clear (96).
        Unencrypted = 96,
    }
}

trust_claim! {
    /// `sourced-data`: the data the attester takes from others.
    SourcedData = "sourced-data" {
        /// From trusted sources only (2).
        Trusted = 2,
        /// From sources not trusted (32).
        Untrusted = 32,
        /// From sources the verifier refuses (96).
        Contraindicated = 96,
    }
}

/// The AR4SI trust vector: one value per claim ([`NoClaim`](InstanceIdentity::NoClaim)
/// when no check speaks for it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TrustVector {
    /// `instance-identity`.
    pub instance_identity: InstanceIdentity,
    /// `configuration`.
    pub configuration: Configuration,
    /// `executables`.
    pub executables: Executables,
    /// `file-system`.
    pub file_system: FileSystem,
    /// `hardware`.
    pub hardware: Hardware,
    /// `runtime-opaque`.
    pub runtime_opaque: RuntimeOpaque,
    /// `storage-opaque`.
    pub storage_opaque: StorageOpaque,
    /// `sourced-data`.
    pub sourced_data: SourcedData,
}

/// The claims a check can count for, while a vector is being built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    InstanceIdentity,
    Configuration,
    Executables,
    Hardware,
}

/// A claim and the value a failure of one of its checks gives it.
type Mapping = (Claim, i8);

const IDENTITY_CRYPTO: Mapping = (
    Claim::InstanceIdentity,
    InstanceIdentity::CryptoFailed.code(),
);
const IDENTITY_UNRECOGNIZED: Mapping = (
    Claim::InstanceIdentity,
    InstanceIdentity::Unrecognized.code(),
);
const HARDWARE_REFUSED: Mapping = (Claim::Hardware, Hardware::Contraindicated.code());
const HARDWARE_UNRECOGNIZED: Mapping = (Claim::Hardware, Hardware::Unrecognized.code());
const EXECUTABLES_REFUSED: Mapping = (
    Claim::Executables,
    Executables::ContraindicatedRuntime.code(),
);
const CONFIGURATION_REFUSED: Mapping = (Claim::Configuration, Configuration::Unsupportable.code());

/// The claim an SEV-SNP check (a name of [`confboot_snp::check`]) counts for.
fn snp_mapping(check: &str) -> Option<Mapping> {
    use confboot_snp::check::*;
    Some(match check {
        VEK | CHAIN | VALIDITY | SIGNATURE | SIGNING_KEY | CHIP_ID | REPORT_DATA => IDENTITY_CRYPTO,
        ALLOWED_CHIP => IDENTITY_UNRECOGNIZED,
        PRODUCT => HARDWARE_UNRECOGNIZED,
        VERSION | REPORTED_TCB | MIN_ABI | MIN_REPORTED_TCB | MIN_LAUNCH_TCB => HARDWARE_REFUSED,
        MEASUREMENT => EXECUTABLES_REFUSED,
        DEBUG | VMPL | SMT | MIGRATION_AGENT | HOST_DATA | ID_KEY => CONFIGURATION_REFUSED,
        _ => return None,
    })
}

/// The name of the event-log replay check `confboot verify-quote` adds
/// before a TDX quote's own checks.
pub const TDX_EVENT_LOG_CHECK: &str = "event log";

/// The claim a TDX check (a name of [`confboot_tdx::check`], or
/// [`TDX_EVENT_LOG_CHECK`]) counts for.
fn tdx_mapping(check: &str) -> Option<Mapping> {
    use confboot_tdx::check::*;
    Some(match check {
        QE_VENDOR | PCK_CHAIN | VALIDITY | ROOT_CRL | PCK_CRL | QE_REPORT_SIGNATURE
        | QE_REPORT_DATA | QUOTE_SIGNATURE | REPORT_DATA => IDENTITY_CRYPTO,
        TCB_INFO | TDX_MODULE | TCB_STATUS | QE_IDENTITY | QE_TCB_STATUS | MIN_TEE_TCB_SVN => {
            HARDWARE_REFUSED
        }
        MRTD | TDX_EVENT_LOG_CHECK => EXECUTABLES_REFUSED,
        r if RTMR.contains(&r) => EXECUTABLES_REFUSED,
        DEBUG | TD_ATTRIBUTES | XFAM | MRCONFIGID | MROWNER | MROWNERCONFIG => {
            CONFIGURATION_REFUSED
        }
        _ => return None,
    })
}

/// What a confidential VM's appraisal concluded, beside its checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The evidence passed (no check failed, none skipped).
    pub passed: bool,
    /// The report says the VM is debuggable (SEV-SNP guest policy
    /// `DEBUG`, TDX `TDATTRIBUTES.DEBUG`).
    pub debuggable: bool,
}

/// Builds a vector from check outcomes.
#[derive(Default)]
struct Tally {
    passed: Vec<Claim>,
    skipped: Vec<Claim>,
    failed: Vec<Mapping>,
}

impl Tally {
    fn record(&mut self, mapping: Mapping, outcome: &CheckOutcome) {
        match outcome {
            CheckOutcome::Passed(_) => self.passed.push(mapping.0),
            CheckOutcome::Failed(_) => self.failed.push(mapping),
            CheckOutcome::Skipped(_) => self.skipped.push(mapping.0),
        }
    }

    fn vector(&self) -> TrustVector {
        let mut v = TrustVector::default();
        for claim in self.passed.iter().filter(|c| !self.skipped.contains(c)) {
            match claim {
                Claim::InstanceIdentity => v.instance_identity = InstanceIdentity::Recognized,
                Claim::Configuration => v.configuration = Configuration::Approved,
                Claim::Executables => v.executables = Executables::ApprovedBoot,
                Claim::Hardware => v.hardware = Hardware::Genuine,
            }
        }
        // The codes come from the claims' own values.
        for &(claim, code) in &self.failed {
            let code = i64::from(code);
            match claim {
                Claim::InstanceIdentity => {
                    v.instance_identity = InstanceIdentity::from_code(code).expect("its own code")
                }
                Claim::Configuration => {
                    v.configuration = Configuration::from_code(code).expect("its own code")
                }
                Claim::Executables => {
                    v.executables = Executables::from_code(code).expect("its own code")
                }
                Claim::Hardware => v.hardware = Hardware::from_code(code).expect("its own code"),
            }
        }
        v
    }
}

impl TrustVector {
    /// The vector of an SEV-SNP or TDX appraisal: every check counted
    /// through `mapping`. Memory is visible when the debug check failed,
    /// encrypted when the verdict passed and the VM is not debuggable;
    /// otherwise (a policy that admits a debuggable VM) no claim is made.
    fn of_confidential_vm(
        checks: &[CheckResult],
        mapping: fn(&str) -> Option<Mapping>,
        debug_check: &str,
        verdict: Verdict,
    ) -> TrustVector {
        let mut tally = Tally::default();
        for c in checks {
            if let Some(m) = mapping(c.name) {
                tally.record(m, &c.outcome);
            }
        }
        let mut v = tally.vector();
        let debug = checks.iter().find(|c| c.name == debug_check);
        v.runtime_opaque = match debug.map(|c| &c.outcome) {
            Some(CheckOutcome::Failed(_)) => RuntimeOpaque::VisibleMemory,
            Some(CheckOutcome::Passed(_)) if verdict.passed && !verdict.debuggable => {
                RuntimeOpaque::EncryptedMemory
            }
            _ => RuntimeOpaque::NoClaim,
        };
        v
    }

    /// The vector of an SEV-SNP appraisal ([`confboot_snp::run_checks`]).
    pub fn of_snp_checks(checks: &[CheckResult], verdict: Verdict) -> TrustVector {
        TrustVector::of_confidential_vm(checks, snp_mapping, confboot_snp::check::DEBUG, verdict)
    }

    /// The vector of a TDX appraisal ([`confboot_tdx::run_checks`], and
    /// [`TDX_EVENT_LOG_CHECK`]).
    pub fn of_tdx_checks(checks: &[CheckResult], verdict: Verdict) -> TrustVector {
        TrustVector::of_confidential_vm(checks, tdx_mapping, confboot_tdx::check::DEBUG, verdict)
    }

    /// The vector of a vTPM quote whose signature, nonce, AK and event log
    /// were verified: `executables_match` when every enforced PCR but 15
    /// matched, `mark_matches` when PCR 15 holds the expected mark.
    pub fn of_vtpm(executables_match: bool, mark_matches: bool) -> TrustVector {
        TrustVector {
            instance_identity: InstanceIdentity::Recognized,
            executables: if executables_match {
                Executables::ApprovedBoot
            } else {
                Executables::ContraindicatedRuntime
            },
            configuration: if mark_matches {
                Configuration::Approved
            } else {
                Configuration::Unsupportable
            },
            ..TrustVector::default()
        }
    }

    /// The vector of evidence refused with `error` before (or instead of)
    /// its checks: the claim the error is about gets its failure value.
    pub fn of_refusal(error: &AttestationError) -> TrustVector {
        let mut v = TrustVector::default();
        match error {
            AttestationError::Signature(_) | AttestationError::Binding(_) => {
                v.instance_identity = InstanceIdentity::CryptoFailed
            }
            AttestationError::Trust(_) | AttestationError::WrongVariant { .. } => {
                v.instance_identity = InstanceIdentity::Unrecognized
            }
            AttestationError::Decode(_) => {
                v.instance_identity = InstanceIdentity::UnexpectedEvidence
            }
            AttestationError::Measurement { .. } | AttestationError::EventLog(_) => {
                v.executables = Executables::ContraindicatedRuntime
            }
            AttestationError::Policy(_) => v.configuration = Configuration::Unsupportable,
            AttestationError::Issue(_) => {
                v.instance_identity = InstanceIdentity::VerifierMalfunction
            }
        }
        v
    }

    /// The claims' names and codes, in the draft's order.
    pub fn codes(&self) -> [(&'static str, i8); 8] {
        [
            (InstanceIdentity::NAME, self.instance_identity.code()),
            (Configuration::NAME, self.configuration.code()),
            (Executables::NAME, self.executables.code()),
            (FileSystem::NAME, self.file_system.code()),
            (Hardware::NAME, self.hardware.code()),
            (RuntimeOpaque::NAME, self.runtime_opaque.code()),
            (StorageOpaque::NAME, self.storage_opaque.code()),
            (SourcedData::NAME, self.sourced_data.code()),
        ]
    }

    /// The most severe tier of its claims (none when it makes no claim).
    pub fn worst(&self) -> Status {
        self.codes()
            .iter()
            .map(|(_, c)| Status::of_value(*c))
            .max()
            .unwrap_or(Status::None)
    }

    fn to_json(self) -> Value {
        let map: Map<String, Value> = self
            .codes()
            .iter()
            .filter(|(_, c)| *c != 0)
            .map(|(n, c)| (n.to_string(), json!(c)))
            .collect();
        Value::Object(map)
    }

    fn from_json(v: &Value) -> Result<TrustVector, EarError> {
        let map = v
            .as_object()
            .ok_or_else(|| claims("the trust vector is not an object"))?;
        let mut out = TrustVector::default();
        for (name, value) in map {
            let code = value
                .as_i64()
                .ok_or_else(|| claims(&format!("trust claim {name:?} is not an integer")))?;
            let bad = || claims(&format!("trust claim {name:?} has no value {code}"));
            match name.as_str() {
                InstanceIdentity::NAME => {
                    out.instance_identity = InstanceIdentity::from_code(code).ok_or_else(bad)?
                }
                Configuration::NAME => {
                    out.configuration = Configuration::from_code(code).ok_or_else(bad)?
                }
                Executables::NAME => {
                    out.executables = Executables::from_code(code).ok_or_else(bad)?
                }
                FileSystem::NAME => {
                    out.file_system = FileSystem::from_code(code).ok_or_else(bad)?
                }
                Hardware::NAME => out.hardware = Hardware::from_code(code).ok_or_else(bad)?,
                RuntimeOpaque::NAME => {
                    out.runtime_opaque = RuntimeOpaque::from_code(code).ok_or_else(bad)?
                }
                StorageOpaque::NAME => {
                    out.storage_opaque = StorageOpaque::from_code(code).ok_or_else(bad)?
                }
                SourcedData::NAME => {
                    out.sourced_data = SourcedData::from_code(code).ok_or_else(bad)?
                }
                other => return Err(claims(&format!("unknown trust claim {other:?}"))),
            }
        }
        Ok(out)
    }
}

/// The digest of the appraised evidence (the bytes the attester sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EvidenceDigest {
    /// SHA-256.
    Sha256([u8; 32]),
    /// SHA-384.
    Sha384([u8; 48]),
}

impl EvidenceDigest {
    /// The SHA-256 of `evidence`.
    pub fn sha256(evidence: &[u8]) -> EvidenceDigest {
        let d = ring::digest::digest(&ring::digest::SHA256, evidence);
        EvidenceDigest::Sha256(d.as_ref().try_into().expect("SHA-256 is 32 bytes"))
    }

    /// The SHA-384 of `evidence`.
    pub fn sha384(evidence: &[u8]) -> EvidenceDigest {
        let d = ring::digest::digest(&ring::digest::SHA384, evidence);
        EvidenceDigest::Sha384(d.as_ref().try_into().expect("SHA-384 is 48 bytes"))
    }

    /// The digest a variant's evidence gets: SHA-256 for a vTPM quote,
    /// SHA-384 for SEV-SNP and TDX (the hash their reports sign with);
    /// SHA-256 for Azure's (its quote's hash).
    pub fn of_variant(variant: Variant, evidence: &[u8]) -> EvidenceDigest {
        match variant {
            Variant::QemuVtpm | Variant::AzureSevSnp => EvidenceDigest::sha256(evidence),
            Variant::SevSnp | Variant::Tdx => EvidenceDigest::sha384(evidence),
        }
    }

    /// The algorithm's name (the IANA hash name).
    pub fn algorithm(&self) -> &'static str {
        match self {
            EvidenceDigest::Sha256(_) => "sha-256",
            EvidenceDigest::Sha384(_) => "sha-384",
        }
    }

    /// The digest's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            EvidenceDigest::Sha256(d) => d,
            EvidenceDigest::Sha384(d) => d,
        }
    }

    fn to_json(self) -> Value {
        json!({"alg": self.algorithm(), "val": base64url(self.bytes())})
    }

    fn from_json(v: &Value) -> Result<EvidenceDigest, EarError> {
        let (alg, val) = match v.as_object() {
            Some(m) if m.len() == 2 => (m.get("alg"), m.get("val")),
            _ => return Err(claims("the evidence digest is not {alg, val}")),
        };
        let val = val
            .and_then(Value::as_str)
            .and_then(|v| base64url_decode(v).ok())
            .ok_or_else(|| claims("the evidence digest's value is not base64url"))?;
        match alg.and_then(Value::as_str) {
            Some("sha-256") => val.try_into().map(EvidenceDigest::Sha256).ok(),
            Some("sha-384") => val.try_into().map(EvidenceDigest::Sha384).ok(),
            _ => None,
        }
        .ok_or_else(|| claims("the evidence digest is not SHA-256 or SHA-384 of its length"))
    }
}

/// Who appraised the evidence (`ear.verifier-id`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VerifierId {
    /// Who develops the verifier.
    pub developer: String,
    /// Which build of it.
    pub build: String,
}

impl VerifierId {
    /// This build of confboot's `program` (`confboot verify`, `joinsvc`).
    pub fn confboot(program: &str) -> VerifierId {
        VerifierId {
            developer: "confboot".into(),
            build: format!("{program} {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// One appraisal of one attester's evidence, as an EAR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttestationResult {
    /// The overall status.
    pub status: Status,
    /// The trust vector.
    pub trust_vector: TrustVector,
    /// The attester: the submodule's name (the evidence's variant).
    pub attester: String,
    /// The reference-value set or policy the evidence was appraised
    /// against (`ear.appraisal-policy-id`).
    pub policy_id: String,
    /// The digest of the evidence appraised.
    pub evidence_digest: EvidenceDigest,
    /// The verifier.
    pub verifier: VerifierId,
    /// When it was issued (Unix seconds, `iat`).
    pub issued_at: i64,
}

fn claims(msg: &str) -> EarError {
    EarError::Claims(msg.to_string())
}

/// A text claim: a string of 1 to [`MAX_TEXT_LEN`] bytes without control
/// characters.
fn text<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a str, EarError> {
    match v.and_then(Value::as_str) {
        Some(s) if !s.is_empty() && s.len() <= MAX_TEXT_LEN && !s.chars().any(char::is_control) => {
            Ok(s)
        }
        _ => Err(claims(&format!(
            "{what} is not a text of 1 to {MAX_TEXT_LEN} bytes"
        ))),
    }
}

/// The object `v` with exactly the keys `keys`.
fn object_with<'a>(
    v: &'a Value,
    keys: &[&str],
    what: &str,
) -> Result<&'a Map<String, Value>, EarError> {
    let map = v
        .as_object()
        .ok_or_else(|| claims(&format!("{what} is not an object")))?;
    if map.len() != keys.len() || keys.iter().any(|k| !map.contains_key(*k)) {
        let found: Vec<&str> = map.keys().map(String::as_str).collect();
        return Err(claims(&format!(
            "{what} has the claims {found:?}, want {keys:?}"
        )));
    }
    Ok(map)
}

impl AttestationResult {
    /// Checks what a result must hold: the texts bounded, and a status
    /// never better than the worst claim (an affirming one also needs a
    /// claim that affirms).
    pub fn check(&self) -> Result<(), EarError> {
        for (s, what) in [
            (&self.attester, "the attester"),
            (&self.policy_id, "the policy id"),
            (&self.verifier.developer, "the verifier's developer"),
            (&self.verifier.build, "the verifier's build"),
        ] {
            text(Some(&Value::String(s.clone())), what)?;
        }
        let worst = self.trust_vector.worst();
        let consistent = match self.status {
            Status::Affirming => worst == Status::Affirming,
            status => status >= worst,
        };
        if !consistent {
            return Err(EarError::Inconsistent {
                status: self.status,
                worst,
            });
        }
        Ok(())
    }

    /// Its EAR claims (JSON).
    pub fn to_claims(&self) -> Value {
        let mut appraisal = Map::new();
        appraisal.insert("ear.status".into(), json!(self.status.name()));
        appraisal.insert(
            "ear.trustworthiness-vector".into(),
            self.trust_vector.to_json(),
        );
        appraisal.insert("ear.appraisal-policy-id".into(), json!(self.policy_id));
        appraisal.insert(EVIDENCE_DIGEST_CLAIM.into(), self.evidence_digest.to_json());
        let mut submods = Map::new();
        submods.insert(self.attester.clone(), Value::Object(appraisal));
        json!({
            "eat_profile": PROFILE,
            "iat": self.issued_at,
            "ear.verifier-id": {
                "developer": self.verifier.developer,
                "build": self.verifier.build,
            },
            "submods": submods,
        })
    }

    /// A result from its EAR claims, refusing any claim it does not write
    /// and any value out of range.
    pub fn from_claims(v: &Value) -> Result<AttestationResult, EarError> {
        let top = object_with(
            v,
            &["eat_profile", "iat", "ear.verifier-id", "submods"],
            "the claims",
        )?;
        if top["eat_profile"] != PROFILE {
            return Err(claims(&format!("the profile is not {PROFILE:?}")));
        }
        let issued_at = top["iat"]
            .as_i64()
            .filter(|t| *t >= 0)
            .ok_or_else(|| claims("iat is not a non-negative integer"))?;
        let vid = object_with(
            &top["ear.verifier-id"],
            &["developer", "build"],
            "ear.verifier-id",
        )?;
        let verifier = VerifierId {
            developer: text(vid.get("developer"), "the verifier's developer")?.to_string(),
            build: text(vid.get("build"), "the verifier's build")?.to_string(),
        };
        let submods = top["submods"]
            .as_object()
            .ok_or_else(|| claims("submods is not an object"))?;
        let [(attester, appraisal)]: [(&String, &Value); 1] = submods
            .iter()
            .collect::<Vec<_>>()
            .try_into()
            .map_err(|_| claims("submods does not hold exactly one attester"))?;
        text(Some(&Value::String(attester.clone())), "the attester")?;
        let appraisal = object_with(
            appraisal,
            &[
                "ear.status",
                "ear.trustworthiness-vector",
                "ear.appraisal-policy-id",
                EVIDENCE_DIGEST_CLAIM,
            ],
            "the appraisal",
        )?;
        let status = appraisal["ear.status"]
            .as_str()
            .and_then(Status::from_name)
            .ok_or_else(|| claims("ear.status is not a status"))?;
        let result = AttestationResult {
            status,
            trust_vector: TrustVector::from_json(&appraisal["ear.trustworthiness-vector"])?,
            attester: attester.clone(),
            policy_id: text(
                appraisal.get("ear.appraisal-policy-id"),
                "ear.appraisal-policy-id",
            )?
            .to_string(),
            evidence_digest: EvidenceDigest::from_json(&appraisal[EVIDENCE_DIGEST_CLAIM])?,
            verifier,
            issued_at,
        };
        result.check()?;
        Ok(result)
    }

    /// The result as a signed JWT (compact JWS, ES256): checked, then
    /// signed by `key`.
    pub fn sign(&self, key: &EarSigningKey) -> Result<String, EarError> {
        self.check()?;
        let header = json!({"alg": ALGORITHM, "typ": "JWT", "kid": key.verifying.kid_hex()});
        let payload = serde_json::to_vec(&self.to_claims()).expect("JSON values serialize");
        let input = format!(
            "{}.{}",
            base64url(header.to_string().as_bytes()),
            base64url(&payload)
        );
        let signature = key
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .map_err(|e| EarError::Key(format!("cannot sign: {e}")))?;
        Ok(format!("{input}.{}", base64url(signature.as_ref())))
    }
}

/// Reads a signed result from anyone: bounded, ES256 only, signed by one of
/// `keys`, its claims exactly as [`AttestationResult::to_claims`] writes
/// them, issued between `now - max_age_secs` and `now +`
/// [`MAX_CLOCK_SKEW_SECS`].
pub fn read(
    token: &[u8],
    keys: &[EarVerifyingKey],
    now: i64,
    max_age_secs: i64,
) -> Result<AttestationResult, EarError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(EarError::Format(format!(
            "{} bytes, more than {MAX_TOKEN_LEN}",
            token.len()
        )));
    }
    let token = std::str::from_utf8(token)
        .map_err(|_| EarError::Format("not UTF-8".into()))?
        .trim_end_matches('\n');
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = parts[..] else {
        return Err(EarError::Format(format!(
            "{} parts, want three",
            parts.len()
        )));
    };
    let decode = |part: &str, what: &str| {
        base64url_decode(part).map_err(|e| EarError::Format(format!("{what}: {e}")))
    };
    let header_bytes = decode(header, "header")?;
    let header_json: Value = serde_json::from_slice(&header_bytes)
        .map_err(|e| EarError::Header(format!("not JSON: {e}")))?;
    let fields = header_json
        .as_object()
        .ok_or_else(|| EarError::Header("not an object".into()))?;
    if fields.get("alg").and_then(Value::as_str) != Some(ALGORITHM) {
        return Err(EarError::Header(format!("alg is not {ALGORITHM}")));
    }
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("alg", _) => {}
            ("typ", Value::String(t)) if t == "JWT" => {}
            ("kid", Value::String(k)) if k.len() <= MAX_TEXT_LEN => {}
            (other, _) => {
                return Err(EarError::Header(format!("{other:?} is not read")));
            }
        }
    }
    let signature = decode(signature, "signature")?;
    let input = &token[..header.len() + 1 + payload.len()];
    if !keys.iter().any(|k| k.verify(input.as_bytes(), &signature)) {
        return Err(EarError::Signature);
    }
    let payload = decode(payload, "payload")?;
    let claims_json: Value =
        serde_json::from_slice(&payload).map_err(|e| EarError::Claims(format!("not JSON: {e}")))?;
    if serde_json::to_vec(&claims_json).ok().as_deref() != Some(&payload[..]) {
        return Err(claims("not in the encoding confboot writes"));
    }
    let result = AttestationResult::from_claims(&claims_json)?;
    let (earliest, latest) = (
        now.saturating_sub(max_age_secs.max(0)),
        now.saturating_add(MAX_CLOCK_SKEW_SECS),
    );
    if !(earliest..=latest).contains(&result.issued_at) {
        return Err(EarError::Stale {
            iat: result.issued_at,
            earliest,
            latest,
        });
    }
    Ok(result)
}

/// Base64url without padding (RFC 7515 §2).
fn base64url(bytes: &[u8]) -> String {
    confboot_util::base64::encode_url(bytes)
        .trim_end_matches('=')
        .to_string()
}

/// Base64url without padding; padding and non-canonical trailing bits
/// refused.
fn base64url_decode(text: &str) -> Result<Vec<u8>, String> {
    if text.contains('=') {
        return Err("padded".into());
    }
    confboot_util::base64::decode_url(text).map_err(|e| e.to_string())
}

/// The DER of a P-256 SubjectPublicKeyInfo up to its point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The one PEM block labelled `label` in `pem`, decoded; zeroized on drop.
fn pem_block(pem: &[u8], label: &str) -> Result<Zeroizing<Vec<u8>>, EarError> {
    confboot_util::base64::pem_block(pem, label, MAX_KEY_PEM_LEN)
        .map_err(|e| EarError::Key(e.to_string()))
}

/// A key whose signatures on results a relying party accepts (P-256).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarVerifyingKey {
    spki: Vec<u8>,
}

impl EarVerifyingKey {
    /// A key from the DER of its SubjectPublicKeyInfo (P-256, the point
    /// uncompressed).
    pub fn from_spki_der(der: &[u8]) -> Result<EarVerifyingKey, EarError> {
        if der.len() != P256_SPKI_PREFIX.len() + 65
            || der[..P256_SPKI_PREFIX.len()] != P256_SPKI_PREFIX
            || der[P256_SPKI_PREFIX.len()] != 0x04
        {
            return Err(EarError::Key(
                "not a P-256 public key (SubjectPublicKeyInfo, uncompressed point)".into(),
            ));
        }
        Ok(EarVerifyingKey { spki: der.to_vec() })
    }

    /// A key from PEM text with one `PUBLIC KEY` block (what `confboot
    /// keygen` writes beside the private key, and `openssl pkey -pubout`).
    pub fn from_pem(pem: &[u8]) -> Result<EarVerifyingKey, EarError> {
        EarVerifyingKey::from_spki_der(&pem_block(pem, "PUBLIC KEY")?)
    }

    /// Its SubjectPublicKeyInfo as PEM text.
    pub fn to_pem(&self) -> String {
        confboot_util::base64::pem("PUBLIC KEY", &self.spki)
    }

    /// Its key id, as the header's `kid`: the SHA-256 of its
    /// SubjectPublicKeyInfo, in hex.
    pub fn kid_hex(&self) -> String {
        confboot_util::hex::encode(ring::digest::digest(&ring::digest::SHA256, &self.spki).as_ref())
    }

    fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(
            &ECDSA_P256_SHA256_FIXED,
            &self.spki[P256_SPKI_PREFIX.len()..],
        )
        .verify(message, signature)
        .is_ok()
    }
}

/// A key that signs results (P-256, from PKCS#8). The PKCS#8 bytes are
/// zeroized once parsed; ring's own copy of the scalar is not.
pub struct EarSigningKey {
    pair: EcdsaKeyPair,
    verifying: EarVerifyingKey,
}

impl fmt::Debug for EarSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EarSigningKey")
            .field("kid", &self.verifying.kid_hex())
            .finish_non_exhaustive()
    }
}

impl EarSigningKey {
    /// A key from PKCS#8 DER (P-256).
    pub fn from_pkcs8_der(der: &[u8]) -> Result<EarSigningKey, EarError> {
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &SystemRandom::new())
                .map_err(|e| EarError::Key(format!("not a P-256 PKCS#8 key: {e}")))?;
        let spki = [&P256_SPKI_PREFIX[..], pair.public_key().as_ref()].concat();
        let verifying = EarVerifyingKey::from_spki_der(&spki)?;
        Ok(EarSigningKey { pair, verifying })
    }

    /// A key from PEM text with one `PRIVATE KEY` (PKCS#8) block.
    pub fn from_pem(pem: &[u8]) -> Result<EarSigningKey, EarError> {
        EarSigningKey::from_pkcs8_der(&pem_block(pem, "PRIVATE KEY")?)
    }

    /// A new random key.
    pub fn generate() -> Result<EarSigningKey, EarError> {
        let doc =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|e| EarError::Key(format!("cannot generate a key: {e}")))?;
        EarSigningKey::from_pkcs8_der(&Zeroizing::new(doc.as_ref().to_vec()))
    }

    /// The public half, as relying parties configure it.
    pub fn verifying_key(&self) -> &EarVerifyingKey {
        &self.verifying
    }
}

#[cfg(test)]
mod tests;
