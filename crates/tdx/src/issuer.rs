//! Issuing `tdx` evidence: [`TdxIssuer`] binds `extra_data` into
//! `REPORTDATA` (zero-padded to 64 bytes, as SEV-SNP's `REPORT_DATA`),
//! asks a [`TdxQuoteSource`] for a quote, checks that the quote is for that
//! report data, and encodes [`TdxEvidence`] with the TD's CCEL log.
//!
//! In a TD the quote comes through the kernel's configfs-tsm interface
//! ([`ConfigfsTsmQuoteSource`]; Linux 6.7 on, provider `tdx_guest`; the
//! kernel asks the host's quoting service through the TDX module). The
//! host relays the quote and could return any bytes: the issuer parses
//! them, bounded, and the verifier checks every signature. The CCEL log is
//! read once, when the issuer is made ([`read_ccel_log`]).

use std::path::Path;

use super::ccel::{CcelLog, CcelTable};
use super::evidence::TdxEvidence;
use super::quote::{MAX_QUOTE_LEN, Quote};
use crate::TdxRefusal;
use confboot_attest::tsm::{TsmReports, TsmRequest};
use confboot_attest::{AttestationError, Detail, EXTRA_DATA_LEN, Issuer, Variant};

pub use confboot_attest::tsm::TSM_REPORT_DIR;
/// The configfs-tsm provider of a TD.
pub const TDX_PROVIDER: &str = "tdx_guest";
/// Where Linux exposes the ACPI CCEL table.
pub const CCEL_TABLE_PATH: &str = "/sys/firmware/acpi/tables/CCEL";
/// Where Linux exposes the CCEL log area.
pub const CCEL_DATA_PATH: &str = "/sys/firmware/acpi/tables/data/CCEL";

/// Where an issuer gets a quote for given `REPORTDATA`.
pub trait TdxQuoteSource: Send + Sync {
    /// Requests a quote; returns its raw bytes, unchecked.
    fn quote(&self, report_data: [u8; 64]) -> Result<Vec<u8>, AttestationError>;
}

/// Issues `tdx` evidence from a [`TdxQuoteSource`].
pub struct TdxIssuer<S: TdxQuoteSource> {
    source: S,
    ccel_log: Vec<u8>,
}

impl<S: TdxQuoteSource> TdxIssuer<S> {
    /// An issuer asking `source` for quotes, sending no event log.
    pub fn new(source: S) -> Self {
        TdxIssuer {
            source,
            ccel_log: Vec::new(),
        }
    }

    /// Sends this CCEL log with every quote (parsed here, its padding cut).
    pub fn with_ccel_log(mut self, log: &CcelLog) -> Self {
        self.ccel_log = log.as_bytes().to_vec();
        self
    }
}

impl TdxIssuer<ConfigfsTsmQuoteSource> {
    /// An issuer on the kernel's configfs-tsm interface, with the CCEL log
    /// the firmware left when there is one (a TD without one attests
    /// without it: its RTMRs then need expected values in the verifier's
    /// policy, never a log).
    pub fn open_default() -> Result<Self, AttestationError> {
        let issuer = TdxIssuer::new(ConfigfsTsmQuoteSource::open(Path::new(TSM_REPORT_DIR))?);
        if !Path::new(CCEL_TABLE_PATH).exists() {
            log::warn!("no CCEL table at {CCEL_TABLE_PATH}: quotes go without an event log");
            return Ok(issuer);
        }
        let log = read_ccel_log(Path::new(CCEL_TABLE_PATH), Path::new(CCEL_DATA_PATH))?;
        log::info!("CCEL event log: {} events", log.events().len());
        Ok(issuer.with_ccel_log(&log))
    }
}

/// Reads the CCEL table at `table` and the log area at `data`: the area is
/// read bounded by the table's length (itself bounded) and parsed.
pub fn read_ccel_log(table: &Path, data: &Path) -> Result<CcelLog, AttestationError> {
    let issue = |e: String| AttestationError::Issue(Detail::with(&TdxRefusal::Ccel, e));
    let table_bytes =
        confboot_util::fs::read_bounded(table, super::ccel::MAX_CCEL_TABLE_LEN as u64)
            .map_err(|e| issue(e.to_string()))?;
    let parsed = CcelTable::parse(&table_bytes).map_err(|e| issue(e.to_string()))?;
    let area = confboot_util::fs::read_bounded(data, parsed.log_area_len)
        .map_err(|e| issue(e.to_string()))?;
    CcelLog::parse(&area).map_err(|e| issue(format!("{}: {e}", data.display())))
}

