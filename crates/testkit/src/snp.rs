//! A test AMD for SEV-SNP without AMD hardware, as bytes and keys: its own
//! AMD-style roots ARK → ASK, minted here, the VCEKs the ASK signs, and the
//! P-384 keys that sign reports.
//!
//! - ARK and ASK are RSA keys signing with RSASSA-PSS SHA-384 (salt 48),
//!   as AMD's do (RSA-2048 here instead of 4096, to keep tests fast); the
//!   subject names are AMD's (`ARK-Milan`, `SEV-Milan`, `SEV-VCEK`).
//! - A VCEK's extensions (AMD's TCB and hwID OIDs) and the report layout
//!   are confboot-attest's contract: `confboot-tests` (`snp::TestAmd`)
//!   builds them with [`der`] and signs with [`AmdRoots::sign_vcek`] and
//!   [`P384Key::sign`].
//!
//! The certificates are written with a small DER writer ([`der`]): no crate
//! at hand writes RSASSA-PSS-signed certificates with ring, and the DER
//! needed is a few lines.

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use rsa::signature::{RandomizedSigner, SignatureEncoding};
use rsa::traits::PublicKeyParts;
use rsa::{RsaPrivateKey, pss};

/// The DER writer: tag-length-value and the few types certificates need.
pub mod der {
    /// One TLV.
    pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let n = content.len();
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let be = (n as u64).to_be_bytes();
            let skip = be.iter().take_while(|b| **b == 0).count();
            out.push(0x80 | (8 - skip) as u8);
            out.extend_from_slice(&be[skip..]);
        }
        out.extend_from_slice(content);
        out
    }

    /// A SEQUENCE of already encoded parts.
    pub fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
        tlv(0x30, &parts.concat())
    }

    /// An OBJECT IDENTIFIER from its dotted form.
    pub fn oid(dotted: &str) -> Vec<u8> {
        let arcs: Vec<u64> = dotted.split('.').map(|a| a.parse().unwrap()).collect();
        let mut body = vec![(arcs[0] * 40 + arcs[1]) as u8];
        for &arc in &arcs[2..] {
            let mut chunk = vec![(arc & 0x7f) as u8];
            let mut rest = arc >> 7;
            while rest > 0 {
                chunk.push(0x80 | (rest & 0x7f) as u8);
                rest >>= 7;
            }
            chunk.reverse();
            body.extend(chunk);
        }
        tlv(0x06, &body)
    }

    /// A non-negative INTEGER from big-endian bytes.
    pub fn uint(be: &[u8]) -> Vec<u8> {
        let skip = be.iter().take_while(|b| **b == 0).count().min(be.len() - 1);
        let mut body = be[skip..].to_vec();
        if body[0] & 0x80 != 0 {
            body.insert(0, 0);
        }
        tlv(0x02, &body)
    }

    /// A BIT STRING with no unused bits.
    pub fn bits(bytes: &[u8]) -> Vec<u8> {
        let mut body = vec![0];
        body.extend_from_slice(bytes);
        tlv(0x03, &body)
    }

    /// A Name with one common name.
    pub fn name(cn: &str) -> Vec<u8> {
        seq(&[tlv(0x31, &seq(&[oid("2.5.4.3"), tlv(0x0c, cn.as_bytes())]))])
    }
}

const OID_SHA384: &str = "2.16.840.1.101.3.4.2.2";

/// RSASSA-PSS with SHA-384, MGF1 SHA-384, salt 48: AMD's signature algorithm.
fn pss_sha384() -> Vec<u8> {
    use der::*;
    seq(&[
        oid("1.2.840.113549.1.1.10"),
        seq(&[
            tlv(0xa0, &seq(&[oid(OID_SHA384)])),
            tlv(
                0xa1,
                &seq(&[oid("1.2.840.113549.1.1.8"), seq(&[oid(OID_SHA384)])]),
            ),
            tlv(0xa2, &uint(&[48])),
        ]),
    ])
}

/// ring's randomness for the rsa crate.
struct RingRng(SystemRandom);

impl rsa::rand_core::RngCore for RingRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.fill(dest).expect("system randomness");
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for RingRng {}

