//! Finding the VCEK/VLEK that signed a report when the evidence does not
//! carry it: the cache directory ([`vcek_cache_path`]), then, opt-in, AMD's
//! Key Distribution Service ([`kds_vcek_url`]; the fetch itself is in
//! `kds.rs`, cargo feature `kds`). Whatever is found is verified afterwards
//! like a certificate from the evidence: the chain to the pinned ARK decides.

use std::path::{Path, PathBuf};

use super::certs::{AmdCert, CertRole, TrustRoots};
use super::evidence::{CertKind, MAX_CERTIFICATE_LEN, SnpEvidence};
use super::policy::SnpPolicy;
use super::report::{Product, SigningKey, SnpReport};
use crate::SnpRefusal;
use confboot_attest::{AttestationError, Detail};
use confboot_util::fs::{FileError, read_bounded};
use confboot_util::hex;

/// AMD KDS's base address.
pub const KDS_BASE_URL: &str = "https://kdsintf.amd.com";

/// Where AMD's Key Distribution Service (at `base_url`, normally
/// [`KDS_BASE_URL`]) serves the VCEK that signs `report` if it came from a
/// `product` chip: `<base_url>/vcek/v1/<product>/<hwid>?...`
/// with the hwID (the chip id in lowercase hex, its first 8 bytes from
/// Turin on) and the SVNs of `REPORTED_TCB` in decimal (`fmcSPL` only where
/// the product has an FMC). `None` if the chip id is masked. Verification
/// needs no network: an operator can fetch the certificate and pass it in or
/// put it into the VCEK cache; fetching by confboot is opt-in (feature `kds`,
/// policy `kdsFetch`).
pub fn kds_vcek_url(base_url: &str, product: Product, report: &SnpReport) -> Option<String> {
    if report.chip_id_masked() {
        return None;
    }
    let tcb = report.reported_tcb(product);
    let hw_id = if product.has_fmc() {
        &report.chip_id()[..8]
    } else {
        report.chip_id()
    };
    let fmc = tcb
        .fmc
        .map(|f| format!("fmcSPL={f:02}&"))
        .unwrap_or_default();
    Some(format!(
        "{}/vcek/v1/{}/{}?{fmc}blSPL={:02}&teeSPL={:02}&snpSPL={:02}&ucodeSPL={:02}",
        base_url.trim_end_matches('/'),
        product.name(),
        hex::encode(hw_id),
        tcb.bootloader,
        tcb.tee,
        tcb.snp,
        tcb.microcode
    ))
}

/// Finds the VCEK/VLEK: from the evidence (the one `KEY_INFO` names when
/// both are there), else from the cache directory, else (when the policy
/// opts in) from the KDS. Returns the certificate and where it came from.
pub(super) fn find_vek(
    evidence: &SnpEvidence,
    policy: &SnpPolicy,
    roots: &TrustRoots,
) -> Result<(AmdCert, String), AttestationError> {
    let vcek = evidence.certificate(CertKind::Vcek);
    let vlek = evidence.certificate(CertKind::Vlek);
    let chosen = match (vcek, vlek, evidence.report.signing_key()) {
        (Some(_), Some(l), SigningKey::Vlek) => Some(l),
        (Some(c), _, _) => Some(c),
        (None, Some(l), _) => Some(l),
        (None, None, _) => None,
    };
    if let Some(der) = chosen {
        let cert = AmdCert::from_der(der)?;
        if !matches!(cert.role(), CertRole::Vcek | CertRole::Vlek) {
            return Err(AttestationError::Trust(Detail::with(
                &SnpRefusal::VekRole,
                format!(
                    "the evidence's endorsement key is an {} ({:?})",
                    cert.role(),
                    cert.common_name()
                ),
            )));
        }
        return Ok((cert, "the evidence".into()));
    }
    let report = &evidence.report;
    if report.chip_id_masked() {
        return Err(AttestationError::Trust(Detail::with(
            &SnpRefusal::NoVek,
            "the evidence carries no VCEK or VLEK, and the masked chip id cannot find a VCEK",
        )));
    }
    let not_cached = match policy.vcek_cache_dir.as_deref() {
        None => "no VCEK cache is configured".to_string(),
        Some(dir) => {
            let path = vcek_cache_path(dir, report);
            match read_bounded(&path, MAX_CERTIFICATE_LEN as u64) {
                Ok(der) => {
                    let cert = AmdCert::from_der(&der)?;
                    if cert.role() != CertRole::Vcek {
                        return Err(AttestationError::Trust(Detail::with(
                            &SnpRefusal::VekRole,
                            format!("cached certificate {} is not a VCEK", path.display()),
                        )));
                    }
                    return Ok((cert, format!("the cache ({})", path.display())));
                }
                Err(e) => format!("none is cached at {}: {}", path.display(), cache_error(&e)),
            }
        }
    };
    if policy.kds_fetch {
        return fetch_vek(report, policy, roots);
    }
    Err(AttestationError::Trust(Detail::with(
        &SnpRefusal::NoVek,
        format!("the evidence carries no VCEK or VLEK and {not_cached}"),
    )))
}

