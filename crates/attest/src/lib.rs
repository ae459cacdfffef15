//! The evidence contract of confboot's attestation: what every variant
//! implements and every consumer relies on, and nothing that carries a
//! variant's own dependencies.
//!
//! An [`Issuer`] produces evidence of what its machine runs, bound to
//! [`EXTRA_DATA_LEN`] bytes of `extra_data` (in aTLS, the TLS session's
//! exporter, so that evidence cannot be replayed into another handshake).
//! A [`Validator`] checks such evidence (its signatures, its binding to
//! `extra_data`, the trust in its signing key and the measurement policy),
//! fails closed with an [`AttestationError`], and reports what it
//! established as [`Attested`]: the [`Variant`] and its measurements by
//! index. A validator is built from a policy; [`SwappableValidator`] lets a
//! service replace it at run time while every check sees one consistent
//! policy. Beside the traits: [`check`], the vocabulary of a verifier that
//! runs named checks one by one (what a command prints, what an
//! attestation result maps to trust claims); [`measurements`], the
//! measurement policy file ([`MeasurementPolicy`]) that the vTPM and TDX
//! policies and the reference values share; and [`tsm`], the kernel's
//! configfs-tsm report interface that both the SEV-SNP and the TDX issuer
//! use (it lives here, not in one variant, so that no variant depends on
//! another).
//!
//! The crates around it: `confboot-tpm` is the TPM 2.0 driver and the TCG
//! event log, and knows nothing of evidence. Each variant is a crate of its
//! own that depends on this one and on no other variant: `confboot-vtpm`
//! (a TPM quote, over `confboot-tpm`), `confboot-snp` (an AMD SEV-SNP
//! report; AMD's KDS behind the `kds` feature) and `confboot-tdx` (an Intel
//! TDX quote with its CCEL log; Intel's PCS behind the `pcs` feature).
//! `confboot-appraisal` holds the signed documents about evidence:
//! reference-value sets in (CoRIM/COSE), attestation results out (EAR).
//! `confboot-verifier` chooses the variants and policies a service accepts
//! and how a node checks its control plane; `confboot-measure` predicts
//! what an image will measure. aTLS (`confboot-atls`) carries evidence in a
//! certificate extension named by [`Variant::oid`], and the cluster mark
//! (`confboot-cluster`) reads a member's mark from [`Attested`].

pub mod check;
pub mod measurements;
pub mod tsm;

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

pub use measurements::{MeasurementPolicy, PolicyError};

/// Length of the `extra_data` every evidence is bound to.
pub const EXTRA_DATA_LEN: usize = 32;

/// An attestation variant: what kind of evidence, and the certificate
/// extension OID that carries it in aTLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// A vTPM quote from a QEMU VM (Constellation's `qemu-vtpm`, OID 1.3.9900.5.1).
    QemuVtpm,
    /// A bare AMD SEV-SNP attestation report (OID 1.3.9900.5.3, confboot's own).
    SevSnp,
    /// An Intel TDX quote with the TD's CCEL event log (OID 1.3.9900.5.4,
    /// confboot's own arc as for SEV-SNP: Constellation's `qemu-tdx`,
    /// 1.3.9900.5.99, carries another encoding).
    Tdx,
    /// An Azure confidential VM on SEV-SNP (Constellation's
    /// `azure-sev-snp`, OID 1.3.9900.4.1): the HCL report in the paravisor
    /// vTPM's NV index `0x01400001` (an SEV-SNP report whose `REPORT_DATA`
    /// binds the runtime claims and their `HCLAkPub`), and a quote by that
    /// key over the vTPM's PCRs (`confboot-azure`).
    AzureSevSnp,
}

impl Variant {
    /// Every variant this build knows.
    pub const ALL: [Variant; 4] = [
        Variant::QemuVtpm,
        Variant::SevSnp,
        Variant::Tdx,
        Variant::AzureSevSnp,
    ];