/// A certificate signed with `key` (RSASSA-PSS SHA-384).
fn rsa_signed(
    key: &RsaPrivateKey,
    serial: u8,
    issuer: &str,
    subject: &str,
    spki: Vec<u8>,
    extensions: &[(&str, Vec<u8>)],
) -> Vec<u8> {
    use der::*;
    let mut tbs = vec![
        tlv(0xa0, &uint(&[2])),
        uint(&[serial]),
        pss_sha384(),
        name(issuer),
        seq(&[tlv(0x17, b"240101000000Z"), tlv(0x17, b"490101000000Z")]),
        name(subject),
        spki,
    ];
    if !extensions.is_empty() {
        let exts: Vec<Vec<u8>> = extensions
            .iter()
            .map(|(o, v)| seq(&[oid(o), tlv(0x04, v)]))
            .collect();
        tbs.push(tlv(0xa3, &seq(&exts)));
    }
    let tbs = seq(&tbs);
    let signer = pss::SigningKey::<sha2::Sha384>::new(key.clone());
    let signature = signer
        .sign_with_rng(&mut RingRng(SystemRandom::new()), &tbs)
        .to_vec();
    seq(&[tbs, pss_sha384(), bits(&signature)])
}

fn rsa_spki(key: &RsaPrivateKey) -> Vec<u8> {
    use der::*;
    let public = seq(&[uint(&key.n().to_bytes_be()), uint(&key.e().to_bytes_be())]);
    seq(&[
        seq(&[oid("1.2.840.113549.1.1.1"), tlv(0x05, &[])]),
        bits(&public),
    ])
}

fn pem(der: &[u8]) -> String {
    confboot_util::base64::pem("CERTIFICATE", der)
}

/// The roots of a test AMD: the ARK and ASK of product Milan, minted at
/// start.
pub struct AmdRoots {
    /// The ARK certificate, DER.
    pub ark_der: Vec<u8>,
    /// The ASK certificate, DER.
    pub ask_der: Vec<u8>,
    ask_key: RsaPrivateKey,
}

impl AmdRoots {
    /// Mints an ARK (self-signed) and an ASK (signed by the ARK).
    pub fn new() -> AmdRoots {
        let mut rng = RingRng(SystemRandom::new());
        let ark_key = RsaPrivateKey::new(&mut rng, 2048).expect("RSA key");
        let ask_key = RsaPrivateKey::new(&mut rng, 2048).expect("RSA key");
        let ark_der = rsa_signed(
            &ark_key,
            1,
            "ARK-Milan",
            "ARK-Milan",
            rsa_spki(&ark_key),
            &[],
        );
        let ask_der = rsa_signed(
            &ark_key,
            2,
            "ARK-Milan",
            "SEV-Milan",
            rsa_spki(&ask_key),
            &[],
        );
        AmdRoots {
            ark_der,
            ask_der,
            ask_key,
        }
    }

    /// The ARK and ASK as the PEM bundle an SNP policy's `rootBundles` names.
    pub fn root_bundle_pem(&self) -> String {
        pem(&self.ark_der) + &pem(&self.ask_der)
    }

    /// A VCEK, DER, signed by the ASK: subject `SEV-VCEK`, the public key
    /// `spki` ([`P384Key::spki`]) and `extensions` (OID, DER value).
    pub fn sign_vcek(&self, spki: Vec<u8>, extensions: &[(&str, Vec<u8>)]) -> Vec<u8> {
        rsa_signed(&self.ask_key, 3, "SEV-Milan", "SEV-VCEK", spki, extensions)
    }
}

impl Default for AmdRoots {
    fn default() -> Self {
        AmdRoots::new()
    }
}

/// A P-384 key of a chip (its VCEK's), which signs reports with ECDSA
/// P-384 SHA-384.
pub struct P384Key(EcdsaKeyPair);

impl P384Key {
    /// A fresh key.
    pub fn generate() -> P384Key {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        P384Key(key)
    }

    /// Its SubjectPublicKeyInfo, DER (id-ecPublicKey on secp384r1).
    pub fn spki(&self) -> Vec<u8> {
        use der::*;
        seq(&[
            seq(&[oid("1.2.840.10045.2.1"), oid("1.3.132.0.34")]),
            bits(self.0.public_key().as_ref()),
        ])
    }

    /// An ECDSA P-384 SHA-384 signature of `data`: R and S, 48 bytes each,
    /// big-endian.
    pub fn sign(&self, data: &[u8]) -> Vec<u8> {
        self.0
            .sign(&SystemRandom::new(), data)
            .unwrap()
            .as_ref()
            .to_vec()
    }
}
