//! Opt-in fetching of VCEKs from AMD's Key Distribution Service (cargo
//! feature `kds`, off by default; policy `"kdsFetch": true`). Verification
//! itself needs no network: this only fills in a VCEK that neither the
//! evidence nor the cache holds, and the fetched certificate is then
//! verified like any other (the chain to the pinned ARK decides).

use std::time::Duration;

use super::evidence::MAX_CERTIFICATE_LEN;
use crate::SnpRefusal;
use confboot_attest::{AttestationError, Detail};

/// How long one KDS request may take, in all.
pub const KDS_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches the certificate at `url` (one GET, no redirects, at most
/// [`MAX_CERTIFICATE_LEN`] bytes, [`KDS_TIMEOUT`] in all).
pub fn fetch_certificate(url: &str) -> Result<Vec<u8>, AttestationError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(KDS_TIMEOUT))
        .http_status_as_error(true)
        .max_redirects(0)
        .build()
        .into();
    let mut response = agent.get(url).call().map_err(|e| {
        AttestationError::Trust(Detail::with(
            &SnpRefusal::Kds,
            format!("KDS request {url}: {e}"),
        ))
    })?;
    response
        .body_mut()
        .with_config()
        .limit(MAX_CERTIFICATE_LEN as u64)
        .read_to_vec()
        .map_err(|e| {
            AttestationError::Trust(Detail::with(
                &SnpRefusal::Kds,
                format!("KDS response from {url}: {e}"),
            ))
        })
}
