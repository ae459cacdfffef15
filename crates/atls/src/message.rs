//! The attestation message each side sends first on an aTLS connection,
//! right after the handshake: one RPC frame ([`confboot_wire::frame`])
//! holding a `confboot.atls.Attestation` ([`confboot_proto::atls`]).
//!
//! Order: the client sends its message first (empty when it does not
//! attest); the server reads it, checks it when it requires client
//! attestation, and answers with its own message (empty when it does not
//! attest), or with a `PERMISSION_DENIED` status trailer when it refused
//! the client. So no side waits for the other at the same time, and a
//! refused client learns it before it sends anything else.
//!
//! Bounds: a frame of at most [`MAX_MESSAGE_LEN`] bytes (announced larger
//! is refused before anything is allocated), evidence of at most
//! [`MAX_EVIDENCE_LEN`] bytes (the largest any variant's decoder accepts),
//! a variant name of at most [`MAX_VARIANT_NAME_LEN`] bytes, a sealing key
//! of exactly [`SEALING_KEY_LEN`] bytes or none, a presented
//! reference-value set of at most [`MAX_REFERENCE_VALUES_LEN`] bytes or
//! none.

use std::io::{Read, Write};
use std::sync::Arc;

use confboot_attest::{Attested, EXTRA_DATA_LEN, Validator, Variant};
use confboot_proto::Message;
use confboot_proto::atls::Attestation;
use confboot_wire::frame::{self, FrameError, FrameKind};
use confboot_wire::{Code, Status};

use super::error::{AtlsError, AtlsIo, MessageFault};

/// The largest evidence a message may carry: the larger of the variants'
/// bounds (SEV-SNP's 64 KiB with its certificates; vTPM's is 48 KiB).
pub const MAX_EVIDENCE_LEN: usize = 64 * 1024;
/// The longest variant name a message may carry.
pub const MAX_VARIANT_NAME_LEN: usize = 32;
/// Length of a sealing key (an X25519 public key).
pub const SEALING_KEY_LEN: usize = 32;
/// The largest signed reference-value set a message may present (a set
/// of one image's PCRs and events is under 4 KiB).
pub const MAX_REFERENCE_VALUES_LEN: usize = 16 * 1024;
/// The largest attestation frame payload read: the evidence, the name,
/// the key, the presented set and their field headers.
pub const MAX_MESSAGE_LEN: usize = MAX_EVIDENCE_LEN + MAX_REFERENCE_VALUES_LEN + 256;

/// What one side sent: its evidence and the sealing key it offers, or
/// nothing (it does not attest).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttestationMessage {
    /// The variant and its evidence; `None`: the sender does not attest.
    pub evidence: Option<(Variant, Vec<u8>)>,
    /// The X25519 public key the sender offers for sealing to it on this
    /// connection; only with evidence (the evidence binds it).
    pub sealing_key: Option<[u8; SEALING_KEY_LEN]>,
    /// A signed reference-value set of the sender's image, presented for
    /// a verifier that pins its release key; only with evidence.
    pub reference_values: Option<Vec<u8>>,
}

impl AttestationMessage {
    /// The message of a side that does not attest.
    pub fn none() -> AttestationMessage {
        AttestationMessage::default()
    }

    /// Encodes the message (protobuf).
    pub fn encode(&self) -> Vec<u8> {
        let (variant, evidence) = match &self.evidence {
            Some((v, e)) => (v.name().to_string(), e.clone()),
            None => (String::new(), Vec::new()),
        };
        Attestation {
            variant,
            evidence,
            sealing_key: self.sealing_key.map(|k| k.to_vec()).unwrap_or_default(),
            reference_values: self.reference_values.clone().unwrap_or_default(),
        }
        .encode_to_vec()
    }

