//! A test SEV-SNP platform for end-to-end tests: its own AMD-style chain
//! ARK → ASK → VCEK, minted here, and chips that sign attestation reports
//! in AMD's format. The production validator checks them unchanged: a
//! policy pins the test ARK as its root (`rootBundles`).
//!
//! - ARK and ASK are RSA keys signing with RSASSA-PSS SHA-384 (salt 48),
//!   as AMD's do (RSA-2048 here instead of 4096, to keep tests fast); the
//!   subject names are AMD's (`ARK-Milan`, `SEV-Milan`, `SEV-VCEK`).
//! - A VCEK is a P-384 key with AMD's extensions: structVersion, productName
//!   (`Milan-B0`), the TCB components (bootloader, TEE, SNP, microcode SVNs
//!   as DER INTEGERs) and hwID (the chip id's 64 raw bytes).
//! - A report is 1184 bytes at AMD's offsets (version 3, Milan CPUID),
//!   signed with ECDSA P-384 SHA-384 over bytes `0..0x2A0`, R and S stored
//!   as 72-byte little-endian numbers at `0x2A0`.
//!
//! The roots, the DER writer and the keys are the test kit's
//! (`confboot_testkit::snp`, bytes and keys only); the VCEK's extensions and
//! the report's layout, confboot-attest's contract, are made here.

use std::sync::Mutex;

use confboot_attest::{AttestationError, EXTRA_DATA_LEN, Issuer, Variant};
use confboot_snp::{
    CertEntry, CertKind, OID_HW_ID, OID_PRODUCT_NAME, OID_TCB_BOOTLOADER, OID_TCB_MICROCODE,
    OID_TCB_SNP, OID_TCB_TEE, REPORT_LEN, RawReport, SIGNED_LEN, SnpReportSource, cert_table,
    offset,
};
use confboot_testkit::snp::{AmdRoots, P384Key, der};
use ring::rand::{SecureRandom, SystemRandom};

/// AMD's `structVersion` extension of a VCEK.
const OID_STRUCT_VERSION: &str = "1.3.6.1.4.1.3704.1.1";

/// The TCB a chip reports and its VCEK certifies (Milan layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcb {
    /// Bootloader SVN.
    pub bootloader: u8,
    /// TEE SVN.
    pub tee: u8,
    /// SNP firmware SVN.
    pub snp: u8,
    /// Microcode SVN.
    pub microcode: u8,
}

impl Tcb {
    /// A current Milan TCB, above confboot's default minimum (3/0/8/115).
    pub const CURRENT: Tcb = Tcb {
        bootloader: 4,
        tee: 0,
        snp: 22,
        microcode: 213,
    };

    /// The 8 raw bytes of a Milan TCB_VERSION.
    fn raw(self) -> [u8; 8] {
        [
            self.bootloader,
            self.tee,
            0,
            0,
            0,
            0,
            self.snp,
            self.microcode,
        ]
    }
}

/// A test AMD: the ARK and ASK of product Milan ([`AmdRoots`], from the
/// test kit), minted at start, and chips with VCEKs in AMD's format.
pub struct TestAmd {
    /// The ARK certificate, DER.
    pub ark_der: Vec<u8>,
    /// The ASK certificate, DER.
    pub ask_der: Vec<u8>,
    roots: AmdRoots,
}

impl TestAmd {
    /// Mints an ARK (self-signed) and an ASK (signed by the ARK).
    pub fn new() -> TestAmd {
        let roots = AmdRoots::new();
        TestAmd {
            ark_der: roots.ark_der.clone(),
            ask_der: roots.ask_der.clone(),
            roots,
        }
    }

    /// The ARK and ASK as the PEM bundle an SNP policy's `rootBundles` names.
    pub fn root_bundle_pem(&self) -> String {
        self.roots.root_bundle_pem()
    }

    /// A chip with a fresh VCEK (signed by the ASK) for `chip_id` at `tcb`.
    pub fn chip(&self, chip_id: [u8; 64], tcb: Tcb) -> TestChip {
        use der::*;
        let key = P384Key::generate();
        let vcek_der = self.roots.sign_vcek(
            key.spki(),
            &[
                (OID_STRUCT_VERSION, uint(&[1])),
                (OID_PRODUCT_NAME, tlv(0x16, b"Milan-B0")),
                (OID_TCB_BOOTLOADER, uint(&[tcb.bootloader])),
                (OID_TCB_TEE, uint(&[tcb.tee])),
                (OID_TCB_SNP, uint(&[tcb.snp])),
                (OID_TCB_MICROCODE, uint(&[tcb.microcode])),
                (OID_HW_ID, chip_id.to_vec()),
            ],
        );
        TestChip {
            chip_id,
            tcb,
            vcek_der,
            key,
        }
    }
}

impl Default for TestAmd {
    fn default() -> Self {
        TestAmd::new()
    }
}

/// A chip: its id, TCB, VCEK and the VCEK's private key.
pub struct TestChip {
    /// The chip id reports carry.
    pub chip_id: [u8; 64],
    /// The TCB reports carry and the VCEK certifies.
    pub tcb: Tcb,
    /// The VCEK, DER.
    pub vcek_der: Vec<u8>,
    key: P384Key,
}

