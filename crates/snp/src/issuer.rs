//! Issuing `sev-snp` evidence: [`SnpIssuer`] binds `extra_data` into
//! `REPORT_DATA`, asks a [`SnpReportSource`] for the report and the host's
//! certificate table, checks what came back and encodes [`SnpEvidence`].
//!
//! The hardware is reached through the kernel's configfs-tsm interface
//! ([`ConfigfsTsmSource`], `/sys/kernel/config/tsm/report`) rather than the
//! `/dev/sev-guest` ioctls of the `sev` crate:
//! - the certificate table is written by the host, the adversary. Through
//!   configfs-tsm it arrives as plain bytes (`auxblob`) that confboot reads
//!   bounded and parses itself, in safe code that is fuzzed
//!   ([`super::cert_table`]); the `sev` crate's extended-report path sizes
//!   its buffer by the length the host asks for and walks the table with
//!   raw pointers at host-chosen offsets, without bounds;
//! - it is plain file I/O (no ioctl structures), the interface upstream
//!   Linux (6.7 on) offers for every confidential-computing vendor, and its
//!   `generation` counter detects a concurrent writer of the same report.
//!
//! The cost: kernels before 6.7 have no configfs-tsm, and configfs must be
//! mounted (`mount -t configfs none /sys/kernel/config`).

use std::path::Path;

use super::cert_table;
use super::evidence::{CertEntry, SnpEvidence};
use super::report::{REPORT_LEN, SnpReport};
use crate::SnpRefusal;
use confboot_attest::tsm::{TsmReports, TsmRequest};
use confboot_attest::{AttestationError, Detail, EXTRA_DATA_LEN, Issuer, Variant};

/// Where a source gets a report: for given `REPORT_DATA` at a VMPL, with
/// the host's certificate table (possibly empty).
pub trait SnpReportSource: Send + Sync {
    /// Requests a report. Returns the raw report and the raw certificate
    /// table as the host wrote it (empty when it provides none); the issuer
    /// checks and parses both.
    fn report(&self, report_data: [u8; 64], vmpl: u32) -> Result<RawReport, AttestationError>;
}

/// What a [`SnpReportSource`] returns, unchecked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawReport {
    /// The report bytes.
    pub report: Vec<u8>,
    /// The certificate table bytes (GHCB layout, see [`cert_table`]).
    pub cert_table: Vec<u8>,
}

/// Issues `sev-snp` evidence from a [`SnpReportSource`].
pub struct SnpIssuer<S: SnpReportSource> {
    source: S,
    vmpl: u32,
}

impl<S: SnpReportSource> SnpIssuer<S> {
    /// An issuer asking `source` for reports at `vmpl` (a guest's kernel
    /// usually runs at VMPL 0).
    pub fn new(source: S, vmpl: u32) -> Self {
        SnpIssuer { source, vmpl }
    }
}

impl SnpIssuer<ConfigfsTsmSource> {
    /// An issuer on the kernel's configfs-tsm interface at VMPL 0.
    pub fn open_default() -> Result<Self, AttestationError> {
        Ok(SnpIssuer::new(ConfigfsTsmSource::open_default()?, 0))
    }
}

impl<S: SnpReportSource> Issuer for SnpIssuer<S> {
    fn variant(&self) -> Variant {
        Variant::SevSnp
    }

    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        let mut report_data = [0u8; 64];
        report_data[..EXTRA_DATA_LEN].copy_from_slice(extra_data);
        let raw = self.source.report(report_data, self.vmpl)?;
        let report = SnpReport::from_bytes(&raw.report).map_err(|e| {
            AttestationError::Issue(Detail::with(
                &SnpRefusal::Device,
                format!("the SNP device answered: {e}"),
            ))
        })?;
        if report.report_data() != report_data.as_slice() {
            return Err(AttestationError::Issue(Detail::with(
                &SnpRefusal::DeviceReportData,
                "the SNP device returned a report for other report data",
            )));
        }
        if report.vmpl() != self.vmpl {
            return Err(AttestationError::Issue(Detail::with(
                &SnpRefusal::DeviceVmpl,
                format!(
                    "the SNP device returned a report for VMPL {}, not {}",
                    report.vmpl(),
                    self.vmpl
                ),
            )));
        }
        let certificates: Vec<CertEntry> = cert_table::parse(&raw.cert_table).map_err(|e| {
            AttestationError::Issue(Detail::with(
                &SnpRefusal::HostCertificates,
                format!("the host's {e}"),
            ))
        })?;
        SnpEvidence {
            report,
            certificates,
        }
        .encode()
    }
}

pub use confboot_attest::tsm::TSM_REPORT_DIR;

/// Largest `outblob` read (a report is [`REPORT_LEN`] bytes).
const MAX_OUTBLOB_LEN: u64 = 4096;

