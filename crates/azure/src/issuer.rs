//! [`AzureIssuer`]: the evidence of an Azure confidential VM, read as the
//! VM has it: the HCL report from the paravisor vTPM's NV index
//! [`HCL_REPORT_NV_INDEX`], and a quote of every SHA-256 PCR by the
//! attestation key the report's runtime claims name (`HCLAkPub`, persisted
//! by the paravisor at [`AZURE_AK_HANDLE`]), with `extra_data` as its
//! qualifying data.
//!
//! The report is read as the paravisor left it (at boot): the session's
//! binding is the quote's nonce, which the validator checks; the report
//! binds the key that signs the quote. What verifies the SEV-SNP report
//! (the VCEK and its chain) is the caller's to give
//! ([`AzureIssuer::with_vcek_chain`]: on Azure the host's certificate
//! service hands it out, and the validator checks it against its pinned
//! ARKs whatever its source); without it the validator looks the VCEK up
//! in its own cache.

use std::sync::Mutex;

use confboot_attest::{AttestationError, Detail, EXTRA_DATA_LEN, Issuer, Variant};
use confboot_tpm::structures::PCR_COUNT;
use confboot_tpm::{Tpm, TpmError};

use crate::evidence::{AzureEvidence, TpmQuote, encode_evidence};
use crate::hcl::{HCL_REPORT_NV_INDEX, HardwareKind, HclReport};
use crate::{AzureRefusal, MAX_HCL_REPORT_LEN};

/// Where Azure's paravisor persists the vTPM's attestation key.
pub const AZURE_AK_HANDLE: u32 = 0x8100_0003;

/// How often [`AzureIssuer::issue`] quotes again when a PCR changed
/// between the quote and the PCR read.
const ISSUE_ATTEMPTS: usize = 3;

/// A TPM the issuer can use: its own connection, or one it shares (the
/// bootstrapper's vTPM issuer holds the only connection a swtpm socket
/// takes, and lends it).
pub trait TpmAccess: Send + Sync {
    /// Runs `f` with the TPM, exclusively.
    fn with_tpm(&self, f: &mut dyn FnMut(&mut Tpm) -> Result<(), TpmError>)
    -> Result<(), TpmError>;
}

impl TpmAccess for Mutex<Tpm> {
    fn with_tpm(
        &self,
        f: &mut dyn FnMut(&mut Tpm) -> Result<(), TpmError>,
    ) -> Result<(), TpmError> {
        let mut tpm = self.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut tpm)
    }
}

/// Produces `azure-sev-snp` evidence from the paravisor's vTPM.
pub struct AzureIssuer<T: TpmAccess> {
    tpm: T,
    ak_handle: u32,
    vcek_chain: Vec<Vec<u8>>,
}

fn issue_err(what: &str, e: impl std::fmt::Display) -> AttestationError {
    AttestationError::Issue(Detail::with(&AzureRefusal::Issue, format!("{what}: {e}")))
}

impl<T: TpmAccess> AzureIssuer<T> {
    /// An issuer over `tpm`, quoting with the key at [`AZURE_AK_HANDLE`].
    pub fn new(tpm: T) -> AzureIssuer<T> {
        AzureIssuer {
            tpm,
            ak_handle: AZURE_AK_HANDLE,
            vcek_chain: Vec::new(),
        }
    }

    /// Quotes with the key at `handle` instead.
    pub fn with_ak_handle(mut self, handle: u32) -> AzureIssuer<T> {
        self.ak_handle = handle;
        self
    }

    /// Sends `chain` (DER, VCEK first) with every evidence.
    pub fn with_vcek_chain(mut self, chain: Vec<Vec<u8>>) -> AzureIssuer<T> {
        self.vcek_chain = chain;
        self
    }

    /// The HCL report and a quote whose PCR values match its digest.
    fn read(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<AzureEvidence, AttestationError> {
        let pcrs: Vec<u32> = (0..PCR_COUNT as u32).collect();
        let mut out = None;
        let mut failure = None;
        let ak = self.ak_handle;
        self.tpm
            .with_tpm(&mut |tpm| {
                let report = tpm.nv_read(HCL_REPORT_NV_INDEX)?;
                for _ in 0..ISSUE_ATTEMPTS {
                    let quote = tpm.quote_rsassa(ak, extra_data, &pcrs)?;
                    let values = tpm.pcr_read(&pcrs)?;
                    let digest = confboot_tpm::pcr_digest(values.iter().map(|(_, v)| v.as_slice()));
                    let info = confboot_tpm::structures::parse_quote_attest(&quote.attest)?;
                    if info.pcr_digest == digest {
                        out = Some((report, quote, values));
                        return Ok(());
                    }
                    log::debug!("a PCR changed between the quote and the PCR read; quoting again");
                }
                failure = Some("the PCRs kept changing while they were quoted");
                Ok(())
            })
            .map_err(|e| issue_err("the vTPM", e))?;
        let Some((hcl_report, quote, values)) = out else {
            return Err(issue_err("the vTPM", failure.unwrap_or("no quote")));
        };
        if hcl_report.len() > MAX_HCL_REPORT_LEN {
            return Err(issue_err("the HCL report", "larger than any report"));
        }
        match HclReport::parse(&hcl_report) {
            Ok(r) if r.kind == HardwareKind::SevSnp => {}
            Ok(r) => {
                return Err(issue_err(
                    "the HCL report",
                    format!("carries a {} report, not SEV-SNP", r.kind.name()),
                ));
            }
            Err(e) => return Err(issue_err("the HCL report", e)),
        }
        let tpm_quote = TpmQuote::new(
            quote.attest,
            quote.signature,
            values.into_iter().map(|(_, v)| v.to_vec()).collect(),
        )
        .map_err(|e| issue_err("the quote", e))?;
        Ok(AzureEvidence {
            hcl_report,
            tpm_quote,
            vcek_chain: self.vcek_chain.clone(),
            td_quote: None,
        })
    }
}

impl<T: TpmAccess> Issuer for AzureIssuer<T> {
    fn variant(&self) -> Variant {
        Variant::AzureSevSnp
    }

    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        Ok(encode_evidence(&self.read(extra_data)?))
    }
}