    /// Short name, as used in configuration files and logs.
    pub fn name(self) -> &'static str {
        match self {
            Variant::QemuVtpm => "qemu-vtpm",
            Variant::SevSnp => "sev-snp",
            Variant::Tdx => "tdx",
            Variant::AzureSevSnp => "azure-sev-snp",
        }
    }

    /// Dotted OID of the certificate extension that carries this variant's evidence.
    pub fn oid(self) -> &'static str {
        match self {
            Variant::QemuVtpm => "1.3.9900.5.1",
            Variant::SevSnp => "1.3.9900.5.3",
            Variant::Tdx => "1.3.9900.5.4",
            Variant::AzureSevSnp => "1.3.9900.4.1",
        }
    }

    /// The OID's arcs, as rcgen and x509-parser want them.
    pub fn oid_arcs(self) -> &'static [u64] {
        match self {
            Variant::QemuVtpm => &[1, 3, 9900, 5, 1],
            Variant::SevSnp => &[1, 3, 9900, 5, 3],
            Variant::Tdx => &[1, 3, 9900, 5, 4],
            Variant::AzureSevSnp => &[1, 3, 9900, 4, 1],
        }
    }

    /// Looks a variant up by its short name.
    pub fn from_name(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Looks a variant up by its dotted OID.
    pub fn from_oid(oid: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.oid() == oid)
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a validator established about the peer that produced the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attested {
    /// The variant of the evidence.
    pub variant: Variant,
    /// Measured values by index: for vTPM and Azure SEV-SNP (its paravisor's
    /// vTPM), PCR number → SHA-256 digest; for
    /// SEV-SNP, 0 → the 48-byte launch measurement, and
    /// `confboot_snp::LAUNCH_IDENTITY_INDEX` → the launch's identity (chip id and
    /// `REPORT_ID`, not a measurement: no policy compares it); for TDX, the
    /// CCEL's measurement-register indexes: 0 → `MRTD`, 1 to 4 → `RTMR0`
    /// to `RTMR3` (48 bytes each).
    pub measurements: BTreeMap<u32, Vec<u8>>,
    /// Why the evidence was admitted with a warning rather than without
    /// reservation (empty: none), e.g. an SEV-SNP platform TCB within the
    /// policy's margin of its minimum: a verifier reports it (joinsvc logs
    /// and counts it as an attestation result of status warning).
    pub warnings: Vec<String>,
    /// The signed reference-value set the measurements matched, as the
    /// validator that appraised them against the live sets says it
    /// (`confboot_appraisal::reference::sets::SetsValidator`); `None` when no set appraised
    /// them (a measurement policy, or another variant's policy, did).
    pub set_verdict: Option<SetVerdict>,
}

/// A signed reference-value set's name and version, as messages and
/// metrics show it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetName {
    /// The image's name.
    pub name: String,
    /// The image's version.
    pub version: String,
}

impl fmt::Display for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.version)
    }
}

/// An admission by a signed reference-value set: the set matched, and the
/// warnings, if any (a set near its not-after).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetVerdict {
    /// The set the measurements match.
    pub set: SetName,
    /// Why the admission is a warning (empty: affirming).
    pub warnings: Vec<String>,
}

impl SetVerdict {
    /// Whether the admission comes with a warning.
    pub fn is_warning(&self) -> bool {
        !self.warnings.is_empty()
    }
}

