//! TDX quotes of the test Intel ([`TestIntel`], from the test kit) in the
//! real DCAP version-4 format: the TD report signed by an attestation key,
//! which a QE report signed by the PCK key binds.
//!
//! A quote source ([`TestQuoteSource`]) answers the production
//! [`TdxIssuer`](confboot_tdx::TdxIssuer) as configfs-tsm would,
//! with knobs for each lie a host or a forged platform could tell.

use std::sync::Arc;

use confboot_attest::AttestationError;
use confboot_tdx::{INTEL_QE_VENDOR_ID, QE_REPORT_LEN, TdxQuoteSource, td_attributes};
use confboot_testkit::tdx::sign_with_a_fresh_key;
pub use confboot_testkit::tdx::{
    FMSPC, QE_ISV_PROD_ID, QE_ISV_SVN, QE_MRSIGNER, TestIntel, TestPlatform,
};

/// What a TD is: its measurements and attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Td {
    /// `MRTD`.
    pub mr_td: [u8; 48],
    /// `RTMR0` to `RTMR3`.
    pub rtmrs: [[u8; 48]; 4],
    /// `TDATTRIBUTES.DEBUG`.
    pub debug: bool,
}

/// How a quote is made: honestly, or with one of a forger's lies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Forgery {
    /// A genuine quote.
    #[default]
    None,
    /// The quote is signed by another attestation key than the one it
    /// carries (and the QE report binds).
    OtherAttestationKey,
    /// The QE report's `REPORTDATA` binds another attestation key.
    UnboundQeReport,
}

/// Answers the production issuer as configfs-tsm would: a quote of `td` on
/// `platform`, for the report data asked.
pub struct TestQuoteSource {
    /// The platform that signs.
    pub platform: Arc<TestPlatform>,
    /// The TD it describes.
    pub td: Td,
    /// The lie told, if any.
    pub forgery: Forgery,
}

impl TestQuoteSource {
    /// A genuine quote source.
    pub fn honest(platform: Arc<TestPlatform>, td: Td) -> TestQuoteSource {
        TestQuoteSource {
            platform,
            td,
            forgery: Forgery::None,
        }
    }

    /// A DCAP version-4 quote of the TD with `report_data`.
    pub fn make_quote(&self, report_data: [u8; 64]) -> Vec<u8> {
        let p = &self.platform;
        let mut header = Vec::with_capacity(48);
        header.extend_from_slice(&4u16.to_le_bytes());
        header.extend_from_slice(&2u16.to_le_bytes());
        header.extend_from_slice(&0x81u32.to_le_bytes());
        header.extend_from_slice(&[0; 4]);
        header.extend_from_slice(&INTEL_QE_VENDOR_ID);
        header.extend_from_slice(&[0; 20]);
        let mut body = Vec::with_capacity(584);
        body.extend_from_slice(&[0; 16]); // TEE_TCB_SVN: module minor 0
        body.extend_from_slice(&[0x5e; 48]); // MRSEAM
        body.extend_from_slice(&[0; 48]); // MRSIGNERSEAM: Intel's
        body.extend_from_slice(&[0; 8]); // SEAMATTRIBUTES
        let mut attributes = td_attributes::SEPT_VE_DISABLE;
        if self.td.debug {
            attributes |= td_attributes::DEBUG;
        }
        body.extend_from_slice(&attributes.to_le_bytes());
        body.extend_from_slice(&0x0006_02e7u64.to_le_bytes()); // XFAM
        body.extend_from_slice(&self.td.mr_td);
        body.extend_from_slice(&[0; 48 * 3]); // MRCONFIGID, MROWNER, MROWNERCONFIG
        for rtmr in &self.td.rtmrs {
            body.extend_from_slice(rtmr);
        }
        body.extend_from_slice(&report_data);
        let signed = [header, body].concat();
        let signature = match self.forgery {
            Forgery::OtherAttestationKey => sign_with_a_fresh_key(&signed),
            _ => p.sign_with_attestation_key(&signed),
        };
        let ak = p.attestation_key_raw();
        let auth_data = [0x0au8; 32];
        let mut bound = ak.to_vec();
        if self.forgery == Forgery::UnboundQeReport {
            bound[0] ^= 1;
        }
        bound.extend_from_slice(&auth_data);
        let hash = ring::digest::digest(&ring::digest::SHA256, &bound);
        let mut qe = [0u8; QE_REPORT_LEN];
        qe[48] = 0x11; // ATTRIBUTES
        qe[64..96].copy_from_slice(&[0x3e; 32]); // MRENCLAVE
        qe[128..160].copy_from_slice(&QE_MRSIGNER);
        qe[256..258].copy_from_slice(&QE_ISV_PROD_ID.to_le_bytes());
        qe[258..260].copy_from_slice(&QE_ISV_SVN.to_le_bytes());
        qe[320..352].copy_from_slice(hash.as_ref());
        let qe_signature = p.sign_with_pck(&qe);
        let mut cert = Vec::new();
        cert.extend_from_slice(&qe);
        cert.extend_from_slice(&qe_signature);
        cert.extend_from_slice(&(auth_data.len() as u16).to_le_bytes());
        cert.extend_from_slice(&auth_data);
        cert.extend_from_slice(&5u16.to_le_bytes());
        cert.extend_from_slice(&(p.chain_pem().len() as u32).to_le_bytes());
        cert.extend_from_slice(p.chain_pem());
        let mut sig_data = Vec::new();
        sig_data.extend_from_slice(&signature);
        sig_data.extend_from_slice(&ak);
        sig_data.extend_from_slice(&6u16.to_le_bytes());
        sig_data.extend_from_slice(&(cert.len() as u32).to_le_bytes());
        sig_data.extend_from_slice(&cert);
        let mut quote = signed;
        quote.extend_from_slice(&(sig_data.len() as u32).to_le_bytes());
        quote.extend_from_slice(&sig_data);
        quote
    }
}

impl TdxQuoteSource for TestQuoteSource {
    fn quote(&self, report_data: [u8; 64]) -> Result<Vec<u8>, AttestationError> {
        Ok(self.make_quote(report_data))
    }
}