    /// Decodes and checks a message: it parses; every field is within its
    /// bound; a variant comes with evidence and evidence with a variant
    /// this build knows; a sealing key is 32 bytes and comes with evidence.
    pub fn decode(bytes: &[u8]) -> Result<AttestationMessage, AtlsError> {
        let bad = AtlsError::Message;
        if bytes.len() > MAX_MESSAGE_LEN {
            return Err(bad(MessageFault::TooLarge(bytes.len())));
        }
        let m = Attestation::decode(bytes).map_err(|e| bad(MessageFault::NotAMessage(e)))?;
        if m.variant.len() > MAX_VARIANT_NAME_LEN {
            return Err(bad(MessageFault::VariantNameTooLong(m.variant.len())));
        }
        if m.evidence.len() > MAX_EVIDENCE_LEN {
            return Err(bad(MessageFault::EvidenceTooLarge(m.evidence.len())));
        }
        let evidence = match (m.variant.is_empty(), m.evidence.is_empty()) {
            (true, true) => None,
            (false, false) => {
                let variant =
                    Variant::from_name(&m.variant).ok_or_else(|| AtlsError::UnknownVariant {
                        name: m.variant.clone(),
                    })?;
                Some((variant, m.evidence))
            }
            (true, false) => return Err(bad(MessageFault::EvidenceWithoutVariant)),
            (false, true) => return Err(bad(MessageFault::VariantWithoutEvidence)),
        };
        let sealing_key = match m.sealing_key.len() {
            0 => None,
            SEALING_KEY_LEN if evidence.is_some() => {
                let mut k = [0u8; SEALING_KEY_LEN];
                k.copy_from_slice(&m.sealing_key);
                Some(k)
            }
            SEALING_KEY_LEN => return Err(bad(MessageFault::SealingKeyWithoutEvidence)),
            n => return Err(bad(MessageFault::SealingKeyLength(n))),
        };
        let reference_values = match m.reference_values.len() {
            0 => None,
            n if n > MAX_REFERENCE_VALUES_LEN => {
                return Err(bad(MessageFault::ReferenceValuesTooLarge(n)));
            }
            _ if evidence.is_none() => {
                return Err(bad(MessageFault::ReferenceValuesWithoutEvidence));
            }
            _ => Some(m.reference_values),
        };
        Ok(AttestationMessage {
            evidence,
            sealing_key,
            reference_values,
        })
    }
}

impl AttestationMessage {
    /// Checks this message's evidence with the one of `validators` of its
    /// variant, against the `extra_data` that `bind` gives for the sealing
    /// key the message carries (the session's, see
    /// [`super::binding::extra_data`]). No evidence is
    /// [`AtlsError::MissingEvidence`]; a variant none of `validators`
    /// checks is [`AtlsError::VariantNotAccepted`].
    pub fn verify(
        &self,
        validators: &[Arc<dyn Validator>],
        bind: impl FnOnce(Option<&[u8; SEALING_KEY_LEN]>) -> Result<[u8; EXTRA_DATA_LEN], AtlsError>,
    ) -> Result<Attested, AtlsError> {
        let Some((variant, evidence)) = &self.evidence else {
            return Err(AtlsError::MissingEvidence);
        };
        let validator = validators
            .iter()
            .find(|v| v.variant() == *variant)
            .ok_or_else(|| AtlsError::VariantNotAccepted {
                variant: *variant,
                accepted: validators.iter().map(|v| v.variant()).collect(),
            })?;
        let extra = bind(self.sealing_key.as_ref())?;
        validator
            .validate_presented(evidence, &extra, self.reference_values.as_deref())
            .map_err(AtlsError::Attestation)
    }
}

/// Writes `message` as one frame and flushes it.
pub fn write<W: Write + ?Sized>(w: &mut W, message: &AttestationMessage) -> Result<(), AtlsError> {
    frame::write_frame(w, FrameKind::Message, &message.encode())
        .and_then(|()| w.flush())
        .map_err(AtlsError::from_io)
}

/// Writes the trailer a server answers a refused client with, and flushes it.
pub fn write_refusal<W: Write + ?Sized>(w: &mut W) -> Result<(), AtlsError> {
    let status = Status::permission_denied("the server refused this client's attestation");
    frame::write_frame(w, FrameKind::Trailer, &status.to_proto().encode_to_vec())
        .and_then(|()| w.flush())
        .map_err(AtlsError::from_io)
}

