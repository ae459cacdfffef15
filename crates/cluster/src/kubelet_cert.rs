//! The kubelet's serving certificate, signed by the cluster CA at join time,
//! as Constellation's join service signs it.
//!
//! The node makes a P-256 key and a certificate signing request
//! ([`KubeletCertRequest::new`]): subject `CN=system:node:<name>,
//! O=system:nodes` and its IP addresses as subject alternative names. The
//! join service checks the request and signs it ([`KubeletCertSigner`]):
//! the CSR's own signature (proof that the node holds the key), exactly that
//! subject with a valid node name, IP addresses only (no DNS names, so no
//! wildcard), at most [`MAX_KUBELET_CERT_IPS`], and no other requested
//! extension (a CSR that asks to be a CA is refused). The certificate is
//! made from the checked fields alone: server authentication, digital
//! signature, the validity the join service is configured with.
//!
//! The node installs the certificate and key where the kubelet looks for
//! them before it would make a self-signed pair ([`install_kubelet_cert`]:
//! `kubelet.crt` and `kubelet.key` in its `--cert-dir`,
//! `/var/lib/kubelet/pki`).

use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    SanType, SerialNumber,
};
use rustls::pki_types::{CertificateDer, CertificateSigningRequestDer};
use zeroize::{Zeroize, Zeroizing};

/// The largest CSR accepted (a P-256 CSR with eight IPs is under 600 bytes).
pub const MAX_KUBELET_CSR_BYTES: usize = 4 * 1024;
/// The most IP addresses one certificate may name.
pub const MAX_KUBELET_CERT_IPS: usize = 8;
/// The organization Kubernetes' Node authorizer expects.
pub const NODES_ORGANIZATION: &str = "system:nodes";
/// The common name's prefix before the node name.
pub const NODE_COMMON_NAME_PREFIX: &str = "system:node:";
/// The validity a join service gives by default: one year.
pub const DEFAULT_KUBELET_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How far before its issue time a certificate starts to be valid (clock
/// skew between the control plane and the node).
const NOT_BEFORE_SKEW: Duration = Duration::from_secs(5 * 60);
/// The file names of the kubelet's serving certificate and key in its
/// certificate directory.
pub const KUBELET_CERT_FILE: &str = "kubelet.crt";
/// See [`KUBELET_CERT_FILE`].
pub const KUBELET_KEY_FILE: &str = "kubelet.key";

/// Why a kubelet certificate could not be requested, signed or installed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubeletCertError {
    /// The node name is not a DNS-1123 subdomain.
    #[error("node name {0:?} is not a DNS-1123 subdomain")]
    InvalidNodeName(String),
    /// The CSR is larger than [`MAX_KUBELET_CSR_BYTES`].
    #[error("kubelet CSR over {} bytes", MAX_KUBELET_CSR_BYTES)]
    CsrTooLarge,
    /// The CSR does not parse or its signature does not verify.
    #[error("kubelet CSR: {0}")]
    MalformedCsr(String),
    /// The CSR's key is not a P-256 ECDSA key.
    #[error("kubelet CSR: the key is not an ECDSA P-256 key")]
    UnsupportedKey,
    /// The CSR's subject is not `CN=system:node:<name>, O=system:nodes`.
    #[error(
        "kubelet CSR: the subject must be CN={prefix}<node name}}, \
         O={organization}: {0}",
        prefix = NODE_COMMON_NAME_PREFIX,
        organization = NODES_ORGANIZATION
    )]
    WrongSubject(SubjectFault),
    /// A subject alternative name other than an IP address.
    #[error("kubelet CSR: only IP addresses may be subject alternative names")]
    NonIpName,
    /// No IP address, too many, a repeated one, or one no node can have.
    #[error("kubelet CSR: {0}")]
    BadIpAddresses(IpFault),
    /// An extension other than subject alternative names is requested.
    #[error("kubelet CSR: the {0} extension may not be requested")]
    UnexpectedExtension(&'static str),
    /// The CA certificate or key is unusable.
    #[error("cluster CA: {0}")]
    Ca(String),
    /// Making the key, the CSR or the certificate failed.
    #[error("kubelet certificate: {0}")]
    Generate(String),
    /// The certificate or key could not be written.
    #[error("installing the kubelet certificate: {0}")]
    Install(String),
    /// The certificate a join service sent is not the one asked for.
    #[error("the kubelet certificate received is not the one asked for: {0}")]
    WrongCertificate(CertificateFault),
}

