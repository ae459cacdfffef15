//! The Azure confidential-VM variants, SEV-SNP and TDX: a hardware report
//! vouches for the paravisor's vTPM, whose quote carries the image's
//! measurements.
//!
//! On an Azure confidential VM the paravisor (the HCL) leaves an HCL report
//! in the vTPM's NV index [`HCL_REPORT_NV_INDEX`] ([`HclReport`]): the
//! hardware report (an SEV-SNP report signed by the VCEK, or a TDREPORT
//! that the TD quote signs), whose `REPORT_DATA` is SHA-256 of the runtime
//! claims ([`RuntimeClaims`], JSON), which carry the vTPM's attestation
//! key `HCLAkPub`. The vTPM quote signed by that key carries the PCRs and
//! the nonce. [`AzureValidator`] checks, failing closed, one function per
//! check ([`check`]; refusals name an [`AzureRefusal`]):
//!
//! 1. the HCL report parses and carries the variant's hardware report;
//! 2. the hardware report's own checks, by the SEV-SNP crate (VCEK → ASK →
//!    ARK pinned, validity at the caller's time, signature, chip id, TCB,
//!    VMPL, debug, measurement or ID key…) or the TDX crate (PCK chain to
//!    the pinned Intel root, QE report, quote signature, TCB info and QE
//!    identity from Intel's collateral, MRTD…), less their report-data
//!    check, which the next replaces;
//! 3. `REPORT_DATA` = SHA-256(runtime claims) ‖ 32 zero bytes; for TDX
//!    also the HCL report's TDREPORT names the TD quote's `REPORTDATA`
//!    and `MRTD`;
//! 4. `HCLAkPub` is one RSA signing key of 2048 to 4096 bits;
//! 5. the vTPM quote is a `TPMS_ATTEST` over one SHA-256 bank, signed
//!    RSASSA-PKCS1-v1_5/SHA-256 by `HCLAkPub`;
//! 6. its `extraData` is the session's nonce;
//! 7. SHA-256 of the PCR values is its `pcrDigest`;
//! 8. the PCRs match the policy.
//!
//! What cannot be checked offline: for TDX, the TCB status needs Intel's
//! collateral (TCB info and QE identity for the platform's FMSPC, signed
//! by Intel's TCB signing key, and the root and PCK CRLs); without it those
//! checks are skipped, and a skipped check refuses: the recorded TDX sample
//! comes with none, so its verdict is a refusal that names them. Neither variant consults AMD's or Intel's
//! revocation lists unless given. The vTPM's AK certificate (NV
//! `0x01C101D0`) is not used: the AK is trusted only through the hardware
//! report's binding of the runtime claims.
//!
//! ## Verdicts of the recorded samples
//!
//! The samples in `testdata/` (from the Confidential Containers verifier,
//! byte for byte, with their `PROVENANCE.md`), as `tests/azure.rs` checks
//! them, each with a policy that pins its launch measurement (SEV-SNP) or
//! MRTD (TDX) and its PCRs 4 and 9, at 2026-12-01:
//!
//! | sample | hardware | nonce | verdict |
//! |---|---|---|---|
//! | `azure-snp/hcl-report.bin` + `tpm-quote-v1.json` + `vcek.pem` | Milan, TCB 3/0/8/115 | `challenge` | admitted |
//! | `azure-snp/hcl-report.bin` + `quote.bin` + `vcek.pem` | the same, other quote encoding | `challenge` | admitted |
//! | `azure-snp/evidence-v0.json` | Milan, TCB 4/0/24/219 | `challenge` | admitted |
//! | `azure-snp/evidence-v1.json` | the same VM, DER VCEK | `challenge` | admitted |
//! | `azure-snp/evidence-v2.json` | Milan, TCB 4/0/24/219 | 48 bytes `982f5c6e…` | admitted |
//! | `azure-snp/evidence-genoa.json` | Genoa, TCB 10/0/23/84 | 48 bytes `0218488b…` | admitted |
//! | `azure-tdx/hcl-report.bin` + `td-quote.bin` + `tpm-quote-v1.json` | TDX, FMSPC `00806f050000` | `challenge` | every signature, chain and binding check passes; refused: `root CRL`, `PCK CRL`, `TCB info`, `TDX module`, `TCB status`, `QE identity`, `QE TCB status` not performed (no Intel collateral recorded) |
//! | `azure-tdx/evidence-v0.json`, `evidence-v1.json` | the same report and quote | `challenge` | as above |
//!
//! Each admitted sample is refused, by the check named, with one byte
//! flipped in the SNP report (`report signature`), in the runtime claims
//! (`runtime claims binding`), in the quote message (`vTPM quote
//! signature`), in a PCR value (`PCR digest`); with another sample's VCEK
//! (`chip id` or `report signature`), a chain under another ARK
//! (`certificate chain`), the Genoa sample's quote (`vTPM quote
//! signature`: another AK), another session's nonce (`nonce`) and a PCR
//! policy of another image (`PCRs`).