impl<S: TdxQuoteSource> Issuer for TdxIssuer<S> {
    fn variant(&self) -> Variant {
        Variant::Tdx
    }

    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        let mut report_data = [0u8; 64];
        report_data[..EXTRA_DATA_LEN].copy_from_slice(extra_data);
        let raw = self.source.quote(report_data)?;
        let quote = Quote::parse(&raw).map_err(|e| {
            AttestationError::Issue(Detail::with(
                &TdxRefusal::QuoteSource,
                format!("the TDX quote source answered: {e}"),
            ))
        })?;
        if quote.report.report_data != report_data {
            return Err(AttestationError::Issue(Detail::with(
                &TdxRefusal::QuoteSource,
                "the TDX quote source returned a quote for other report data",
            )));
        }
        TdxEvidence {
            quote: raw,
            ccel_log: self.ccel_log.clone(),
        }
        .encode()
    }
}

/// Quotes through the kernel's configfs-tsm interface ([`confboot_attest::tsm`]):
/// `provider` must say `tdx_guest`; `inblob` ← report data; `outblob` →
/// the quote (read bounded).
#[derive(Debug)]
pub struct ConfigfsTsmQuoteSource {
    reports: TsmReports,
}

impl ConfigfsTsmQuoteSource {
    /// The source at `root` (a configfs-tsm report directory; in a TD
    /// [`TSM_REPORT_DIR`]); fails unless it exists.
    pub fn open(root: &Path) -> Result<ConfigfsTsmQuoteSource, AttestationError> {
        Ok(ConfigfsTsmQuoteSource {
            reports: TsmReports::open(root, TDX_PROVIDER, "a TDX guest")?,
        })
    }

    fn request(report_data: [u8; 64]) -> TsmRequest {
        TsmRequest {
            report_data,
            privlevel: None,
            outblob_limit: MAX_QUOTE_LEN as u64,
            auxblob_limit: None,
        }
    }

    /// One request in `dir`, a report directory as the kernel makes it at
    /// `mkdir` (a test double prepares one the same way).
    pub fn request_in(
        &self,
        dir: &Path,
        report_data: [u8; 64],
    ) -> Result<Vec<u8>, AttestationError> {
        Ok(self
            .reports
            .request_in(dir, &Self::request(report_data))?
            .outblob)
    }
}