/// What is wrong with a kubelet CSR's subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubjectFault {
    /// A name is neither a UTF-8 nor a printable string.
    #[error("a name is not a UTF-8 or printable string")]
    NotText,
    /// A name other than the common name and the organization.
    #[error("a name other than CN and O")]
    OtherName,
    /// A name given twice.
    #[error("a repeated name")]
    Repeated,
    /// The organization is not the nodes' group.
    #[error("the organization differs")]
    Organization,
    /// The common name is not a node's.
    #[error("the common name differs")]
    CommonName,
}

/// What is wrong with a kubelet CSR's IP addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpFault {
    /// None.
    #[error("no IP address")]
    None,
    /// More than [`MAX_KUBELET_CERT_IPS`].
    #[error("more than {MAX_KUBELET_CERT_IPS} IP addresses")]
    TooMany,
    /// Unspecified, multicast, or given twice.
    #[error("{0} cannot be a node's address, or is repeated")]
    UnusableOrRepeated(IpAddr),
    /// The IPv4 broadcast address.
    #[error("{0} cannot be a node's address")]
    Broadcast(IpAddr),
}

/// How a kubelet certificate a join service sent differs from the one
/// asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertificateFault {
    /// It does not parse.
    #[error("it does not parse")]
    Unparsable,
    /// Bytes follow it.
    #[error("bytes after the certificate")]
    TrailingBytes,
    /// It certifies another key.
    #[error("it is for another key")]
    OtherKey,
    /// Its subject is not the request's.
    #[error("its subject differs from the request's")]
    Subject,
    /// It has no subject alternative names.
    #[error("no subject alternative names")]
    NoAlternativeNames,
    /// Its IP addresses are not the request's.
    #[error("its IP addresses differ from the request's")]
    IpAddresses,
    /// It is a CA certificate.
    #[error("it is a CA")]
    Ca,
    /// It is not for server authentication.
    #[error("it is not for server authentication")]
    NotServerAuth,
}

/// Checks a Kubernetes node name: a DNS-1123 subdomain (lowercase letters,
/// digits, `-` and `.`, labels of 1 to 63 starting and ending with a letter
/// or digit, at most 253 in all).
pub fn check_node_name(name: &str) -> Result<(), KubeletCertError> {
    let invalid = || KubeletCertError::InvalidNodeName(name.chars().take(64).collect());
    if name.is_empty() || name.len() > 253 {
        return Err(invalid());
    }
    for label in name.split('.') {
        let b = label.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        if b.is_empty()
            || b.len() > 63
            || !alnum(&b[0])
            || !alnum(&b[b.len() - 1])
            || !b.iter().all(|c| alnum(c) || *c == b'-')
        {
            return Err(invalid());
        }
    }
    Ok(())
}

fn check_ips(ips: &[IpAddr]) -> Result<(), KubeletCertError> {
    let bad = |f: IpFault| Err(KubeletCertError::BadIpAddresses(f));
    if ips.is_empty() {
        return bad(IpFault::None);
    }
    if ips.len() > MAX_KUBELET_CERT_IPS {
        return bad(IpFault::TooMany);
    }
    for (i, ip) in ips.iter().enumerate() {
        if ip.is_unspecified() || ip.is_multicast() || ips[..i].contains(ip) {
            return bad(IpFault::UnusableOrRepeated(*ip));
        }
        if let IpAddr::V4(v4) = ip
            && v4.is_broadcast()
        {
            return bad(IpFault::Broadcast(*ip));
        }
    }
    Ok(())
}

fn subject(node_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("{NODE_COMMON_NAME_PREFIX}{node_name}"),
    );
    dn.push(DnType::OrganizationName, NODES_ORGANIZATION);
    dn
}

