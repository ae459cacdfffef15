//! Nonces and the binding of evidence to a certificate key.
//!
//! Both nonces are 32 random bytes drawn with ring's `SystemRandom`, one per
//! handshake, and travel inside the TLS handshake itself:
//!
//! - **Client → server** (the server attests): in the SNI, as lowercase hex
//!   split into two DNS labels of 32 digits each:
//!   `<hex of bytes 0..16>.<hex of bytes 16..32>` (65 characters). A DNS
//!   name's last label may not be all digits, so [`Nonce::for_server_name`]
//!   draws again in the rare case (p ≈ 3·10⁻⁷) that the second label would be.
//! - **Server → client** (the client attests): in the CertificateRequest's
//!   acceptable-CA list (`certificate_authorities`), as the only entry: a DER
//!   X.500 `Name` with one RDN, commonName = the 64 lowercase hex digits as a
//!   PrintableString — what Go's `pkix.Name{CommonName: hex(nonce)}` encodes,
//!   as Constellation does. Decoding also accepts a UTF8String.
//!
//! Binding: `user_data = SHA-256(SPKI DER of the certificate key)` and
//! `extra_data = SHA-256(user_data ‖ nonce)`; the evidence must carry
//! `extra_data` (TPM qualifying data, SNP report_data).

use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};

use super::error::AtlsError;
use confboot_attest::EXTRA_DATA_LEN;

/// Length of a nonce in bytes.
pub const NONCE_LEN: usize = 32;

/// A handshake nonce: 32 random bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_LEN]);

impl std::fmt::Debug for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nonce({})", confboot_util::hex::encode(&self.0))
    }
}

/// OID 2.5.4.3 (commonName), DER-encoded with its tag and length.
const CN_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_PRINTABLE: u8 = 0x13;
const TAG_UTF8: u8 = 0x0c;

impl Nonce {
    /// Draws a fresh nonce from the system's secure random source.
    pub fn random() -> Result<Nonce, AtlsError> {
        let mut n = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut n)
            .map_err(|_| AtlsError::Nonce("the system random source failed".into()))?;
        Ok(Nonce(n))
    }

    /// Draws a fresh nonce whose SNI encoding is a valid DNS name (see the
    /// module documentation).
    pub fn for_server_name() -> Result<Nonce, AtlsError> {
        loop {
            let n = Nonce::random()?;
            if !n.0[16..].iter().all(|b| b >> 4 < 10 && b & 0xf < 10) {
                return Ok(n);
            }
        }
    }

    /// The SNI form: `<32 hex digits>.<32 hex digits>`.
    pub fn to_server_name(&self) -> String {
        format!(
            "{}.{}",
            confboot_util::hex::encode(&self.0[..16]),
            confboot_util::hex::encode(&self.0[16..])
        )
    }

    /// Parses the SNI form. Anything else (other label count or length, not
    /// hex) is refused.
    pub fn from_server_name(name: &str) -> Result<Nonce, AtlsError> {
        let bad = || AtlsError::Nonce(format!("SNI {name:?} is not a nonce (<32 hex>.<32 hex>)"));
        let (a, b) = name.split_once('.').ok_or_else(bad)?;
        if a.len() != 32 || b.len() != 32 {
            return Err(bad());
        }
        let mut n = [0u8; NONCE_LEN];
        n[..16].copy_from_slice(&confboot_util::hex::decode(a).map_err(|_| bad())?);
        n[16..].copy_from_slice(&confboot_util::hex::decode(b).map_err(|_| bad())?);
        Ok(Nonce(n))
    }

    /// The acceptable-CA form: DER `Name` { SET { SEQUENCE { commonName,
    /// PrintableString(64 hex digits) } } } (77 bytes).
    pub fn to_distinguished_name(&self) -> Vec<u8> {
        let hex = confboot_util::hex::encode(&self.0);
        let mut atv = Vec::with_capacity(73);
        atv.extend_from_slice(&CN_OID);
        atv.extend_from_slice(&[TAG_PRINTABLE, hex.len() as u8]);
        atv.extend_from_slice(hex.as_bytes());
        let atv = tlv(TAG_SEQUENCE, &atv);
        let rdn = tlv(TAG_SET, &atv);
        tlv(TAG_SEQUENCE, &rdn)
    }

    /// Parses the acceptable-CA form (PrintableString or UTF8String).
    pub fn from_distinguished_name(der: &[u8]) -> Result<Nonce, AtlsError> {
        let bad = |why: &str| AtlsError::Nonce(format!("acceptable-CA name is not a nonce: {why}"));
        let rdns = untlv(TAG_SEQUENCE, der).ok_or_else(|| bad("not a SEQUENCE"))?;
        let atv = untlv(TAG_SET, rdns).ok_or_else(|| bad("not one SET"))?;
        let atv = untlv(TAG_SEQUENCE, atv).ok_or_else(|| bad("not one attribute"))?;
        let value = atv
            .strip_prefix(&CN_OID[..])
            .ok_or_else(|| bad("not a commonName"))?;
        let text = untlv(TAG_PRINTABLE, value)
            .or_else(|| untlv(TAG_UTF8, value))
            .ok_or_else(|| bad("commonName is not a string"))?;
        let bytes = std::str::from_utf8(text)
            .ok()
            .and_then(|t| confboot_util::hex::decode(t).ok())
            .ok_or_else(|| bad("commonName is not hex"))?;
        let n: [u8; NONCE_LEN] = bytes
            .try_into()
            .map_err(|_| bad("commonName is not 32 bytes of hex"))?;
        Ok(Nonce(n))
    }
}