impl TestChip {
    /// Signs `report` in place: ECDSA P-384 SHA-384 over its signed part,
    /// R and S little-endian at `0x2A0` and `0x2E8`.
    pub fn sign(&self, report: &mut [u8]) {
        let sig = self.key.sign(&report[..SIGNED_LEN]);
        report[offset::SIGNATURE..].fill(0);
        for (i, half) in sig.chunks(48).enumerate() {
            let at = offset::SIGNATURE + 72 * i;
            for (j, b) in half.iter().rev().enumerate() {
                report[at + j] = *b;
            }
        }
    }
}

/// What a guest is: its launch measurement and whether its policy allows
/// debugging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guest {
    /// The launch measurement.
    pub measurement: [u8; 48],
    /// Whether the guest policy's DEBUG bit is set.
    pub debug: bool,
}

/// A report for `guest` on `chip`, unsigned: version 3, Milan CPUID, VMPL
/// `vmpl`, the chip's TCB everywhere.
pub fn unsigned_report(
    chip: &TestChip,
    guest: &Guest,
    report_data: [u8; 64],
    vmpl: u32,
) -> Vec<u8> {
    let mut r = vec![0u8; REPORT_LEN];
    let mut put = |at: usize, bytes: &[u8]| r[at..at + bytes.len()].copy_from_slice(bytes);
    put(offset::VERSION, &3u32.to_le_bytes());
    // Reserved bit 17 is always set; bit 16 lets the host run SMT; bit 19 is DEBUG.
    let policy: u64 = 0x3_0000 | if guest.debug { 1 << 19 } else { 0 };
    put(offset::POLICY, &policy.to_le_bytes());
    put(offset::VMPL, &vmpl.to_le_bytes());
    put(offset::SIGNATURE_ALGO, &1u32.to_le_bytes());
    put(offset::CURRENT_TCB, &chip.tcb.raw());
    put(offset::KEY_INFO, &0u32.to_le_bytes());
    put(offset::REPORT_DATA, &report_data);
    put(offset::MEASUREMENT, &guest.measurement);
    put(offset::REPORTED_TCB, &chip.tcb.raw());
    put(offset::CPUID_FAM_ID, &[0x19, 0x01]);
    put(offset::CHIP_ID, &chip.chip_id);
    put(offset::COMMITTED_TCB, &chip.tcb.raw());
    put(offset::CURRENT_MINOR, &[55, 1]);
    put(offset::LAUNCH_TCB, &chip.tcb.raw());
    r
}

/// A report source over test chips, standing in for the kernel: it makes
/// the report of `guest` on `reporting` (chip id, TCB), signs it with
/// `signing`'s key and hands out `table_vcek`'s VCEK with the ASK in the
/// certificate table. All three are the same chip for an honest platform.
pub struct TestReportSource {
    /// The chip whose id and TCB the report carries.
    pub reporting: std::sync::Arc<TestChip>,
    /// The chip whose key signs.
    pub signing: std::sync::Arc<TestChip>,
    /// The chip whose VCEK goes into the certificate table.
    pub table_vcek: std::sync::Arc<TestChip>,
    /// The ASK for the table, DER.
    pub ask_der: Vec<u8>,
    /// The guest.
    pub guest: Guest,
    /// The launch's `REPORT_ID`: the firmware draws it once per launch and
    /// puts it in every report of that launch.
    pub report_id: [u8; 32],
}

impl TestReportSource {
    /// An honest platform: one chip reports, signs and is in the table.
    /// Each call is a new launch (a fresh `REPORT_ID`).
    pub fn honest(amd: &TestAmd, chip: std::sync::Arc<TestChip>, guest: Guest) -> Self {
        let mut report_id = [0u8; 32];
        SystemRandom::new().fill(&mut report_id).unwrap();
        TestReportSource {
            reporting: chip.clone(),
            signing: chip.clone(),
            table_vcek: chip,
            ask_der: amd.ask_der.clone(),
            guest,
            report_id,
        }
    }
}

impl SnpReportSource for TestReportSource {
    fn report(&self, report_data: [u8; 64], vmpl: u32) -> Result<RawReport, AttestationError> {
        let mut report = unsigned_report(&self.reporting, &self.guest, report_data, vmpl);
        report[offset::REPORT_ID..offset::REPORT_ID + 32].copy_from_slice(&self.report_id);
        self.signing.sign(&mut report);
        Ok(RawReport {
            report,
            cert_table: cert_table::encode(&[
                CertEntry {
                    kind: CertKind::Vcek,
                    der: self.table_vcek.vcek_der.clone(),
                },
                CertEntry {
                    kind: CertKind::Ask,
                    der: self.ask_der.clone(),
                },
            ]),
        })
    }
}

/// An issuer that replays: the first evidence it makes (for the first
/// handshake) is what it presents in every later one, as a host that
/// recorded a genuine node's handshake would.
pub struct ReplayingIssuer<I: Issuer> {
    inner: I,
    recorded: Mutex<Option<Vec<u8>>>,
}

impl<I: Issuer> ReplayingIssuer<I> {
    /// Records from `inner`.
    pub fn new(inner: I) -> Self {
        ReplayingIssuer {
            inner,
            recorded: Mutex::new(None),
        }
    }
}

impl<I: Issuer> Issuer for ReplayingIssuer<I> {
    fn variant(&self) -> Variant {
        self.inner.variant()
    }

    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        let mut recorded = self.recorded.lock().unwrap();
        if let Some(evidence) = recorded.as_ref() {
            return Ok(evidence.clone());
        }
        let evidence = self.inner.issue(extra_data)?;
        *recorded = Some(evidence.clone());
        Ok(evidence)
    }
}