/// What a node asks a join service to sign for its kubelet: a new P-256
/// key (kept here, a secret) and the DER CSR for it.
#[derive(Clone)]
pub struct KubeletCertRequest {
    /// The node's name (`system:node:<name>`).
    pub node_name: String,
    /// The IP addresses asked for, in order.
    pub ips: Vec<IpAddr>,
    /// The PKCS#8 PEM private key.
    pub key_pem: Zeroizing<String>,
    /// The DER CSR sent with the join request.
    pub csr_der: Vec<u8>,
    /// The key's public point, as a certificate for it carries it.
    public_key: Vec<u8>,
}

impl fmt::Debug for KubeletCertRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeletCertRequest")
            .field("node_name", &self.node_name)
            .field("ips", &self.ips)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl KubeletCertRequest {
    /// A new key and CSR for the kubelet of node `node_name` serving on `ips`.
    pub fn new(node_name: &str, ips: &[IpAddr]) -> Result<KubeletCertRequest, KubeletCertError> {
        check_node_name(node_name)?;
        check_ips(ips)?;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|e| KubeletCertError::Generate(e.to_string()))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = subject(node_name);
        params.subject_alt_names = ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
        let csr = params
            .serialize_request(&key)
            .map_err(|e| KubeletCertError::Generate(e.to_string()))?;
        Ok(KubeletCertRequest {
            node_name: node_name.to_string(),
            ips: ips.to_vec(),
            key_pem: Zeroizing::new(key.serialize_pem()),
            csr_der: csr.der().to_vec(),
            public_key: key.public_key_raw().to_vec(),
        })
    }
}

/// What a checked CSR asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletCsr {
    /// The node name from the common name.
    pub node_name: String,
    /// The IP addresses, in the CSR's order.
    pub ips: Vec<IpAddr>,
    params: CertificateSigningRequestParams,
}

impl KubeletCsr {
    /// Parses a DER CSR, verifies its signature and checks it (see the
    /// module documentation).
    pub fn parse(der: &[u8]) -> Result<KubeletCsr, KubeletCertError> {
        if der.len() > MAX_KUBELET_CSR_BYTES {
            return Err(KubeletCertError::CsrTooLarge);
        }
        let params =
            CertificateSigningRequestParams::from_der(&CertificateSigningRequestDer::from(der))
                .map_err(|e| KubeletCertError::MalformedCsr(e.to_string()))?;
        if params.public_key.algorithm() != &PKCS_ECDSA_P256_SHA256 {
            return Err(KubeletCertError::UnsupportedKey);
        }
        let p = &params.params;
        if p.is_ca != IsCa::NoCa {
            return Err(KubeletCertError::UnexpectedExtension("basic constraints"));
        }
        if !p.key_usages.is_empty() {
            return Err(KubeletCertError::UnexpectedExtension("key usage"));
        }
        if !p.extended_key_usages.is_empty() {
            return Err(KubeletCertError::UnexpectedExtension("extended key usage"));
        }
        let text = |v: &DnValue| match v {
            DnValue::Utf8String(s) => Some(s.clone()),
            DnValue::PrintableString(s) => Some(s.as_str().to_string()),
            _ => None,
        };
        let entries: Vec<(DnType, Option<String>)> = p
            .distinguished_name
            .iter()
            .map(|(t, v)| (t.clone(), text(v)))
            .collect();
        let wrong = |f: SubjectFault| Err(KubeletCertError::WrongSubject(f));
        let mut common_name = None;
        let mut organization = None;
        for (t, v) in entries {
            let Some(v) = v else {
                return wrong(SubjectFault::NotText);
            };
            let slot = match t {
                DnType::CommonName => &mut common_name,
                DnType::OrganizationName => &mut organization,
                _ => return wrong(SubjectFault::OtherName),
            };
            if slot.replace(v).is_some() {
                return wrong(SubjectFault::Repeated);
            }
        }
        if organization.as_deref() != Some(NODES_ORGANIZATION) {
            return wrong(SubjectFault::Organization);
        }
        let node_name = common_name
            .as_deref()
            .and_then(|cn| cn.strip_prefix(NODE_COMMON_NAME_PREFIX))
            .map(str::to_string);
        let Some(node_name) = node_name else {
            return wrong(SubjectFault::CommonName);
        };
        check_node_name(&node_name)?;
        let mut ips = Vec::new();
        for san in &p.subject_alt_names {
            match san {
                SanType::IpAddress(ip) => ips.push(*ip),
                _ => return Err(KubeletCertError::NonIpName),
            }
        }
        check_ips(&ips)?;
        Ok(KubeletCsr {
            node_name,
            ips,
            params,
        })
    }
}

