//! A test Azure confidential VM for end-to-end tests: a swtpm that holds
//! what Azure's paravisor leaves in its vTPM, made here for the test.
//!
//! - An RSA-2048 restricted signing key (RSASSA, SHA-256), created in the
//!   owner hierarchy and persisted at `0x81000003`, as the paravisor's
//!   attestation key is.
//! - Runtime claims whose `HCLAkPub` is that key (JWK), and an SEV-SNP
//!   report whose `REPORT_DATA` is SHA-256 of those claims followed by 32
//!   zero bytes, signed by a test VCEK ([`crate::snp`]: the test ARK that
//!   a test policy pins).
//! - The HCL report (header, SNP report, IGVM request header, claims) in
//!   NV index `0x01400001`, owner-readable.
//!
//! The production issuer (`confboot_azure::AzureIssuer`) reads and quotes
//! it unchanged, and the production validator checks what it sends. The
//! TPM commands that only the paravisor runs (create and persist the key,
//! define and write the index) are marshalled here and sent through the
//! swtpm socket's transport.

use std::sync::{Arc, Mutex};

use confboot_azure::{
    AZURE_AK_HANDLE, AzureIssuer, HARDWARE_REPORT_OFFSET, HCL_REPORT_NV_INDEX, IGVM_HEADER_OFFSET,
    REPORT_TYPE_SNP, VARIABLE_DATA_OFFSET,
};
use confboot_tpm::swtpm::Swtpm;
use confboot_tpm::{TcpTransport, Tpm, TpmError, Transport};
use confboot_util::{base64, hex};

use crate::snp::{Guest, TestAmd, TestChip, unsigned_report};

const TPM_RH_OWNER: u32 = 0x4000_0001;
const TPM_RS_PW: u32 = 0x4000_0009;