/// Reads the peer's message: one frame of at most [`MAX_MESSAGE_LEN`]
/// bytes. A status trailer instead (a server refusing this client) is
/// [`AtlsError::Refused`].
pub fn read<R: Read + ?Sized>(r: &mut R) -> Result<AttestationMessage, AtlsError> {
    let f = frame::read_frame(r, MAX_MESSAGE_LEN as u32).map_err(|e| match e {
        FrameError::Timeout => AtlsError::Timeout,
        FrameError::Io(e) => AtlsError::from_io(e),
        FrameError::Eof => AtlsError::Io(AtlsIo::ClosedBeforeAttesting),
        FrameError::TooLarge { len, max } => {
            AtlsError::Message(MessageFault::FrameTooLarge { len, max })
        }
        FrameError::Truncated { wanted, got } => {
            AtlsError::Message(MessageFault::FrameTruncated { wanted, got })
        }
        FrameError::BadFlags(b) => AtlsError::Message(MessageFault::FrameFlags(b)),
    })?;
    match f.kind {
        FrameKind::Message => AttestationMessage::decode(&f.payload),
        FrameKind::Trailer => {
            let status = confboot_proto::rpc::Status::decode(f.payload.as_slice())
                .map(Status::from_proto)
                .map_err(|e| AtlsError::Message(MessageFault::TrailerNotStatus(e)))?;
            match status.code {
                Code::PermissionDenied => Err(AtlsError::Refused(status.message)),
                code => Err(AtlsError::Message(MessageFault::UnexpectedStatus(code))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_contradictions_are_refused() {
        for m in [
            AttestationMessage::none(),
            AttestationMessage {
                evidence: Some((Variant::QemuVtpm, vec![1, 2, 3])),
                sealing_key: None,
                reference_values: None,
            },
            AttestationMessage {
                evidence: Some((Variant::SevSnp, vec![4; MAX_EVIDENCE_LEN])),
                sealing_key: Some([9; SEALING_KEY_LEN]),
                reference_values: None,
            },
            AttestationMessage {
                evidence: Some((Variant::QemuVtpm, vec![3; 10])),
                sealing_key: None,
                reference_values: Some(vec![5; MAX_REFERENCE_VALUES_LEN]),
            },
        ] {
            assert_eq!(AttestationMessage::decode(&m.encode()).unwrap(), m);
        }
        let raw = |variant: &str, evidence: Vec<u8>, key: Vec<u8>| {
            Attestation {
                variant: variant.into(),
                evidence,
                sealing_key: key,
                reference_values: Vec::new(),
            }
            .encode_to_vec()
        };
        for (bytes, what) in [
            (raw("", vec![1], vec![]), "evidence without a variant"),
            (
                raw("qemu-vtpm", vec![], vec![]),
                "a variant without evidence",
            ),
            (
                raw("", vec![], vec![7; 32]),
                "a sealing key without evidence",
            ),
            (
                raw("qemu-vtpm", vec![1], vec![7; 31]),
                "a sealing key of 31",
            ),
            (
                raw("qemu-vtpm", vec![0; MAX_EVIDENCE_LEN + 1], vec![]),
                "over",
            ),
            (raw(&"x".repeat(33), vec![1], vec![]), "variant name of 33"),
            (vec![0xff; 8], "not a message"),
        ] {
            let e = AttestationMessage::decode(&bytes).unwrap_err();
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
        let with_set = |evidence: Vec<u8>, set: Vec<u8>| {
            Attestation {
                variant: if evidence.is_empty() { "" } else { "qemu-vtpm" }.into(),
                evidence,
                sealing_key: Vec::new(),
                reference_values: set,
            }
            .encode_to_vec()
        };
        for (bytes, what) in [
            (
                with_set(vec![], vec![1]),
                "a reference-value set without evidence",
            ),
            (
                with_set(vec![1], vec![1; MAX_REFERENCE_VALUES_LEN + 1]),
                "a reference-value set of 16385 bytes",
            ),
        ] {
            let e = AttestationMessage::decode(&bytes).unwrap_err();
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
        assert_eq!(
            AttestationMessage::decode(&raw("sgx", vec![1], vec![])),
            Err(AtlsError::UnknownVariant { name: "sgx".into() })
        );
    }

    #[test]
    fn a_refusal_reads_as_refused_and_an_oversized_frame_is_refused_unread() {
        let mut buf = Vec::new();
        write_refusal(&mut buf).unwrap();
        assert!(matches!(
            read(&mut buf.as_slice()),
            Err(AtlsError::Refused(_))
        ));
        let huge = [0x00, 0x00, 0x02, 0x00, 0x00]; // 128 KiB announced
        assert!(matches!(
            read(&mut &huge[..]),
            Err(AtlsError::Message(MessageFault::FrameTooLarge {
                len: 131072,
                ..
            }))
        ));
        let mut buf = Vec::new();
        write(&mut buf, &AttestationMessage::none()).unwrap();
        assert_eq!(
            read(&mut buf.as_slice()).unwrap(),
            AttestationMessage::none()
        );
    }
}