/// Signs kubelet certificates with the cluster CA (the join service's
/// `ca.crt` and `ca.key`).
pub struct KubeletCertSigner {
    issuer: Issuer<'static, KeyPair>,
    validity: Duration,
}

/// A DER TLV: `tag`, the length (short or long form), `content`.
fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// The DER of OID 1.2.840.10045.2.1 (`id-ecPublicKey`).
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// The DER of OID 1.2.840.113549.1.1.1 (`rsaEncryption`).
const OID_RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// A PKCS#8 `PrivateKeyInfo` of `algorithm` (its DER) around `key`.
fn pkcs8_info(algorithm: &[u8], key: &[u8]) -> Zeroizing<Vec<u8>> {
    let mut content = der_tlv(0x02, &[0]);
    content.extend(der_tlv(0x30, algorithm));
    let octets = Zeroizing::new(der_tlv(0x04, key));
    content.extend_from_slice(&octets);
    let info = Zeroizing::new(der_tlv(0x30, &content));
    content.zeroize();
    info
}

/// The cluster CA's private key as PKCS#8 DER, from the PEM forms a
/// control plane has it in: `PRIVATE KEY` (PKCS#8), `EC PRIVATE KEY`
/// (SEC1: what kubeadm writes for ECDSA keys) and `RSA PRIVATE KEY`
/// (PKCS#1: kubeadm's default RSA keys).
fn ca_key_pkcs8(pem: &str) -> Result<Zeroizing<Vec<u8>>, KubeletCertError> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |what: &str| KubeletCertError::Ca(format!("the CA key is not {what}"));
    let key = PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|_| bad("a PEM private key (PKCS#8, SEC1 or PKCS#1)"))?;
    match key {
        PrivateKeyDer::Pkcs8(der) => Ok(Zeroizing::new(der.secret_pkcs8_der().to_vec())),
        PrivateKeyDer::Pkcs1(der) => {
            let mut algorithm = der_tlv(0x06, OID_RSA_ENCRYPTION);
            algorithm.extend(der_tlv(0x05, &[]));
            Ok(pkcs8_info(&algorithm, der.secret_pkcs1_der()))
        }
        PrivateKeyDer::Sec1(der) => {
            use sec1::der::{Decode, Encode};
            let ec = sec1::EcPrivateKey::from_der(der.secret_sec1_der())
                .map_err(|_| bad("a SEC1 EC private key"))?;
            let curve = ec
                .parameters
                .and_then(|p| p.named_curve())
                .ok_or_else(|| bad("a SEC1 EC private key naming its curve"))?;
            // PKCS#8 names the curve in the algorithm; the key inside
            // goes without it (RFC 5915).
            let inner = sec1::EcPrivateKey {
                private_key: ec.private_key,
                parameters: None,
                public_key: ec.public_key,
            };
            let inner = Zeroizing::new(inner.to_der().map_err(|_| bad("a SEC1 EC private key"))?);
            let mut algorithm = der_tlv(0x06, OID_EC_PUBLIC_KEY);
            algorithm.extend(der_tlv(0x06, curve.as_bytes()));
            Ok(pkcs8_info(&algorithm, &inner))
        }
        _ => Err(bad("a private key of a known form")),
    }
}