/// Reports through the kernel's configfs-tsm interface
/// ([`confboot_attest::tsm`]): `inblob` ← report data, `privlevel` ← VMPL, then
/// `outblob` → report and `auxblob` → certificate table.
///
/// This is the thin hardware adapter: it needs an SEV-SNP guest and is not
/// exercised by the tests here (the build machines have no SNP hardware);
/// everything it returns is checked by [`SnpIssuer`], which the tests run
/// on other sources.
#[derive(Debug)]
pub struct ConfigfsTsmSource {
    reports: TsmReports,
}

impl ConfigfsTsmSource {
    /// The source at [`TSM_REPORT_DIR`]; fails unless it exists.
    pub fn open_default() -> Result<ConfigfsTsmSource, AttestationError> {
        ConfigfsTsmSource::open(Path::new(TSM_REPORT_DIR))
    }

    /// The source at `root` (a configfs-tsm report directory).
    pub fn open(root: &Path) -> Result<ConfigfsTsmSource, AttestationError> {
        Ok(ConfigfsTsmSource {
            reports: TsmReports::open(root, "sev_guest", "an SEV-SNP guest")?,
        })
    }
}

impl SnpReportSource for ConfigfsTsmSource {
    fn report(&self, report_data: [u8; 64], vmpl: u32) -> Result<RawReport, AttestationError> {
        let answer = self.reports.request(&TsmRequest {
            report_data,
            privlevel: Some(vmpl),
            outblob_limit: MAX_OUTBLOB_LEN,
            auxblob_limit: Some(cert_table::MAX_TABLE_LEN as u64),
        })?;
        if answer.outblob.len() != REPORT_LEN {
            return Err(AttestationError::Issue(Detail::with(
                &SnpRefusal::Device,
                format!(
                    "configfs-tsm outblob has {} bytes, want {REPORT_LEN}",
                    answer.outblob.len()
                ),
            )));
        }
        Ok(RawReport {
            report: answer.outblob,
            cert_table: answer.auxblob,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CertKind, REPORT_LEN};
    use std::sync::Mutex;

    /// Answers with a fixed report (report data and VMPL patched in as
    /// asked, unless told otherwise) and a fixed table.
    struct Fixed {
        table: Vec<u8>,
        other_vmpl: Option<u32>,
        asked: Mutex<Vec<([u8; 64], u32)>>,
    }

    impl SnpReportSource for Fixed {
        fn report(&self, report_data: [u8; 64], vmpl: u32) -> Result<RawReport, AttestationError> {
            self.asked.lock().unwrap().push((report_data, vmpl));
            let mut report = vec![0u8; REPORT_LEN];
            report[0] = 3;
            report[0x50..0x90].copy_from_slice(&report_data);
            let vmpl = self.other_vmpl.unwrap_or(vmpl);
            report[0x30..0x34].copy_from_slice(&vmpl.to_le_bytes());
            Ok(RawReport {
                report,
                cert_table: self.table.clone(),
            })
        }
    }

    fn fixed(table: Vec<u8>) -> Fixed {
        Fixed {
            table,
            other_vmpl: None,
            asked: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn binds_extra_data_and_carries_the_parsed_table() {
        let certs = vec![CertEntry {
            kind: CertKind::Vcek,
            der: b"vcek".to_vec(),
        }];
        let issuer = SnpIssuer::new(fixed(cert_table::encode(&certs)), 2);
        let evidence = SnpEvidence::decode(&issuer.issue(&[7; 32]).unwrap()).unwrap();
        let mut want = [0u8; 64];
        want[..32].copy_from_slice(&[7; 32]);
        assert_eq!(evidence.report.report_data(), want.as_slice());
        assert_eq!(evidence.certificates, certs);
        assert_eq!(issuer.source.asked.lock().unwrap()[0], (want, 2));
    }

    #[test]
    fn a_bad_table_or_a_report_for_another_vmpl_is_refused() {
        let mut table = cert_table::encode(&[CertEntry {
            kind: CertKind::Vcek,
            der: b"vcek".to_vec(),
        }]);
        table[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = SnpIssuer::new(fixed(table), 0).issue(&[1; 32]).unwrap_err();
        assert!(
            matches!(&err, AttestationError::Issue(d)
                if d.is(&SnpRefusal::HostCertificates) && d.text().contains("entry 0")),
            "{err}"
        );
        let mut source = fixed(Vec::new());
        source.other_vmpl = Some(1);
        let err = SnpIssuer::new(source, 0).issue(&[1; 32]).unwrap_err();
        assert_eq!(
            err,
            AttestationError::Issue(Detail::with(
                &SnpRefusal::DeviceVmpl,
                "the SNP device returned a report for VMPL 1, not 0"
            ))
        );
    }

    #[test]
    fn configfs_tsm_is_refused_where_it_is_missing() {
        let err = ConfigfsTsmSource::open(Path::new("/nonexistent/tsm/report")).unwrap_err();
        assert!(
            matches!(&err, AttestationError::Issue(d)
                if d.is(&confboot_attest::AttestRefusal::TsmMissing) && d.text().contains("6.7")),
            "{err}"
        );
    }
}