/// Encodes a DER TLV with a short-form length (contents under 128 bytes).
fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    debug_assert!(contents.len() < 128);
    let mut v = Vec::with_capacity(contents.len() + 2);
    v.push(tag);
    v.push(contents.len() as u8);
    v.extend_from_slice(contents);
    v
}

/// Decodes exactly one DER TLV with a short-form length; `None` on any
/// other shape, including trailing bytes.
fn untlv(tag: u8, der: &[u8]) -> Option<&[u8]> {
    match der {
        [t, len, rest @ ..] if *t == tag && *len < 0x80 && rest.len() == *len as usize => {
            Some(rest)
        }
        _ => None,
    }
}

/// `user_data = SHA-256(spki_der)`: what ties evidence to a certificate key.
pub fn user_data(spki_der: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, spki_der).as_ref());
    out
}

/// `extra_data = SHA-256(SHA-256(spki_der) ‖ nonce)`: what the evidence of a
/// certificate with this key must carry in this handshake.
pub fn extra_data(spki_der: &[u8], nonce: &Nonce) -> [u8; EXTRA_DATA_LEN] {
    let mut input = [0u8; 32 + NONCE_LEN];
    input[..32].copy_from_slice(&user_data(spki_der));
    input[32..].copy_from_slice(&nonce.0);
    let mut out = [0u8; EXTRA_DATA_LEN];
    out.copy_from_slice(digest(&SHA256, &input).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_name_round_trips_and_is_a_dns_name() {
        for _ in 0..64 {
            let n = Nonce::for_server_name().unwrap();
            let name = n.to_server_name();
            assert_eq!(name.len(), 65);
            assert!(rustls::pki_types::DnsName::try_from(name.as_str()).is_ok());
            assert_eq!(Nonce::from_server_name(&name).unwrap(), n);
            assert_eq!(
                Nonce::from_server_name(&name.to_uppercase()).unwrap(),
                n,
                "either case"
            );
        }
        let n = Nonce([0x11; 32]);
        assert_eq!(
            n.to_server_name(),
            "11111111111111111111111111111111.11111111111111111111111111111111"
        );
    }

    #[test]
    fn malformed_server_names_are_refused() {
        let good = Nonce([7; 32]).to_server_name();
        for bad in [
            "",
            "example.com",
            &good[..64],
            &format!("{good}.x"),
            &good.replace('.', ""),
            &format!("{}g.{}", &good[..31], &good[33..]),
        ] {
            assert!(
                matches!(Nonce::from_server_name(bad), Err(AtlsError::Nonce(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn distinguished_name_round_trips_and_parses_as_x509_name() {
        use x509_parser::prelude::FromDer;
        let n = Nonce::random().unwrap();
        let der = n.to_distinguished_name();
        assert_eq!(der.len(), 77);
        assert_eq!(Nonce::from_distinguished_name(&der).unwrap(), n);
        let (rest, name) = x509_parser::x509::X509Name::from_der(&der).unwrap();
        assert!(rest.is_empty());
        let cn = name.iter_common_name().next().unwrap().as_str().unwrap();
        assert_eq!(cn, confboot_util::hex::encode(&n.0));
        // UTF8String is accepted too.
        let mut utf8 = der.clone();
        utf8[11] = TAG_UTF8;
        assert_eq!(Nonce::from_distinguished_name(&utf8).unwrap(), n);
        // Trailing bytes, truncation and other attributes are refused.
        let mut long = der.clone();
        long.push(0);
        assert!(Nonce::from_distinguished_name(&long).is_err());
        assert!(Nonce::from_distinguished_name(&der[..76]).is_err());
        let mut other = der.clone();
        other[10] = 0x0a; // 2.5.4.10, organizationName
        assert!(Nonce::from_distinguished_name(&other).is_err());
    }

    #[test]
    fn extra_data_binds_key_and_nonce() {
        let a = extra_data(b"key a", &Nonce([1; 32]));
        assert_ne!(a, extra_data(b"key b", &Nonce([1; 32])));
        assert_ne!(a, extra_data(b"key a", &Nonce([2; 32])));
        let mut cat = user_data(b"key a").to_vec();
        cat.extend_from_slice(&[1; 32]);
        assert_eq!(&a[..], digest(&SHA256, &cat).as_ref());
    }
}