impl KubeletCertSigner {
    /// A signer from the CA's PEM certificate and PEM private key, giving
    /// certificates `validity` (at least a day).
    pub fn new(
        ca_cert_pem: &str,
        ca_key_pem: &str,
        validity: Duration,
    ) -> Result<KubeletCertSigner, KubeletCertError> {
        if validity < Duration::from_secs(24 * 3600) {
            return Err(KubeletCertError::Ca("validity under a day".into()));
        }
        let pkcs8 = ca_key_pkcs8(ca_key_pem)?;
        let key =
            KeyPair::try_from(pkcs8.as_slice()).map_err(|e| KubeletCertError::Ca(e.to_string()))?;
        let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, key)
            .map_err(|e| KubeletCertError::Ca(e.to_string()))?;
        Ok(KubeletCertSigner { issuer, validity })
    }

    /// Checks a CSR and signs it at time `now`; the DER certificate.
    pub fn sign(&self, csr_der: &[u8], now: SystemTime) -> Result<Vec<u8>, KubeletCertError> {
        let csr = KubeletCsr::parse(csr_der)?;
        self.sign_checked(&csr, now)
    }

    /// Signs an already checked CSR.
    pub fn sign_checked(
        &self,
        csr: &KubeletCsr,
        now: SystemTime,
    ) -> Result<Vec<u8>, KubeletCertError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = subject(&csr.node_name);
        params.subject_alt_names = csr.ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = (now - NOT_BEFORE_SKEW).into();
        params.not_after = (now + self.validity).into();
        let mut serial = [0u8; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut serial)
            .map_err(|_| KubeletCertError::Generate("no randomness".into()))?;
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let signed = CertificateSigningRequestParams {
            params,
            public_key: csr.params.public_key.clone(),
        }
        .signed_by(&self.issuer)
        .map_err(|e| KubeletCertError::Generate(e.to_string()))?;
        Ok(signed.der().to_vec())
    }
}

/// Checks, on the node, that the certificate a join service sent is the
/// one `request` asked for: the same key, exactly the same names, server
/// authentication, not a CA. A certificate for another key or other names
/// would leave the kubelet unable to serve, or serving as someone else.
pub fn check_kubelet_cert(
    cert_der: &[u8],
    request: &KubeletCertRequest,
) -> Result<(), KubeletCertError> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let wrong = |f: CertificateFault| Err(KubeletCertError::WrongCertificate(f));
    let Ok((rest, cert)) = X509Certificate::from_der(cert_der) else {
        return wrong(CertificateFault::Unparsable);
    };
    if !rest.is_empty() {
        return wrong(CertificateFault::TrailingBytes);
    }
    if cert.public_key().subject_public_key.data.as_ref() != request.public_key.as_slice() {
        return wrong(CertificateFault::OtherKey);
    }
    let names: Vec<String> = cert
        .subject()
        .iter_attributes()
        .map(|a| a.as_str().unwrap_or("?").to_string())
        .collect();
    let expected = vec![
        format!("{NODE_COMMON_NAME_PREFIX}{}", request.node_name),
        NODES_ORGANIZATION.to_string(),
    ];
    if names != expected {
        return wrong(CertificateFault::Subject);
    }
    let ips: Vec<IpAddr> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::IPAddress(b) => match b.len() {
                    4 => Some(IpAddr::from(<[u8; 4]>::try_from(*b).ok()?)),
                    16 => Some(IpAddr::from(<[u8; 16]>::try_from(*b).ok()?)),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
        _ => return wrong(CertificateFault::NoAlternativeNames),
    };
    if ips != request.ips {
        return wrong(CertificateFault::IpAddresses);
    }
    if cert.is_ca() {
        return wrong(CertificateFault::Ca);
    }
    match cert.extended_key_usage() {
        Ok(Some(eku)) if eku.value.server_auth => Ok(()),
        _ => wrong(CertificateFault::NotServerAuth),
    }
}