/// Why evidence could not be issued or was refused.
///
/// Each category but the two structured ones carries a [`Detail`]: the
/// refusing crate's typed reason (which check refused) and the text a user
/// reads. Callers branch on the category, or ask the detail for the
/// reason ([`Detail::reason`], [`Detail::is`]); the text is for people.
///
/// Exhaustive on purpose: an attestation result maps every refusal to the
/// trust claim it is about (`confboot_appraisal::ear`), so a new kind of
/// refusal must be mapped where it is matched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttestationError {
    /// The evidence cannot be decoded: truncated, oversized, fields missing.
    #[error("malformed evidence: {0}")]
    Decode(Detail),
    /// A signature over the evidence (quote, report, certificate) does not verify.
    #[error("signature check failed: {0}")]
    Signature(Detail),
    /// The evidence is not bound to this handshake's `extra_data` (stale or replayed).
    #[error("evidence not bound to this handshake: {0}")]
    Binding(Detail),
    /// The signing key is not trusted (AK not pinned, certificate chain broken).
    #[error("untrusted signing key: {0}")]
    Trust(Detail),
    /// An enforced measurement differs from the policy.
    #[error("measurement {index} differs: expected {expected}, actual {actual}{}", first_difference(event.as_deref()))]
    Measurement {
        /// Measurement index (PCR number; 0 for the SEV-SNP launch measurement).
        index: u32,
        /// Expected value, lowercase hex.
        expected: String,
        /// Actual value, lowercase hex.
        actual: String,
        /// The first event of the node's event log that differs from the
        /// expected log (`confboot_tpm::event_log::EventList::explain`),
        /// when both logs are known.
        event: Option<String>,
    },
    /// The evidence's event log is malformed or does not replay to the
    /// quoted PCRs.
    #[error("event log refused: {0}")]
    EventLog(Detail),
    /// Another policy rule was violated (debug enabled, VMPL, TCB below minimum, ...).
    #[error("policy violated: {0}")]
    Policy(Detail),
    /// The evidence is of another variant than the validator's.
    #[error("evidence variant {actual} where {expected} is required")]
    WrongVariant {
        /// What the validator checks.
        expected: Variant,
        /// What was presented.
        actual: String,
    },
    /// The issuer could not produce evidence (device missing, TPM error).
    #[error("cannot issue evidence: {0}")]
    Issue(Detail),
}

/// Which check refused, as the refusing crate names it: a type of its own,
/// usually a fieldless enum with one variant per check
/// (`confboot_vtpm::VtpmRefusal`, `confboot_snp::SnpRefusal`, ...).
///
/// Every `'static` type with equality is one (a blanket implementation);
/// the trait only lets a [`Detail`] compare two reasons of unknown types.
pub trait Reason: Any + Send + Sync {
    /// Whether `other` is this very reason (same type, equal value).
    fn same(&self, other: &dyn Reason) -> bool;
}

impl<T: Any + PartialEq + Send + Sync> Reason for T {
    fn same(&self, other: &dyn Reason) -> bool {
        (other as &dyn Any).downcast_ref::<T>() == Some(self)
    }
}

/// The detail of an [`AttestationError`]: the typed [`Reason`] of the crate
/// that refused, and the human text, built once at the refusal.
///
/// The reason is held as `&'static dyn Reason` and read back by its type
/// ([`Detail::reason`], an [`Any`] downcast). A neutral enum here that
/// wrapped every crate's reason would have to name them, and this crate
/// sits below the variants, which depend on it and never on each other;
/// with a downcast each variant keeps its reasons to itself, a new variant
/// needs no change here, and a reason costs one pointer and no allocation
/// (reasons are fieldless, so a `&'static` of one is a constant).
///
/// Two details are equal when their reasons and their texts are.
#[derive(Clone)]
pub struct Detail {
    reason: &'static dyn Reason,
    text: String,
}

impl Detail {
    /// A detail of `reason` with the text a user reads.
    pub fn with<R: Reason>(reason: &'static R, text: impl Into<String>) -> Detail {
        Detail {
            reason,
            text: text.into(),
        }
    }

    /// The reason, if it is an `R`.
    pub fn reason<R: Reason>(&self) -> Option<&'static R> {
        let reason: &'static dyn Any = self.reason;
        reason.downcast_ref::<R>()
    }

    /// Whether the reason is `reason`.
    pub fn is<R: Reason>(&self, reason: &R) -> bool {
        reason.same(self.reason)
    }

    /// The text a user reads (what the error's message shows).
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Detail {
    fn eq(&self, other: &Detail) -> bool {
        self.text == other.text && self.reason.same(other.reason)
    }
}

impl Eq for Detail {}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Detail {
    /// The text only: the reason's type is erased, and a `Debug` bound on
    /// every reason would put its names into every binary that links a
    /// validator.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Detail").field(&self.text).finish()
    }
}