/// A command frame with one empty password session.
fn command(cc: u32, handles: &[u32], params: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for h in handles {
        body.extend_from_slice(&h.to_be_bytes());
    }
    body.extend_from_slice(&9u32.to_be_bytes());
    body.extend_from_slice(&TPM_RS_PW.to_be_bytes());
    body.extend_from_slice(&[0, 0, 0, 0, 0]);
    body.extend_from_slice(params);
    let mut frame = Vec::new();
    frame.extend_from_slice(&0x8002u16.to_be_bytes());
    frame.extend_from_slice(&((10 + body.len()) as u32).to_be_bytes());
    frame.extend_from_slice(&cc.to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

fn send(t: &mut TcpTransport, frame: &[u8], what: &str) -> Result<Vec<u8>, TpmError> {
    let r = t.transact(frame)?;
    let rc = u32::from_be_bytes([r[6], r[7], r[8], r[9]]);
    if rc != 0 {
        return Err(TpmError::Transport(format!(
            "{what}: response code {rc:#x}"
        )));
    }
    Ok(r)
}

fn tpm2b(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The RSA attestation key's template: restricted, sign, fixedTPM,
/// fixedParent, sensitiveDataOrigin, userWithAuth; RSASSA SHA-256, 2048 bits.
fn rsa_ak_template() -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&0x0001u16.to_be_bytes()); // TPM_ALG_RSA
    t.extend_from_slice(&0x000Bu16.to_be_bytes()); // nameAlg SHA-256
    t.extend_from_slice(&0x0005_0072u32.to_be_bytes());
    tpm2b(&mut t, &[]); // authPolicy
    t.extend_from_slice(&0x0010u16.to_be_bytes()); // symmetric: NULL
    t.extend_from_slice(&0x0014u16.to_be_bytes()); // scheme: RSASSA
    t.extend_from_slice(&0x000Bu16.to_be_bytes()); // SHA-256
    t.extend_from_slice(&2048u16.to_be_bytes());
    t.extend_from_slice(&0u32.to_be_bytes()); // exponent: 65537
    tpm2b(&mut t, &[]); // unique
    t
}

/// Creates the RSA key, persists it at [`AZURE_AK_HANDLE`], and returns its
/// modulus.
fn make_rsa_ak(t: &mut TcpTransport) -> Result<Vec<u8>, TpmError> {
    let mut params = Vec::new();
    params.extend_from_slice(&[0, 4, 0, 0, 0, 0]); // inSensitive
    tpm2b(&mut params, &rsa_ak_template());
    params.extend_from_slice(&[0, 0]); // outsideInfo
    params.extend_from_slice(&0u32.to_be_bytes()); // creationPCR
    let r = send(
        t,
        &command(0x0131, &[TPM_RH_OWNER], &params),
        "CreatePrimary",
    )?;
    let handle = u32::from_be_bytes([r[10], r[11], r[12], r[13]]);
    // After the handle and parameterSize: TPM2B_PUBLIC; the template's
    // fixed part is 22 bytes, then the modulus as TPM2B.
    let public = &r[18 + 2..];
    let at = 22;
    let n_len = u16::from_be_bytes([public[at], public[at + 1]]) as usize;
    let n = public[at + 2..at + 2 + n_len].to_vec();
    send(
        t,
        &command(
            0x0120,
            &[TPM_RH_OWNER, handle],
            &AZURE_AK_HANDLE.to_be_bytes(),
        ),
        "EvictControl",
    )?;
    let mut flush = Vec::new();
    flush.extend_from_slice(&0x8001u16.to_be_bytes());
    flush.extend_from_slice(&14u32.to_be_bytes());
    flush.extend_from_slice(&0x0165u32.to_be_bytes());
    flush.extend_from_slice(&handle.to_be_bytes());
    send(t, &flush, "FlushContext")?;
    Ok(n)
}

/// Defines `index` (owner read and write) holding `data`.
fn write_nv(t: &mut TcpTransport, index: u32, data: &[u8]) -> Result<(), TpmError> {
    let mut public = Vec::new();
    public.extend_from_slice(&index.to_be_bytes());
    public.extend_from_slice(&0x000Bu16.to_be_bytes());
    // OWNERWRITE | AUTHWRITE | OWNERREAD | AUTHREAD
    public.extend_from_slice(&((1u32 << 1) | (1 << 2) | (1 << 17) | (1 << 18)).to_be_bytes());
    tpm2b(&mut public, &[]);
    public.extend_from_slice(&(data.len() as u16).to_be_bytes());
    let mut params = Vec::new();
    tpm2b(&mut params, &[]); // auth
    tpm2b(&mut params, &public);
    send(
        t,
        &command(0x012A, &[TPM_RH_OWNER], &params),
        "NV_DefineSpace",
    )?;
    for (i, chunk) in data.chunks(512).enumerate() {
        let mut params = Vec::new();
        tpm2b(&mut params, chunk);
        params.extend_from_slice(&((i * 512) as u16).to_be_bytes());
        send(
            t,
            &command(0x0137, &[TPM_RH_OWNER, index], &params),
            "NV_Write",
        )?;
    }
    Ok(())
}

/// The runtime claims of a VM whose attestation key has modulus `n`.
pub fn runtime_claims(n: &[u8]) -> Vec<u8> {
    format!(
        r#"{{"keys":[{{"kid":"HCLAkPub","key_ops":["sign"],"kty":"RSA","e":"AQAB","n":"{}"}}],"vm-configuration":{{"console-enabled":false,"secure-boot":true,"tpm-enabled":true,"vmUniqueId":"confboot-test"}},"user-data":"{}"}}"#,
        base64::encode_url(n),
        "00".repeat(64)
    )
    .into_bytes()
}

/// An HCL report of an SEV-SNP `report` and the runtime `claims`, laid out
/// as the paravisor writes it.
pub fn hcl_report(report: &[u8], claims: &[u8]) -> Vec<u8> {
    let end = VARIABLE_DATA_OFFSET + claims.len();
    let mut b = vec![0u8; end];
    let mut put = |at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put(4, 2); // version
    put(8, end as u32); // report size
    put(12, 2); // request type
    let h = IGVM_HEADER_OFFSET;
    put(h, claims.len() as u32 + 20);
    put(h + 4, 1);
    put(h + 8, REPORT_TYPE_SNP);
    put(h + 12, 1); // SHA-256
    put(h + 16, claims.len() as u32);
    b[..4].copy_from_slice(b"HCLA");
    b[HARDWARE_REPORT_OFFSET..HARDWARE_REPORT_OFFSET + report.len()].copy_from_slice(report);
    b[VARIABLE_DATA_OFFSET..].copy_from_slice(claims);
    b
}

/// SHA-256 of `bytes`.
fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().try_into().expect("32 bytes")
}

