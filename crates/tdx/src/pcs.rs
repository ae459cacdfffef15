//! Collateral from Intel's Provisioning Certification Service (PCS, API
//! v4), as an opt-in: the cargo feature `pcs` (off by default) fetches it
//! ([`fetch`], [`fetch_collateral`]); what a fetch asks for
//! ([`PcsRequest`], [`pcs_requests`]) and what it keeps ([`store_answers`])
//! need no network and are always built.
//!
//! The requests, for a quote's platform: TDX TCB info for its FMSPC
//! (`/tdx/certification/v4/tcb?fmspc=`, the body Intel's signed JSON, the
//! TCB signing chain in the `TCB-Info-Issuer-Chain` header as URL-encoded
//! PEM), the TD QE identity (`/tdx/certification/v4/qe/identity`), and the
//! CRL of the PCK CA that issued its PCK certificate
//! (`/sgx/certification/v4/pckcrl?ca=platform|processor`).
//!
//! The fetch decides nothing. Each answer is bounded (body and issuer
//! chain), every request has an absolute deadline, and the answers are
//! written into the cache directory as the files a policy's `collateral`
//! names (`tcbInfo`, `qeIdentity`, `pckCrl`, `tcbInfoIssuerChain`), then
//! loaded from there exactly as such files are ([`super::load_collateral`]):
//! an answer that does not load is removed again. Signatures, the chain to
//! the pinned root, the FMSPC and the dates are checked when a quote is
//! verified, as for collateral an operator copied in by hand.
//!
//! A [`super::TdxValidator`] whose policy says `pcsFetch` fetches, during a
//! check, what its policy's collateral files lack or what is past its
//! `nextUpdate`, and reuses it while current. The root CA's CRL is not
//! fetched (the policy's `rootCrl` file supplies it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::certs::{MAX_CRL_LEN, TdxRoots};
use super::collateral::MAX_COLLATERAL_LEN;
use super::policy::CollateralFiles;
use super::quote::Quote;
use super::verify::Collateral;

/// Intel's PCS.
pub const PCS_BASE_URL: &str = "https://api.trustedservices.intel.com";
/// How long one PCS request may take, in all (a fetch's deadline may cut
/// it shorter).
pub const PCS_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of an issuer-chain header taken (three certificates,
/// URL-encoded PEM, are about 4 KiB).
pub const MAX_ISSUER_CHAIN_LEN: usize = 32 * 1024;

/// The PCK CA that issued a PCK certificate, as the PCS names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PckCa {
    /// The Intel SGX PCK Platform CA (multi-package platforms).
    Platform,
    /// The Intel SGX PCK Processor CA.
    Processor,
}

impl PckCa {
    /// The `ca` query value: `platform`, `processor`.
    pub fn name(self) -> &'static str {
        match self {
            PckCa::Platform => "platform",
            PckCa::Processor => "processor",
        }
    }

    /// The CA named by a PCK CA certificate's common name (`Intel SGX PCK
    /// Platform CA`, `Intel SGX PCK Processor CA`).
    pub fn of_common_name(common_name: &str) -> Option<PckCa> {
        if common_name.ends_with("PCK Platform CA") {
            Some(PckCa::Platform)
        } else if common_name.ends_with("PCK Processor CA") {
            Some(PckCa::Processor)
        } else {
            None
        }
    }
}

/// One PCS request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcsRequest {
    /// TDX TCB info for a platform's FMSPC.
    TcbInfo {
        /// The FMSPC of the PCK certificate.
        fmspc: [u8; 6],
    },
    /// The TD QE identity.
    QeIdentity,
    /// The CRL of a PCK CA.
    PckCrl(PckCa),
}

impl PcsRequest {
    /// The request's URL under `base` (the PCS or a caching proxy).
    pub fn url(&self, base: &str) -> String {
        let base = base.trim_end_matches('/');
        match self {
            PcsRequest::TcbInfo { fmspc } => format!(
                "{base}/tdx/certification/v4/tcb?fmspc={}",
                confboot_util::hex::encode(fmspc).to_ascii_uppercase()
            ),
            PcsRequest::QeIdentity => format!("{base}/tdx/certification/v4/qe/identity"),
            PcsRequest::PckCrl(ca) => {
                format!("{base}/sgx/certification/v4/pckcrl?ca={}", ca.name())
            }
        }
    }

