//! The verify service: a bootstrapped node answers attestation requests at
//! any time (Constellation's verification service), and an admin checks
//! the answer.
//!
//! The contract, in one place:
//!
//! - **request**: plain HTTP `GET /?nonce=<base64url>` on the node agent's
//!   port ([`DEFAULT_VERIFY_PORT`](confboot_proto::DEFAULT_VERIFY_PORT)),
//!   the nonce exactly [`VERIFY_NONCE_LEN`] random bytes of the verifier's
//!   ([`request_target`], [`parse_request_target`]);
//! - **binding**: the evidence's `extra_data` is
//!   SHA-256(`"confboot verify service v1\0"` ‖ nonce) ([`extra_data`]). The
//!   service is no oracle for aTLS: aTLS binds evidence to a TLS session's
//!   exporter (`confboot_atls::binding`), and no nonce a caller picks makes
//!   this hash equal to an exporter value without a SHA-256 preimage;
//! - **answer**: a JSON [`AttestationDocument`] `{"variant": "qemu-vtpm",
//!   "attestation": "<base64 evidence>"}`, at most [`MAX_DOCUMENT_BYTES`].
//!
//! [`check_node`] verifies a document (signature, nonce, AK trust, the event
//! log's replay) and lays every PCR of the policy and the cluster's mark in
//! PCR 15 side by side in a [`NodeReport`]: the table `confboot verify`
//! prints. [`http`] holds the socket side: the agent's bounded HTTP server
//! and the admin's client.

pub mod http;
mod report;

use ring::digest::{SHA256, digest};

use confboot_attest::vtpm::MAX_EVIDENCE_LEN;
use confboot_attest::{AttestationError, EXTRA_DATA_LEN, Issuer, Variant};
use confboot_util::base64::{self, Base64Error};

pub use report::{NodeReport, PcrRow, check_node};

/// Length of a verify request's nonce, in bytes.
pub const VERIFY_NONCE_LEN: usize = 32;

/// Largest attestation document accepted: the largest evidence in base64,
/// with room for the JSON around it.
pub const MAX_DOCUMENT_BYTES: usize = MAX_EVIDENCE_LEN.div_ceil(3) * 4 + 1024;

/// What the verify service's binding hashes before the nonce.
const BINDING_LABEL: &[u8] = b"confboot verify service v1\0";

// aTLS hashes exactly 64 bytes (SHA-256(SPKI) ‖ nonce): the verify
// service's input must never have that length.
const _: () = assert!(BINDING_LABEL.len() + VERIFY_NONCE_LEN != 64);

/// The `extra_data` a verify answer's evidence carries for `nonce`.
pub fn extra_data(nonce: &[u8; VERIFY_NONCE_LEN]) -> [u8; EXTRA_DATA_LEN] {
    let mut input = Vec::with_capacity(BINDING_LABEL.len() + VERIFY_NONCE_LEN);
    input.extend_from_slice(BINDING_LABEL);
    input.extend_from_slice(nonce);
    let mut out = [0u8; EXTRA_DATA_LEN];
    out.copy_from_slice(digest(&SHA256, &input).as_ref());
    out
}

/// A fresh random nonce for one verify request.
pub fn new_nonce() -> Result<[u8; VERIFY_NONCE_LEN], AttestationError> {
    let mut nonce = [0u8; VERIFY_NONCE_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
        .map_err(|_| AttestationError::Issue("no randomness for a nonce".into()))?;
    Ok(nonce)
}

/// The request target that asks for evidence bound to `nonce`:
/// `/?nonce=<base64url>`.
pub fn request_target(nonce: &[u8; VERIFY_NONCE_LEN]) -> String {
    format!("/?nonce={}", base64::encode_url(nonce))
}

/// Why a verify request was refused (answered with HTTP 400 or 404).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The path is not `/`.
    #[error("not found: the verify service answers GET /?nonce=")]
    NotFound,
    /// No `nonce` parameter.
    #[error("missing query parameter nonce")]
    MissingNonce,
    /// A parameter other than `nonce`, or `nonce` twice.
    #[error("the query must be exactly one nonce parameter")]
    UnexpectedParameter,
    /// The nonce is not base64url.
    #[error("nonce is not base64url: {0}")]
    NonceEncoding(Base64Error),
    /// The nonce does not have [`VERIFY_NONCE_LEN`] bytes.
    #[error("nonce has {0} bytes, want {VERIFY_NONCE_LEN}")]
    NonceLength(usize),
}