//! ## On the join path
//!
//! `azure-sev-snp` (`confboot_attest::Variant::AzureSevSnp`, Constellation's
//! name and OID 1.3.9900.4.1): [`AzureIssuer`] reads the HCL report from
//! the vTPM's NV index and quotes every SHA-256 PCR with the key at
//! [`AZURE_AK_HANDLE`], the session's `extra_data` as the nonce, and
//! encodes the evidence as [`encode_evidence`] says; [`AzureSnpValidator`]
//! runs every check above on it with `extra_data` as the nonce, under an
//! [`AzureSnpPolicy`] (the paravisor's SEV-SNP launch, and PCRs 4 and 9,
//! which pin the image), and reports the PCRs, whose PCR 15 is the cluster
//! mark the caller reads. These are verified end to end only by evidence
//! made for the tests (a test ARK, a swtpm that holds the indices); the
//! recorded samples are the oracle of the checks themselves.

mod claims;
mod evidence;
mod hcl;
mod issuer;
mod policy;
mod refusal;
mod verify;

pub use claims::{
    AK_KID, ClaimsError, Jwk, MAX_CLAIMS_LEN, MAX_KEYS, MAX_RSA_MODULUS_LEN, MIN_RSA_MODULUS_LEN,
    RsaPublicKey, RuntimeClaims, VmConfiguration,
};
pub use evidence::{
    AzureEvidence, EvidenceError, MAX_BLOB_LEN, MAX_EVIDENCE_JSON_LEN, MAX_PCRS,
    MAX_QUOTE_PART_LEN, TpmQuote, encode_evidence, read_evidence_json,
};
pub use hcl::{
    HARDWARE_REPORT_AREA, HARDWARE_REPORT_OFFSET, HASH_TYPE_SHA256, HCL_MAGIC, HCL_REPORT_NV_INDEX,
    HardwareKind, HclError, HclReport, IGVM_HEADER_LEN, IGVM_HEADER_OFFSET, MAX_HCL_REPORT_LEN,
    REPORT_TYPE_SNP, REPORT_TYPE_TDX, TD_REPORT_LEN, VARIABLE_DATA_OFFSET, td_report,
};
pub use issuer::{AZURE_AK_HANDLE, AzureIssuer, TpmAccess};
pub use policy::{AZURE_IMAGE_PCRS, AzureSnpPolicy};
pub use refusal::AzureRefusal;
pub use verify::{Hardware, Nonce, check, run_checks};

use confboot_attest::check::{CheckResult, first_failure};
use confboot_attest::measurements::MeasurementPolicy;
use confboot_attest::{AttestationError, Attested, Detail, EXTRA_DATA_LEN, Validator, Variant};
use confboot_snp::SnpValidator;

/// Verifies Azure confidential-VM evidence: the hardware report by its
/// variant's validator, the vTPM quote by the attestation key the report
/// binds, the PCRs by a policy.
#[derive(Clone, Debug)]
pub struct AzureValidator {
    hardware: Hardware,
    pcrs: MeasurementPolicy,
}

impl AzureValidator {
    /// A validator of `hardware`'s kind with the expected PCRs `pcrs`.
    /// The time certificates are checked at is the hardware validator's
    /// (`as_of` on it, for recorded evidence).
    pub fn new(hardware: Hardware, pcrs: MeasurementPolicy) -> AzureValidator {
        AzureValidator { hardware, pcrs }
    }

    /// The hardware report's validator.
    pub fn hardware(&self) -> &Hardware {
        &self.hardware
    }

    /// The expected PCRs.
    pub fn pcrs(&self) -> &MeasurementPolicy {
        &self.pcrs
    }