    /// The most bytes of the answer's body taken.
    pub fn body_limit(&self) -> usize {
        match self {
            PcsRequest::TcbInfo { .. } | PcsRequest::QeIdentity => MAX_COLLATERAL_LEN,
            PcsRequest::PckCrl(_) => MAX_CRL_LEN,
        }
    }

    /// The header that carries the signer's chain, kept for TCB info only
    /// (the QE identity has the same signer; a CRL is checked against the
    /// quote's own PCK chain).
    pub fn kept_issuer_chain_header(&self) -> Option<&'static str> {
        match self {
            PcsRequest::TcbInfo { .. } => Some("TCB-Info-Issuer-Chain"),
            PcsRequest::QeIdentity | PcsRequest::PckCrl(_) => None,
        }
    }

    /// The file the answer's body is kept in, in the cache directory.
    pub fn cache_file(&self) -> String {
        match self {
            PcsRequest::TcbInfo { fmspc } => {
                format!("tcb_info-{}.json", confboot_util::hex::encode(fmspc))
            }
            PcsRequest::QeIdentity => "qe_identity.json".into(),
            PcsRequest::PckCrl(ca) => format!("pck_crl-{}.crl", ca.name()),
        }
    }
}

/// A PCS answer, bounded, unchecked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcsAnswer {
    /// The body.
    pub body: Vec<u8>,
    /// The kept issuer-chain header, as sent (empty when not kept).
    pub issuer_chain: Vec<u8>,
}