/// Reads a request target (`/?nonce=<base64url>`, padding `=` written as
/// is or as `%3D`) into its nonce.
pub fn parse_request_target(target: &str) -> Result<[u8; VERIFY_NONCE_LEN], RequestError> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != "/" {
        return Err(RequestError::NotFound);
    }
    let mut nonce = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("nonce", value)) if nonce.is_none() => nonce = Some(value),
            _ => return Err(RequestError::UnexpectedParameter),
        }
    }
    let value = nonce.ok_or(RequestError::MissingNonce)?;
    let unescaped = value.replace("%3D", "=").replace("%3d", "=");
    let bytes = base64::decode_url(&unescaped).map_err(RequestError::NonceEncoding)?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| RequestError::NonceLength(bytes.len()))
}

/// A verify service's answer: which kind of evidence, and the evidence
/// bound to the request's nonce ([`extra_data`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttestationDocument {
    /// The attestation variant of the evidence.
    pub variant: Variant,
    /// The evidence, as the variant's validator reads it.
    pub evidence: Vec<u8>,
}

/// Why bytes are not an attestation document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// Larger than [`MAX_DOCUMENT_BYTES`].
    #[error("attestation document too large: {0} bytes or more, at most {MAX_DOCUMENT_BYTES}")]
    TooLarge(usize),
    /// Not a JSON object of the document's shape.
    #[error("not an attestation document: {0}")]
    Malformed(String),
    /// A variant this build does not know.
    #[error("unknown attestation variant {0:?}")]
    UnknownVariant(String),
    /// The evidence is not base64.
    #[error("attestation is not base64: {0}")]
    Evidence(Base64Error),
}

impl AttestationDocument {
    /// Evidence from `issuer` bound to `nonce`: what the service answers.
    pub fn issue(
        issuer: &dyn Issuer,
        nonce: &[u8; VERIFY_NONCE_LEN],
    ) -> Result<AttestationDocument, AttestationError> {
        Ok(AttestationDocument {
            variant: issuer.variant(),
            evidence: issuer.issue(&extra_data(nonce))?,
        })
    }