impl TdxQuoteSource for ConfigfsTsmQuoteSource {
    fn quote(&self, report_data: [u8; 64]) -> Result<Vec<u8>, AttestationError> {
        Ok(self.reports.request(&Self::request(report_data))?.outblob)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_attest::AttestRefusal;
    use std::io::{Read, Write};
    use std::path::PathBuf;

    /// A configfs-tsm report directory as the kernel makes it, in a temp
    /// directory: `provider`, `generation` (the count of writes the kernel
    /// will have seen once ours is in) and `outblob` a FIFO, whose other
    /// end, like the kernel on the first read, takes what was written to
    /// `inblob` and answers with `answer(inblob)`.
    struct FakeConfigfsTsm {
        dir: PathBuf,
        server: Option<std::thread::JoinHandle<Vec<u8>>>,
    }

    impl FakeConfigfsTsm {
        fn new(
            name: &str,
            provider: &str,
            generation: u64,
            answer: impl FnOnce(&[u8]) -> Vec<u8> + Send + 'static,
        ) -> FakeConfigfsTsm {
            let dir = std::env::temp_dir()
                .join(format!("confboot-fake-tsm-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("provider"), format!("{provider}\n")).unwrap();
            std::fs::write(dir.join("generation"), format!("{generation}\n")).unwrap();
            nix::unistd::mkfifo(&dir.join("outblob"), nix::sys::stat::Mode::S_IRWXU).unwrap();
            let served = dir.clone();
            let server = std::thread::spawn(move || {
                // Opening for writing waits for the reader: by then the
                // issuer has written inblob.
                let mut out = std::fs::OpenOptions::new()
                    .write(true)
                    .open(served.join("outblob"))
                    .unwrap();
                // A request refused before it wrote has no inblob.
                let mut inblob = Vec::new();
                let _ = std::fs::File::open(served.join("inblob"))
                    .and_then(|mut f| f.read_to_end(&mut inblob));
                let _ = out.write_all(&answer(&inblob));
                inblob
            });
            FakeConfigfsTsm {
                dir,
                server: Some(server),
            }
        }

        /// What the issuer wrote to `inblob`.
        fn inblob(mut self) -> Vec<u8> {
            self.server.take().unwrap().join().unwrap()
        }
    }

    impl Drop for FakeConfigfsTsm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A quote-shaped answer: the real v4 quote with `report_data` patched
    /// in (its signature then fails, which is the verifier's business).
    fn quote_for(report_data: &[u8]) -> Vec<u8> {
        let mut q = include_bytes!("../testdata/quote_v4_spr_e4.dat").to_vec();
        q[48 + 520..48 + 584].copy_from_slice(report_data);
        q
    }

    fn source() -> ConfigfsTsmQuoteSource {
        ConfigfsTsmQuoteSource::open(&std::env::temp_dir()).unwrap()
    }

    #[test]
    fn a_quote_through_configfs_tsm_binds_the_extra_data() {
        let fake = FakeConfigfsTsm::new("honest", "tdx_guest", 1, quote_for);
        let mut report_data = [0u8; 64];
        report_data[..32].copy_from_slice(&[7; 32]);
        let quote = source().request_in(&fake.dir, report_data).unwrap();
        assert_eq!(
            Quote::parse(&quote).unwrap().report.report_data,
            report_data
        );
        assert_eq!(fake.inblob(), report_data.to_vec());
    }

    #[test]
    fn another_writer_another_provider_or_an_oversized_outblob_is_refused() {
        let fake = FakeConfigfsTsm::new("generation", "tdx_guest", 2, quote_for);
        let err = source().request_in(&fake.dir, [1; 64]).unwrap_err();
        assert!(
            matches!(&err, AttestationError::Issue(d) if d.is(&AttestRefusal::TsmRace)),
            "{err}"
        );
        drop(fake.inblob());
        let fake = FakeConfigfsTsm::new("provider", "sev_guest", 1, quote_for);
        let err = source().request_in(&fake.dir, [1; 64]).unwrap_err();
        assert!(
            matches!(&err, AttestationError::Issue(d)
                if d.is(&AttestRefusal::TsmProvider) && d.text().contains("not tdx_guest")),
            "{err}"
        );
        // The provider is read first: nothing was written, the FIFO's
        // writer is released by opening it here.
        drop(std::fs::File::open(fake.dir.join("outblob")));
        let fake = FakeConfigfsTsm::new("huge", "tdx_guest", 1, |_| vec![0; MAX_QUOTE_LEN + 1]);
        let err = source().request_in(&fake.dir, [1; 64]).unwrap_err();
        assert!(
            matches!(&err, AttestationError::Issue(d)
                if d.is(&AttestRefusal::TsmIo) && d.text().contains("outblob")),
            "{err}"
        );
        drop(fake.inblob());
    }

    struct Fixed(Vec<u8>);

    impl TdxQuoteSource for Fixed {
        fn quote(&self, _: [u8; 64]) -> Result<Vec<u8>, AttestationError> {
            Ok(self.0.clone())
        }
    }

    #[test]
    fn the_issuer_refuses_a_quote_for_other_report_data_or_no_quote() {
        let err = TdxIssuer::new(Fixed(quote_for(&[9; 64])))
            .issue(&[1; 32])
            .unwrap_err();
        assert_eq!(
            err,
            AttestationError::Issue(Detail::with(
                &TdxRefusal::QuoteSource,
                "the TDX quote source returned a quote for other report data"
            ))
        );
        let err = TdxIssuer::new(Fixed(vec![0; 10]))
            .issue(&[1; 32])
            .unwrap_err();
        assert!(
            matches!(&err, AttestationError::Issue(d)
                if d.is(&TdxRefusal::QuoteSource) && d.text().contains("answered")),
            "{err}"
        );
        let mut want = [0u8; 64];
        want[..32].copy_from_slice(&[1; 32]);
        let log = CcelLog::parse(&super::super::synthetic_ccel_log(&[(1, 5, b"x")], 64)).unwrap();
        let evidence = TdxIssuer::new(Fixed(quote_for(&want)))
            .with_ccel_log(&log)
            .issue(&[1; 32])
            .unwrap();
        let evidence = TdxEvidence::decode(&evidence).unwrap();
        assert_eq!(evidence.ccel_log, log.as_bytes());
    }

    #[test]
    fn configfs_tsm_is_refused_where_it_is_missing_and_the_ccel_is_read_bounded() {
        let err = ConfigfsTsmQuoteSource::open(Path::new("/nonexistent/tsm/report")).unwrap_err();
        assert!(
            matches!(&err, AttestationError::Issue(d)
                if d.is(&AttestRefusal::TsmMissing) && d.text().contains("6.7")),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("confboot-ccel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let area = super::super::synthetic_ccel_log(&[(1, 5, b"fw")], 1000);
        let table = CcelTable {
            cc_type: super::super::CC_TYPE_TDX,
            cc_subtype: 0,
            log_area_len: area.len() as u64,
            log_area_start: 0x1000,
        };
        std::fs::write(dir.join("CCEL"), table.encode()).unwrap();
        std::fs::write(dir.join("data"), &area).unwrap();
        let log = read_ccel_log(&dir.join("CCEL"), &dir.join("data")).unwrap();
        assert_eq!(log.events().len(), 1);
        // An area longer than the table says is refused.
        let mut longer = area.clone();
        longer.push(0xff);
        std::fs::write(dir.join("data"), &longer).unwrap();
        assert!(read_ccel_log(&dir.join("CCEL"), &dir.join("data")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