/// What the test VM's report says, and how it is made.
pub struct AzureVmSpec<'a> {
    /// The chip whose id and TCB the report carries, and whose key signs.
    pub chip: &'a TestChip,
    /// The paravisor's launch.
    pub guest: Guest,
    /// The claims' key is another one than the vTPM's (a forged HCL report).
    pub claims_key: Option<Vec<u8>>,
    /// The image: the digests extended into PCR 4 and PCR 9 (as the
    /// firmware and the kernel's EFI stub would).
    pub image: (&'a [u8], &'a [u8]),
}

/// A test Azure confidential VM: its swtpm, ready for the production issuer.
pub struct AzureVm {
    /// The paravisor's vTPM.
    pub swtpm: Swtpm,
    /// The HCL report it holds.
    pub hcl_report: Vec<u8>,
    /// The attestation key's modulus.
    pub ak_modulus: Vec<u8>,
    /// The VCEK and the ASK (DER), which the issuer sends.
    pub vcek_chain: Vec<Vec<u8>>,
    /// PCRs 4 and 9 as the image left them.
    pub image_pcrs: [(u32, [u8; 32]); 2],
}

impl AzureVm {
    /// Starts a swtpm and leaves in it what the paravisor would.
    pub fn start(amd: &TestAmd, spec: AzureVmSpec<'_>) -> Result<AzureVm, TpmError> {
        let swtpm = Swtpm::start()?;
        let mut t = TcpTransport::connect(swtpm.addr())?;
        let ak_modulus = make_rsa_ak(&mut t)?;
        let claims = runtime_claims(spec.claims_key.as_deref().unwrap_or(&ak_modulus));
        let mut report_data = [0u8; 64];
        report_data[..32].copy_from_slice(&sha256(&claims));
        let mut report = unsigned_report(spec.chip, &spec.guest, report_data, 0);
        spec.chip.sign(&mut report);
        let hcl_report = hcl_report(&report, &claims);
        write_nv(&mut t, HCL_REPORT_NV_INDEX, &hcl_report)?;
        drop(t);
        let mut tpm = swtpm.connect()?;
        let mut image_pcrs = [(4, [0u8; 32]), (9, [0u8; 32])];
        for ((index, value), part) in image_pcrs.iter_mut().zip([spec.image.0, spec.image.1]) {
            let digest = sha256(part);
            tpm.pcr_extend(*index, &digest)?;
            *value = sha256(&[[0u8; 32], digest].concat());
        }
        drop(tpm);
        Ok(AzureVm {
            swtpm,
            hcl_report,
            ak_modulus,
            vcek_chain: vec![spec.chip.vcek_der.clone(), amd.ask_der.clone()],
            image_pcrs,
        })
    }

    /// The production issuer over this VM's vTPM (one connection, held).
    pub fn issuer(&self) -> Result<Arc<AzureIssuer<Mutex<Tpm>>>, TpmError> {
        Ok(Arc::new(
            AzureIssuer::new(Mutex::new(self.swtpm.connect()?))
                .with_vcek_chain(self.vcek_chain.clone()),
        ))
    }

    /// PCRs 4 and 9 of this VM's image, as an `azure-sev-snp` policy's `pcrs`.
    pub fn image_pcrs_json(&self) -> String {
        let entries: Vec<String> = self
            .image_pcrs
            .iter()
            .map(|(i, v)| format!(r#""{i}": {{"expected": "{}"}}"#, hex::encode(v)))
            .collect();
        format!("{{{}}}", entries.join(", "))
    }
}