/// Writes the kubelet's certificate (PEM, mode 0644) and key (mode 0600) into
/// `cert_dir`, each as a new file renamed into place.
pub fn install_kubelet_cert(
    cert_dir: &Path,
    cert_der: &[u8],
    key_pem: &str,
) -> Result<(), KubeletCertError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let install = |e: std::io::Error| KubeletCertError::Install(e.to_string());
    std::fs::create_dir_all(cert_dir).map_err(install)?;
    let cert = CertificateDer::from(cert_der);
    let cert_pem = confboot_util::base64::pem("CERTIFICATE", &cert);
    for (name, bytes, mode) in [
        (KUBELET_KEY_FILE, key_pem.as_bytes(), 0o600),
        (KUBELET_CERT_FILE, cert_pem.as_bytes(), 0o644),
    ] {
        let path = cert_dir.join(name);
        let tmp = cert_dir.join(format!(".{name}.new"));
        let _ = std::fs::remove_file(&tmp);
        let written = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(KubeletCertError::Install(format!(
                "{}: {e}",
                path.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn ca() -> (String, String) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes");
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn openssl(args: &[&str]) -> (bool, String) {
        let out = Command::new("openssl").args(args).output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// A CSR made by rcgen from `params` with a fresh P-256 key.
    fn csr_of(params: CertificateParams) -> Vec<u8> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        params.serialize_request(&key).unwrap().der().to_vec()
    }

    /// The cluster CA's key as a real control plane has it: kubeadm writes
    /// ECDSA keys as SEC1 (`EC PRIVATE KEY`, with the curve named) and RSA
    /// keys as PKCS#1 (`RSA PRIVATE KEY`); openssl makes both here.
    #[test]
    fn a_ca_key_in_kubeadms_forms_signs() {
        let dir = std::env::temp_dir().join(format!("confboot-ca-forms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let forms: [(&str, &[&str]); 2] = [
            (
                "ec.key",
                &[
                    "ecparam",
                    "-name",
                    "prime256v1",
                    "-genkey",
                    "-noout",
                    "-out",
                ],
            ),
            ("rsa.key", &["genrsa", "-traditional", "-out"]),
        ];
        for (name, args) in forms {
            let path = dir.join(name);
            let mut all = args.to_vec();
            all.push(path.to_str().unwrap());
            if name == "rsa.key" {
                all.push("2048");
            }
            let (ok, out) = openssl(&all);
            assert!(ok, "{out}");
            let key_pem = std::fs::read_to_string(&path).unwrap();
            let label = if name == "ec.key" {
                "EC PRIVATE KEY"
            } else {
                "RSA PRIVATE KEY"
            };
            assert!(key_pem.contains(label), "{key_pem}");
            let key = KeyPair::try_from(ca_key_pkcs8(&key_pem).unwrap().as_slice()).unwrap();
            let mut params = CertificateParams::default();
            params
                .distinguished_name
                .push(DnType::CommonName, "kubernetes");
            params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca_pem = params.self_signed(&key).unwrap().pem();
            let signer = KubeletCertSigner::new(&ca_pem, &key_pem, DEFAULT_KUBELET_CERT_VALIDITY)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let request = KubeletCertRequest::new("worker-1", &ips(&["10.0.2.15"])).unwrap();
            let cert = signer.sign(&request.csr_der, SystemTime::now()).unwrap();
            check_kubelet_cert(&cert, &request).unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(ca_key_pkcs8("not a key").is_err());
    }

    #[test]
    fn a_signed_certificate_chains_to_the_ca_with_exactly_the_requested_names() {
        let (ca_pem, ca_key) = ca();
        let signer =
            KubeletCertSigner::new(&ca_pem, &ca_key, DEFAULT_KUBELET_CERT_VALIDITY).unwrap();
        let request =
            KubeletCertRequest::new("worker-1", &ips(&["10.0.2.15", "fd00::15"])).unwrap();
        let (key_pem, csr) = (&request.key_pem, &request.csr_der);
        let cert = signer.sign(csr, SystemTime::now()).unwrap();
        check_kubelet_cert(&cert, &request).unwrap();

        let dir =
            std::env::temp_dir().join(format!("confboot-kubelet-cert-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        install_kubelet_cert(&dir.join("pki"), &cert, key_pem).unwrap();
        std::fs::write(dir.join("ca.crt"), &ca_pem).unwrap();
        let (crt, key, ca_file) = (
            dir.join("pki/kubelet.crt"),
            dir.join("pki/kubelet.key"),
            dir.join("ca.crt"),
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let p = |p: &Path| p.to_str().unwrap().to_string();
        // openssl, an independent verifier: the chain, the purpose, the names.
        let (ok, out) = openssl(&[
            "verify",
            "-CAfile",
            &p(&ca_file),
            "-purpose",
            "sslserver",
            &p(&crt),
        ]);
        assert!(ok, "{out}");
        let (ok, text) = openssl(&["x509", "-in", &p(&crt), "-noout", "-text"]);
        assert!(ok, "{text}");
        assert!(
            text.contains("Subject: CN = system:node:worker-1, O = system:nodes"),
            "{text}"
        );
        assert!(
            text.contains("IP Address:10.0.2.15, IP Address:FD00:0:0:0:0:0:0:15\n"),
            "{text}"
        );
        assert!(!text.contains("DNS:"), "{text}");
        assert!(text.contains("TLS Web Server Authentication\n"), "{text}");
        assert!(text.contains("CA:FALSE"), "{text}");
        // The key installed is the certificate's.
        let (_, cert_pub) = openssl(&["x509", "-in", &p(&crt), "-noout", "-pubkey"]);
        let (_, key_pub) = openssl(&["pkey", "-in", &p(&key), "-pubout"]);
        assert_eq!(cert_pub, key_pub);
        // One year by default.
        let (_, dates) = openssl(&["x509", "-in", &p(&crt), "-noout", "-checkend", "31500000"]);
        assert!(dates.contains("will not expire"), "{dates}");
        let (_, dates) = openssl(&["x509", "-in", &p(&crt), "-noout", "-checkend", "31600000"]);
        assert!(dates.contains("will expire"), "{dates}");
        // Another CA does not verify it.
        let (other, _) = ca();
        std::fs::write(&ca_file, other).unwrap();
        let (ok, out) = openssl(&["verify", "-CAfile", &p(&ca_file), &p(&crt)]);
        assert!(!ok, "{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_requests_are_refused_before_anything_is_signed() {
        let (ca_pem, ca_key) = ca();
        let signer =
            KubeletCertSigner::new(&ca_pem, &ca_key, DEFAULT_KUBELET_CERT_VALIDITY).unwrap();
        let now = SystemTime::now();
        let base = || {
            let mut p = CertificateParams::default();
            p.distinguished_name = subject("worker-1");
            p.subject_alt_names = vec![SanType::IpAddress("10.0.2.15".parse().unwrap())];
            p
        };
        let with = |f: &dyn Fn(&mut CertificateParams)| {
            let mut p = base();
            f(&mut p);
            csr_of(p)
        };
        assert!(signer.sign(&csr_of(base()), now).is_ok());
        let cases: Vec<(Vec<u8>, KubeletCertError)> = vec![
            (
                with(&|p| p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained)),
                KubeletCertError::UnexpectedExtension("basic constraints"),
            ),
            (
                with(&|p| p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth]),
                KubeletCertError::UnexpectedExtension("extended key usage"),
            ),
            (
                with(&|p| {
                    p.subject_alt_names
                        .push(SanType::DnsName("*.cluster.local".try_into().unwrap()))
                }),
                KubeletCertError::NonIpName,
            ),
            (
                with(&|p| p.subject_alt_names.clear()),
                KubeletCertError::BadIpAddresses(IpFault::None),
            ),
            (
                with(&|p| {
                    p.subject_alt_names = (1..=9)
                        .map(|i| SanType::IpAddress(format!("10.0.0.{i}").parse().unwrap()))
                        .collect()
                }),
                KubeletCertError::BadIpAddresses(IpFault::TooMany),
            ),
            (
                with(&|p| {
                    p.subject_alt_names = vec![SanType::IpAddress("0.0.0.0".parse().unwrap())]
                }),
                KubeletCertError::BadIpAddresses(IpFault::UnusableOrRepeated(IpAddr::from([
                    0, 0, 0, 0,
                ]))),
            ),
            (
                with(&|p| p.distinguished_name = subject("Worker_1")),
                KubeletCertError::InvalidNodeName("Worker_1".into()),
            ),
            (
                with(&|p| {
                    let mut dn = DistinguishedName::new();
                    dn.push(DnType::CommonName, "system:node:worker-1");
                    dn.push(DnType::OrganizationName, "system:masters");
                    p.distinguished_name = dn;
                }),
                KubeletCertError::WrongSubject(SubjectFault::Organization),
            ),
            (
                with(&|p| {
                    let mut dn = DistinguishedName::new();
                    dn.push(DnType::CommonName, "system:admin");
                    dn.push(DnType::OrganizationName, NODES_ORGANIZATION);
                    p.distinguished_name = dn;
                }),
                KubeletCertError::WrongSubject(SubjectFault::CommonName),
            ),
            (
                with(&|p| {
                    p.distinguished_name
                        .push(DnType::OrganizationalUnitName, "x")
                }),
                KubeletCertError::WrongSubject(SubjectFault::OtherName),
            ),
            (
                vec![0x30; MAX_KUBELET_CSR_BYTES + 1],
                KubeletCertError::CsrTooLarge,
            ),
        ];
        for (csr, err) in cases {
            assert_eq!(signer.sign(&csr, now), Err(err));
        }
        // A CSR whose signature does not verify: one bit of the subject flipped.
        let mut csr = csr_of(base());
        let at = csr.windows(8).position(|w| w == b"worker-1").unwrap();
        csr[at] ^= 0x01;
        assert!(matches!(
            signer.sign(&csr, now),
            Err(KubeletCertError::MalformedCsr(_))
        ));
        // Not a P-256 key.
        let ed = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let csr = base().serialize_request(&ed).unwrap().der().to_vec();
        assert_eq!(
            signer.sign(&csr, now),
            Err(KubeletCertError::UnsupportedKey)
        );
        assert!(matches!(
            signer.sign(b"garbage", now),
            Err(KubeletCertError::MalformedCsr(_))
        ));
    }

    #[test]
    fn a_node_takes_only_the_certificate_it_asked_for() {
        let (ca_pem, ca_key) = ca();
        let signer =
            KubeletCertSigner::new(&ca_pem, &ca_key, DEFAULT_KUBELET_CERT_VALIDITY).unwrap();
        let now = SystemTime::now();
        let request = KubeletCertRequest::new("worker-1", &ips(&["10.0.2.15"])).unwrap();
        let csr = request.csr_der.clone();
        let cert = signer.sign(&csr, now).unwrap();
        check_kubelet_cert(&cert, &request).unwrap();
        // Another node's certificate: another key.
        let other = KubeletCertRequest::new("worker-1", &ips(&["10.0.2.15"])).unwrap();
        let other = signer.sign(&other.csr_der, now).unwrap();
        assert_eq!(
            check_kubelet_cert(&other, &request),
            Err(KubeletCertError::WrongCertificate(
                CertificateFault::OtherKey
            ))
        );
        assert!(check_kubelet_cert(b"junk", &request).is_err());
        // The same key, other names (as a join service that rewrote them).
        let parsed = KubeletCsr::parse(&csr).unwrap();
        let renamed = KubeletCsr {
            node_name: "worker-2".into(),
            ..parsed.clone()
        };
        let cert = signer.sign_checked(&renamed, now).unwrap();
        assert_eq!(
            check_kubelet_cert(&cert, &request),
            Err(KubeletCertError::WrongCertificate(
                CertificateFault::Subject
            ))
        );
        let readdressed = KubeletCsr {
            ips: ips(&["10.0.2.16"]),
            ..parsed
        };
        let cert = signer.sign_checked(&readdressed, now).unwrap();
        assert_eq!(
            check_kubelet_cert(&cert, &request),
            Err(KubeletCertError::WrongCertificate(
                CertificateFault::IpAddresses
            ))
        );
    }

    #[test]
    fn node_names_are_dns_subdomains() {
        for ok in ["a", "worker-1", "node.example.com", &"a".repeat(63)] {
            check_node_name(ok).unwrap();
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a..b",
            "a_b",
            &"a".repeat(64),
            "a/b",
            "a:b",
        ] {
            assert!(check_node_name(bad).is_err(), "{bad}");
        }
    }
}