    /// Every check with its outcome ([`run_checks`]).
    pub fn verify_detailed(&self, evidence: &AzureEvidence, nonce: &Nonce) -> Vec<CheckResult> {
        run_checks(evidence, &self.hardware, nonce, &self.pcrs)
    }

    /// The verdict: every check must pass (a skipped one refuses).
    pub fn verify(&self, evidence: &AzureEvidence, nonce: &Nonce) -> Result<(), AttestationError> {
        match first_failure(&self.verify_detailed(evidence, nonce)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The `azure-sev-snp` validator of the join path: the evidence as
/// [`AzureIssuer`] encodes it, every check of [`AzureValidator`] with the
/// session's `extra_data` as the quote's nonce, and the PCRs of an
/// [`AzureSnpPolicy`] (PCR 15 left to the caller, which reads the
/// cluster mark from the attested PCRs).
#[derive(Clone, Debug)]
pub struct AzureSnpValidator {
    inner: AzureValidator,
    require_unmarked: bool,
}

impl AzureSnpValidator {
    /// A validator of `policy`, with the roots its SNP part names (its
    /// `rootBundles`, else AMD's built-in roots).
    pub fn new(policy: AzureSnpPolicy) -> Result<AzureSnpValidator, confboot_attest::PolicyError> {
        let snp = SnpValidator::new(policy.snp)?;
        Ok(AzureSnpValidator::with_snp(snp, policy.pcrs))
    }

    /// A validator of an SEV-SNP validator (its policy, roots and time)
    /// and the expected PCRs `pcrs` (PCR 15 dropped).
    pub fn with_snp(snp: SnpValidator, mut pcrs: MeasurementPolicy) -> AzureSnpValidator {
        pcrs.remove(confboot_tpm::CLUSTER_ID_PCR);
        AzureSnpValidator {
            inner: AzureValidator::new(Hardware::SevSnp(Box::new(snp)), pcrs),
            require_unmarked: false,
        }
    }

    /// Whether PCR 15 must be all zero (a node not bootstrapped since it
    /// booted, for a command that sends it the admin's secrets); by
    /// default the caller reads the mark from the attested PCRs.
    pub fn require_unmarked(mut self, required: bool) -> AzureSnpValidator {
        self.require_unmarked = required;
        self
    }

    /// The validator of every check.
    pub fn checks(&self) -> &AzureValidator {
        &self.inner
    }
}

fn decode(e: impl std::fmt::Display) -> AttestationError {
    AttestationError::Decode(Detail::with(&AzureRefusal::Evidence, e.to_string()))
}

impl Validator for AzureSnpValidator {
    fn variant(&self) -> Variant {
        Variant::AzureSevSnp
    }

    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        let evidence = read_evidence_json(evidence).map_err(decode)?;
        if evidence.td_quote.is_some() {
            return Err(decode("azure-sev-snp evidence carries no TD quote"));
        }
        // A quote made for another session is refused before any
        // certificate or signature is verified (every check must pass:
        // the verdict is the same, for the price of a comparison).
        let info = confboot_tpm::structures::parse_quote_attest(&evidence.tpm_quote.message)
            .map_err(|e| {
                AttestationError::Decode(Detail::with(&AzureRefusal::Quote, e.to_string()))
            })?;
        if info.extra_data != extra_data {
            return Err(AttestationError::Binding(Detail::with(
                &AzureRefusal::Nonce,
                "the vTPM quote was made for another session (its extraData is not this \
                 handshake's)",
            )));
        }
        let checks = self
            .inner
            .verify_detailed(&evidence, &Nonce::Expected(extra_data.to_vec()));
        if let Some(e) = first_failure(&checks) {
            return Err(e);
        }
        let measurements = verify::pcr_map(&info, &evidence.tpm_quote);
        if self.require_unmarked
            && measurements.get(&confboot_tpm::CLUSTER_ID_PCR) != Some(&vec![0u8; 32])
        {
            return Err(AttestationError::Policy(Detail::with(
                &AzureRefusal::Marked,
                "PCR 15 is not all zero: the node was bootstrapped since it booted",
            )));
        }
        Ok(Attested {
            variant: Variant::AzureSevSnp,
            measurements,
            warnings: checks
                .iter()
                .filter_map(|c| Some(format!("{}: {}", c.name, c.warning()?)))
                .collect(),
            set_verdict: None,
        })
    }
}