/// Fetches the VCEK from the KDS (opt-in), for each product the report may
/// be from, and stores it in the cache directory if there is one.
#[cfg(feature = "kds")]
fn fetch_vek(
    report: &SnpReport,
    policy: &SnpPolicy,
    roots: &TrustRoots,
) -> Result<(AmdCert, String), AttestationError> {
    let base = policy.kds_base_url.as_deref().unwrap_or(KDS_BASE_URL);
    let products: Vec<Product> = match report.product_from_cpuid() {
        Some(p) => vec![p],
        None => roots.roots().iter().map(|r| r.product).collect(),
    };
    let mut errors = Vec::new();
    for product in products {
        let Some(url) = kds_vcek_url(base, product, report) else {
            continue;
        };
        match super::kds::fetch_certificate(&url).and_then(|der| {
            let cert = AmdCert::from_der(&der)?;
            Ok((der, cert))
        }) {
            Ok((der, cert)) if cert.role() == CertRole::Vcek => {
                if let Some(dir) = policy.vcek_cache_dir.as_deref() {
                    let path = vcek_cache_path(dir, report);
                    let stored = path
                        .parent()
                        .map_or(Ok(()), std::fs::create_dir_all)
                        .and_then(|()| std::fs::write(&path, &der));
                    if let Err(e) = stored {
                        log::warn!("cannot cache the VCEK at {}: {e}", path.display());
                    }
                }
                return Ok((cert, format!("AMD KDS ({url})")));
            }
            Ok(_) => errors.push(format!("{url}: not a VCEK")),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(AttestationError::Trust(Detail::with(
        &SnpRefusal::NoVek,
        format!(
            "the evidence carries no VCEK or VLEK, none is cached, and the KDS gave none: {}",
            errors.join("; ")
        ),
    )))
}

#[cfg(not(feature = "kds"))]
fn fetch_vek(
    _report: &SnpReport,
    _policy: &SnpPolicy,
    _roots: &TrustRoots,
) -> Result<(AmdCert, String), AttestationError> {
    Err(AttestationError::Trust(Detail::with(
        &SnpRefusal::KdsNotBuilt,
        "the policy asks for KDS fetching but confboot was built without the `kds` feature",
    )))
}

/// Where the VCEK for a report is cached: `<dir>/<chip_id hex>/<reported_tcb hex>.der`.
pub fn vcek_cache_path(dir: &Path, report: &SnpReport) -> PathBuf {
    dir.join(hex::encode(report.chip_id()))
        .join(format!("{}.der", hex::encode(&report.reported_tcb_raw())))
}

/// Why a cached certificate could not be read, as the refusal says it:
/// what the system said, or that the file is over [`MAX_CERTIFICATE_LEN`].
fn cache_error(error: &FileError) -> String {
    match error {
        FileError::Read { error, .. } => error.to_string(),
        FileError::TooLarge { .. } => "certificate too large".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kds_urls_follow_the_product() {
        let mut raw = [0u8; crate::REPORT_LEN];
        raw[0x180..0x188].copy_from_slice(&[3, 0, 0, 0, 0, 0, 8, 115]);
        raw[0x1A0..0x1A8].copy_from_slice(&[0xab; 8]);
        let report = SnpReport::from_bytes(&raw).unwrap();
        assert_eq!(
            kds_vcek_url(KDS_BASE_URL, Product::Turin, &report).unwrap(),
            "https://kdsintf.amd.com/vcek/v1/Turin/abababababababab?fmcSPL=03&blSPL=00&teeSPL=00&snpSPL=00&ucodeSPL=115"
        );
        let milan = kds_vcek_url(KDS_BASE_URL, Product::Milan, &report).unwrap();
        assert!(milan.starts_with(&format!(
            "https://kdsintf.amd.com/vcek/v1/Milan/{}{}?",
            "ab".repeat(8),
            "00".repeat(56)
        )));
        assert!(milan.ends_with("?blSPL=03&teeSPL=00&snpSPL=08&ucodeSPL=115"));
        let masked = SnpReport::from_bytes(&[0u8; crate::REPORT_LEN]).unwrap();
        assert_eq!(kds_vcek_url(KDS_BASE_URL, Product::Milan, &masked), None);
    }
}