/// The refusals this crate makes itself: the shared check vocabulary's and
/// the configfs-tsm transport's (every one an [`AttestationError::Issue`]
/// but [`AttestRefusal::CheckNotPerformed`], a policy refusal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttestRefusal {
    /// A check of a list was skipped, so the list does not admit
    /// ([`check::first_failure`]).
    CheckNotPerformed,
    /// The configfs-tsm report directory is missing (no kernel support, no
    /// guest driver, configfs not mounted).
    TsmMissing,
    /// A configfs-tsm request could not be made or read (a directory, an
    /// attribute file, a blob).
    TsmIo,
    /// The configfs-tsm provider is another one than the issuer's.
    TsmProvider,
    /// The configfs-tsm generation counter cannot be read.
    TsmGeneration,
    /// Someone else wrote the same configfs-tsm report during the request.
    TsmRace,
}

impl AttestationError {
    /// The detail, for every category that carries one.
    pub fn detail(&self) -> Option<&Detail> {
        match self {
            AttestationError::Decode(d)
            | AttestationError::Signature(d)
            | AttestationError::Binding(d)
            | AttestationError::Trust(d)
            | AttestationError::EventLog(d)
            | AttestationError::Policy(d)
            | AttestationError::Issue(d) => Some(d),
            AttestationError::Measurement { .. } | AttestationError::WrongVariant { .. } => None,
        }
    }

    /// Whether the detail's reason is `reason` (never, for the categories
    /// without a detail).
    pub fn is<R: Reason>(&self, reason: &R) -> bool {
        self.detail().is_some_and(|d| d.is(reason))
    }
}

/// The end of a [`AttestationError::Measurement`] message: `; ` and the
/// first event that differs, when it is known.
fn first_difference(event: Option<&str>) -> String {
    event.map(|event| format!("; {event}")).unwrap_or_default()
}

/// Produces evidence of what this machine runs, bound to `extra_data`.
pub trait Issuer: Send + Sync {
    /// The variant of the evidence this issuer produces.
    fn variant(&self) -> Variant;
    /// Produces evidence whose signed part carries `extra_data`.
    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError>;
}

/// Checks evidence: its signatures, its binding to `extra_data`, the trust in
/// its signing key, and the measurement policy. Fails closed.
pub trait Validator: Send + Sync {
    /// The variant this validator accepts.
    fn variant(&self) -> Variant;
    /// Validates `evidence` against `extra_data` and the policy.
    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError>;

    /// Validates `evidence` as [`Validator::validate`] does, given the
    /// signed reference-value set its sender presented beside it (public:
    /// it proves nothing until a release key the validator pins verifies
    /// it, see `confboot_verifier::join_service::PresentedSetValidator`). By default the set
    /// is ignored, so only the validator's own policy admits.
    fn validate_presented(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
        presented: Option<&[u8]>,
    ) -> Result<Attested, AttestationError> {
        let _ = presented;
        self.validate(evidence, extra_data)
    }
}

/// A validator that can be replaced at run time without restarting a server.
///
/// Each call to [`SwappableValidator::current`] returns one whole validator,
/// so a handshake that took it sees one consistent policy even while a swap
/// happens.
#[derive(Clone)]
pub struct SwappableValidator {
    inner: Arc<RwLock<Arc<dyn Validator>>>,
}

impl SwappableValidator {
    /// Wraps the first validator.
    pub fn new(validator: Arc<dyn Validator>) -> Self {
        SwappableValidator {
            inner: Arc::new(RwLock::new(validator)),
        }
    }

    /// The validator in force now.
    pub fn current(&self) -> Arc<dyn Validator> {
        match self.inner.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the validator; handshakes that start afterwards use the new one.
    pub fn swap(&self, validator: Arc<dyn Validator>) {
        match self.inner.write() {
            Ok(mut g) => *g = validator,
            Err(poisoned) => *poisoned.into_inner() = validator,
        }
    }
}

impl Validator for SwappableValidator {
    fn variant(&self) -> Variant {
        self.current().variant()
    }

    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        self.current().validate(evidence, extra_data)
    }

    fn validate_presented(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
        presented: Option<&[u8]>,
    ) -> Result<Attested, AttestationError> {
        self.current()
            .validate_presented(evidence, extra_data, presented)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Result<u32, AttestationError>);

    #[derive(PartialEq)]
    enum TestRefusal {
        No,
        Alone,
        Other,
    }