    /// The document as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "variant": self.variant.name(),
            "attestation": base64::encode(&self.evidence),
        })
        .to_string()
    }

    /// Reads a document: a JSON object with exactly `variant` and
    /// `attestation`, at most [`MAX_DOCUMENT_BYTES`].
    pub fn from_json(bytes: &[u8]) -> Result<AttestationDocument, DocumentError> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(DocumentError::TooLarge(bytes.len()));
        }
        let bad = |m: &str| DocumentError::Malformed(m.to_string());
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| DocumentError::Malformed(e.to_string()))?;
        let obj = value.as_object().ok_or_else(|| bad("not a JSON object"))?;
        if let Some(k) = obj
            .keys()
            .find(|k| !["variant", "attestation"].contains(&k.as_str()))
        {
            return Err(DocumentError::Malformed(format!("unknown key {k:?}")));
        }
        let text = |key: &str| {
            obj.get(key)
                .and_then(|v| v.as_str())
                .ok_or_else(|| DocumentError::Malformed(format!("\"{key}\" must be a string")))
        };
        let name = text("variant")?;
        let variant = Variant::from_name(name)
            .ok_or_else(|| DocumentError::UnknownVariant(name.chars().take(64).collect()))?;
        let evidence = base64::decode(text("attestation")?).map_err(DocumentError::Evidence)?;
        Ok(AttestationDocument { variant, evidence })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_and_document_error_prints_its_message() {
        let requests = [
            (
                RequestError::NotFound,
                "not found: the verify service answers GET /?nonce=",
            ),
            (RequestError::MissingNonce, "missing query parameter nonce"),
            (
                RequestError::UnexpectedParameter,
                "the query must be exactly one nonce parameter",
            ),
            (
                RequestError::NonceEncoding(Base64Error::InvalidLength),
                "nonce is not base64url: invalid base64 length",
            ),
            (RequestError::NonceLength(5), "nonce has 5 bytes, want 32"),
        ];
        for (error, message) in requests {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
        let documents = [
            (
                DocumentError::TooLarge(MAX_DOCUMENT_BYTES + 1),
                format!(
                    "attestation document too large: {} bytes or more, at most {MAX_DOCUMENT_BYTES}",
                    MAX_DOCUMENT_BYTES + 1
                ),
            ),
            (
                DocumentError::Malformed("no variant".into()),
                "not an attestation document: no variant".to_string(),
            ),
            (
                DocumentError::UnknownVariant("tdx".into()),
                "unknown attestation variant \"tdx\"".to_string(),
            ),
            (
                DocumentError::Evidence(Base64Error::InvalidLength),
                "attestation is not base64: invalid base64 length".to_string(),
            ),
        ];
        for (error, message) in documents {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
    }

    #[test]
    fn request_target_round_trips_with_and_without_escaped_padding() {
        let nonce = [7u8; VERIFY_NONCE_LEN];
        let target = request_target(&nonce);
        assert!(target.starts_with("/?nonce="), "{target}");
        assert_eq!(parse_request_target(&target), Ok(nonce));
        assert_eq!(
            parse_request_target(&target.replace('=', "%3D").replacen("%3D", "=", 1)),
            Ok(nonce)
        );
        assert_eq!(
            parse_request_target(target.trim_end_matches('=')),
            Ok(nonce)
        );
    }

    #[test]
    fn bad_requests_are_refused_by_kind() {
        let good = base64::encode_url(&[1u8; 32]);
        assert_eq!(
            parse_request_target("/metrics"),
            Err(RequestError::NotFound)
        );
        assert_eq!(
            parse_request_target("/x?nonce=AA"),
            Err(RequestError::NotFound)
        );
        assert_eq!(parse_request_target("/"), Err(RequestError::MissingNonce));
        assert_eq!(parse_request_target("/?"), Err(RequestError::MissingNonce));
        assert_eq!(
            parse_request_target(&format!("/?nonce={good}&nonce={good}")),
            Err(RequestError::UnexpectedParameter)
        );
        assert_eq!(
            parse_request_target(&format!("/?nonce={good}&debug=1")),
            Err(RequestError::UnexpectedParameter)
        );
        assert!(matches!(
            parse_request_target("/?nonce=%%%"),
            Err(RequestError::NonceEncoding(_))
        ));
        assert_eq!(
            parse_request_target(&format!("/?nonce={}", base64::encode_url(&[1u8; 16]))),
            Err(RequestError::NonceLength(16))
        );
        assert_eq!(
            parse_request_target(&format!("/?nonce={}", base64::encode_url(&[1u8; 64]))),
            Err(RequestError::NonceLength(64))
        );
    }

    #[test]
    fn the_binding_is_a_labelled_hash_of_the_nonce_never_the_nonce_itself() {
        // aTLS binds a session's exporter: a caller choosing the nonce gets
        // SHA-256(label ‖ nonce), never a value of its choice, so matching
        // an exporter value needs a SHA-256 preimage.
        let nonce = [9u8; VERIFY_NONCE_LEN];
        let ours = extra_data(&nonce);
        let mut input = BINDING_LABEL.to_vec();
        input.extend_from_slice(&nonce);
        assert_eq!(&ours[..], digest(&SHA256, &input).as_ref());
        assert_ne!(&ours[..], &nonce[..]);
        assert_ne!(extra_data(&nonce), extra_data(&[8u8; VERIFY_NONCE_LEN]));
    }

    #[test]
    fn documents_round_trip_and_refuse_what_is_not_one() {
        let doc = AttestationDocument {
            variant: Variant::QemuVtpm,
            evidence: vec![1, 2, 3, 250],
        };
        assert_eq!(
            AttestationDocument::from_json(doc.to_json().as_bytes()),
            Ok(doc)
        );
        for (text, want) in [
            ("[]", "not a JSON object"),
            ("{", "EOF"),
            (
                r#"{"variant":"qemu-vtpm"}"#,
                "\"attestation\" must be a string",
            ),
            (
                r#"{"variant":"qemu-vtpm","attestation":"AAAA","x":1}"#,
                "unknown key \"x\"",
            ),
            (
                r#"{"variant":1,"attestation":"AAAA"}"#,
                "\"variant\" must be a string",
            ),
        ] {
            let err = AttestationDocument::from_json(text.as_bytes()).unwrap_err();
            assert!(err.to_string().contains(want), "{text}: {err}");
        }
        assert_eq!(
            AttestationDocument::from_json(br#"{"variant":"sgx","attestation":""}"#),
            Err(DocumentError::UnknownVariant("sgx".into()))
        );
        assert!(matches!(
            AttestationDocument::from_json(br#"{"variant":"qemu-vtpm","attestation":"*"}"#),
            Err(DocumentError::Evidence(_))
        ));
        let big = vec![b' '; MAX_DOCUMENT_BYTES + 1];
        assert_eq!(
            AttestationDocument::from_json(&big),
            Err(DocumentError::TooLarge(MAX_DOCUMENT_BYTES + 1))
        );
    }
}