/// Why collateral could not be fetched or kept.
#[derive(Debug, thiserror::Error)]
pub enum PcsError {
    /// The quote names no platform the PCS could be asked about.
    #[error("the quote's PCK chain: {0}")]
    Platform(String),
    /// The request failed (network, status, deadline).
    #[error("PCS request {url}: {message}")]
    Request {
        /// The URL asked.
        url: String,
        /// What failed.
        message: String,
    },
    /// The answer is over its bounds or lacks its issuer chain.
    #[error("PCS answer from {url}: {message}")]
    Answer {
        /// The URL asked.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// The answers, kept as files, do not load as a policy's collateral.
    #[error("fetched collateral refused: {0}")]
    Refused(String),
    /// The cache directory could not be written.
    #[error("collateral cache {}: {error}", path.display())]
    Cache {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
}

/// What to ask the PCS for a quote: TCB info for its PCK certificate's
/// FMSPC, the QE identity, and the CRL of the CA that issued the PCK
/// certificate (the chain must verify to one of `roots` first).
pub fn pcs_requests(quote: &Quote, roots: &TdxRoots) -> Result<[PcsRequest; 3], PcsError> {
    let platform = |e: &dyn std::fmt::Display| PcsError::Platform(e.to_string());
    let chain = roots
        .verify_pck_chain(&quote.pck_chain_pem)
        .map_err(|e| platform(&e))?;
    let fmspc = chain.leaf.sgx_extensions().map_err(|e| platform(&e))?.fmspc;
    let ca = PckCa::of_common_name(chain.intermediate.common_name()).ok_or_else(|| {
        platform(&format!(
            "its CA {:?} is neither a PCK Platform nor a PCK Processor CA",
            chain.intermediate.common_name()
        ))
    })?;
    Ok([
        PcsRequest::TcbInfo { fmspc },
        PcsRequest::QeIdentity,
        PcsRequest::PckCrl(ca),
    ])
}

/// Keeps `answers` in `cache_dir` as collateral files and loads them as a
/// policy's collateral files are loaded: an answer over its bounds, a
/// TCB info without its issuer chain, or files that do not load are
/// refused (and what was written for them removed). Returns the files and
/// the loaded collateral.
pub fn store_answers(
    cache_dir: &Path,
    answers: &[(PcsRequest, PcsAnswer)],
) -> Result<(CollateralFiles, Collateral), PcsError> {
    std::fs::create_dir_all(cache_dir).map_err(|error| PcsError::Cache {
        path: cache_dir.to_path_buf(),
        error,
    })?;
    let mut files = CollateralFiles::default();
    let mut written = Vec::new();
    let result = (|| {
        for (request, answer) in answers {
            let url = request.url("");
            let over = |what: &str, len: usize, limit: usize| PcsError::Answer {
                url: url.clone(),
                message: format!("{what} of {len} bytes, over {limit}"),
            };
            if answer.body.len() > request.body_limit() {
                return Err(over("a body", answer.body.len(), request.body_limit()));
            }
            if answer.issuer_chain.len() > MAX_ISSUER_CHAIN_LEN {
                return Err(over(
                    "an issuer chain",
                    answer.issuer_chain.len(),
                    MAX_ISSUER_CHAIN_LEN,
                ));
            }
            let path = cache_dir.join(request.cache_file());
            write(&path, &answer.body, &mut written)?;
            match request {
                PcsRequest::TcbInfo { fmspc } => {
                    if answer.issuer_chain.is_empty() {
                        return Err(PcsError::Answer {
                            url,
                            message: "no TCB-Info-Issuer-Chain header".into(),
                        });
                    }
                    let chain = cache_dir.join(format!(
                        "tcb_info_issuer_chain-{}.pem",
                        confboot_util::hex::encode(fmspc)
                    ));
                    write(&chain, &answer.issuer_chain, &mut written)?;
                    files.tcb_info = Some(path);
                    files.tcb_info_issuer_chain = Some(chain);
                }
                PcsRequest::QeIdentity => files.qe_identity = Some(path),
                PcsRequest::PckCrl(_) => files.pck_crl = Some(path),
            }
        }
        super::load_collateral(&files).map_err(|e| PcsError::Refused(e.to_string()))
    })();
    match result {
        Ok(collateral) => Ok((files, collateral)),
        Err(e) => {
            for path in written {
                let _ = std::fs::remove_file(path);
            }
            Err(e)
        }
    }
}

fn write(path: &Path, bytes: &[u8], written: &mut Vec<PathBuf>) -> Result<(), PcsError> {
    std::fs::write(path, bytes).map_err(|error| PcsError::Cache {
        path: path.to_path_buf(),
        error,
    })?;
    written.push(path.to_path_buf());
    Ok(())
}

/// One GET of `request` under `base`, finished by `deadline` (and within
/// [`PCS_TIMEOUT`]): no redirects, a status other than 200 refused, the
/// body and the kept issuer chain bounded.
#[cfg(feature = "pcs")]
pub fn fetch(
    base: &str,
    request: &PcsRequest,
    deadline: std::time::Instant,
) -> Result<PcsAnswer, PcsError> {
    let url = request.url(base);
    let failed = |message: String| PcsError::Request {
        url: url.clone(),
        message,
    };
    let left = deadline
        .checked_duration_since(std::time::Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| failed("the deadline passed before it was sent".into()))?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(left.min(PCS_TIMEOUT)))
        .http_status_as_error(true)
        .max_redirects(0)
        .max_response_header_size(MAX_ISSUER_CHAIN_LEN + 8 * 1024)
        .build()
        .into();
    let mut response = agent.get(&url).call().map_err(|e| failed(e.to_string()))?;
    // Redirects are not followed, and come back as answers: only 200 is.
    if response.status() != 200 {
        return Err(failed(format!("status {}", response.status())));
    }
    let issuer_chain = match request.kept_issuer_chain_header() {
        None => Vec::new(),
        Some(name) => response
            .headers()
            .get(name)
            .map(|v| v.as_bytes().to_vec())
            .unwrap_or_default(),
    };
    let limit = request.body_limit();
    let body = response
        .body_mut()
        .with_config()
        .limit(limit as u64)
        .read_to_vec()
        .map_err(|e| PcsError::Answer {
            url: url.clone(),
            message: format!("body (at most {limit} bytes): {e}"),
        })?;
    Ok(PcsAnswer { body, issuer_chain })
}

/// Fetches the collateral `quote` needs from the PCS at `base` into
/// `cache_dir`, every request by `deadline` ([`fetch`], [`store_answers`]).
#[cfg(feature = "pcs")]
pub fn fetch_collateral(
    base: &str,
    quote: &Quote,
    roots: &TdxRoots,
    cache_dir: &Path,
    deadline: std::time::Instant,
) -> Result<(CollateralFiles, Collateral), PcsError> {
    let mut answers = Vec::new();
    for request in pcs_requests(quote, roots)? {
        answers.push((request, fetch(base, &request, deadline)?));
    }
    let stored = store_answers(cache_dir, &answers)?;
    log::info!(
        "TDX collateral fetched from {base} into {}",
        cache_dir.display()
    );
    Ok(stored)
}