    #[test]
    fn a_detail_gives_its_reason_back_by_type() {
        let e = AttestationError::Policy(Detail::with(&TestRefusal::No, "no"));
        let d = e.detail().unwrap();
        assert!(d.reason::<TestRefusal>() == Some(&TestRefusal::No));
        assert!(d.reason::<AttestRefusal>().is_none());
        assert!(e.is(&TestRefusal::No) && !e.is(&TestRefusal::Other));
        assert_eq!(e.to_string(), "policy violated: no");
        assert_ne!(
            e,
            AttestationError::Policy(Detail::with(&TestRefusal::Other, "no"))
        );
        assert_ne!(
            e,
            AttestationError::Policy(Detail::with(&AttestRefusal::TsmRace, "no"))
        );
        assert_ne!(
            e,
            AttestationError::Policy(Detail::with(&TestRefusal::No, "yes"))
        );
    }

    impl Validator for Fixed {
        fn variant(&self) -> Variant {
            Variant::QemuVtpm
        }
        fn validate(&self, _: &[u8], _: &[u8; 32]) -> Result<Attested, AttestationError> {
            self.0.clone().map(|i| Attested {
                set_verdict: None,
                warnings: Vec::new(),
                variant: Variant::QemuVtpm,
                measurements: BTreeMap::from([(i, vec![0; 32])]),
            })
        }
    }

    #[test]
    fn variants_round_trip_by_name_and_oid() {
        for v in Variant::ALL {
            assert_eq!(Variant::from_name(v.name()), Some(v));
            assert_eq!(Variant::from_oid(v.oid()), Some(v));
            let dotted: Vec<String> = v.oid_arcs().iter().map(|a| a.to_string()).collect();
            assert_eq!(dotted.join("."), v.oid());
        }
        assert_eq!(
            Variant::from_name("azure-sev-snp"),
            Some(Variant::AzureSevSnp)
        );
        assert_eq!(
            Variant::from_oid("1.3.9900.4.1"),
            Some(Variant::AzureSevSnp)
        );
        assert_eq!(Variant::from_name("azure-tdx"), None);
    }

    #[test]
    fn swap_takes_effect_for_the_next_call() {
        let s = SwappableValidator::new(Arc::new(Fixed(Ok(1))));
        let held = s.current();
        assert!(s.validate(b"", &[0; 32]).is_ok());
        let no = || AttestationError::Policy(Detail::with(&TestRefusal::No, "no"));
        s.swap(Arc::new(Fixed(Err(no()))));
        assert_eq!(s.validate(b"", &[0; 32]), Err(no()));
        // A validator taken before the swap stays whole.
        assert!(held.validate(b"", &[0; 32]).is_ok());
    }

    /// Blocks in `validate` until `peers` calls are inside it at once.
    struct Rendezvous {
        inside: std::sync::Mutex<usize>,
        all_in: std::sync::Condvar,
        peers: usize,
    }

    impl Validator for Rendezvous {
        fn variant(&self) -> Variant {
            Variant::QemuVtpm
        }
        fn validate(&self, _: &[u8], _: &[u8; 32]) -> Result<Attested, AttestationError> {
            let mut inside = self.inside.lock().unwrap();
            *inside += 1;
            self.all_in.notify_all();
            // Only a guard against a hang: a serializing wrapper never
            // lets the second call in, and the wait ends with an error.
            let (inside, _) = self
                .all_in
                .wait_timeout_while(inside, std::time::Duration::from_secs(60), |n| {
                    *n < self.peers
                })
                .unwrap();
            if *inside < self.peers {
                return Err(AttestationError::Policy(Detail::with(
                    &TestRefusal::Alone,
                    "validated alone",
                )));
            }
            Ok(Attested {
                set_verdict: None,
                warnings: Vec::new(),
                variant: Variant::QemuVtpm,
                measurements: BTreeMap::new(),
            })
        }
    }

    #[test]
    fn a_swappable_validator_validates_on_several_threads_at_once() {
        let s = SwappableValidator::new(Arc::new(Rendezvous {
            inside: std::sync::Mutex::new(0),
            all_in: std::sync::Condvar::new(),
            peers: 2,
        }));
        let calls: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || s.validate(b"", &[0; 32]))
            })
            .collect();
        for c in calls {
            assert!(c.join().unwrap().is_ok(), "both calls were inside at once");
        }
    }
}
