//! TPM 2.0 access that works in a static musl binary: commands are marshaled
//! with the pure-Rust `tpm2-protocol` crate (pinned =1.2.3) or, where its
//! owned types would not give back the exact bytes the TPM signed, by hand
//! ([`structures`]). One [`Tpm`] is one persistent connection over a
//! [`Transport`]: `/dev/tpmrm0` (then `/dev/tpm0`) on a node, swtpm's TCP
//! socket in tests ([`swtpm::Swtpm`]).
//!
//! What confboot needs and nothing more: read all 24 SHA-256 PCRs, extend a
//! PCR, load or create the attestation key (AK), quote, read an NV index.
//!
//! ```no_run
//! use confboot_tpm::{Tpm, DEFAULT_AK_HANDLE};
//! let mut tpm = Tpm::open_device()?;
//! let ak = tpm.load_or_create_ak(DEFAULT_AK_HANDLE)?;
//! let quote = tpm.quote(&ak, &[0u8; 32], &(0..24).collect::<Vec<u32>>())?;
//! # Ok::<(), confboot_tpm::TpmError>(())
//! ```

pub mod event_log;
pub mod structures;
pub mod swtpm;
pub mod transport;

use std::net::SocketAddr;

use tpm2_protocol::{
    TpmWriter,
    basic::{TpmHandle, TpmUint16},
    data::{
        Tpm2bAuth, Tpm2bData, Tpm2bNonce, TpmAlgId, TpmCc, TpmSt, TpmaSession, TpmlDigestValues,
        TpmlPcrSelection, TpmsAuthCommand, TpmsPcrSelect, TpmsPcrSelection, TpmsSchemeHash, TpmtHa,
        TpmtSigScheme, TpmuHa, TpmuSigScheme,
    },
    frame::{
        TpmFlushContextCommand, TpmFrame, TpmNvReadCommand, TpmNvReadPublicCommand,
        TpmNvReadPublicResponse, TpmNvReadResponse, TpmPcrExtendCommand, TpmPcrReadCommand,
        TpmPcrReadResponse, TpmQuoteCommand, TpmReadPublicCommand, TpmResponse, TpmUnmarshalBody,
        tpm_marshal_command,
    },
};

use structures::{
    PCR_COUNT, Reader, SHA256_LEN, TPM_ALG_SHA256, Writer, ak_template, parse_ecc_public,
};
pub use transport::{DeviceTransport, TcpTransport, Transport};

/// Persistent handle where confboot looks for a provisioned AK (Azure's
/// and Constellation's choice).
pub const DEFAULT_AK_HANDLE: u32 = 0x8100_0003;
/// NV index of the AK certificate (DER), as Azure provisions it.
pub const AK_CERT_NV_INDEX: u32 = 0x01C1_01D0;
/// The owner hierarchy (`TPM_RH_OWNER`).
pub const TPM_RH_OWNER: u32 = 0x4000_0001;
/// The endorsement hierarchy (`TPM_RH_ENDORSEMENT`).
pub const TPM_RH_ENDORSEMENT: u32 = 0x4000_000B;

/// The Name of an object with SHA-256 as its name algorithm: the algorithm
/// id followed by SHA-256 of its `TPMT_PUBLIC` (TPM 2.0 Part 1, 16).
pub fn object_name(public_area: &[u8]) -> Vec<u8> {
    let mut name = structures::TPM_ALG_SHA256.to_be_bytes().to_vec();
    name.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, public_area).as_ref());
    name
}

/// The Qualified Name a TPM gives a primary object of `hierarchy` (the
/// hierarchy's handle stands for its parent's Qualified Name): what a quote
/// names as `qualifiedSigner` when that object signed it.
pub fn primary_qualified_name(hierarchy: u32, public_area: &[u8]) -> Vec<u8> {
    let mut input = hierarchy.to_be_bytes().to_vec();
    input.extend_from_slice(&object_name(public_area));
    let mut qn = structures::TPM_ALG_SHA256.to_be_bytes().to_vec();
    qn.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, &input).as_ref());
    qn
}
/// The password session handle (`TPM_RS_PW`).
pub const TPM_RS_PW: u32 = 0x4000_0009;
/// PCR that marks a node as bootstrapped (extended with the cluster id).
pub const CLUSTER_ID_PCR: u32 = 15;
/// PCR the kernel's IMA extends at run time (from `boot_aggregate` on, one
/// extend per file its policy measures): its value tells what a machine has
/// done since boot, not which image it booted.
pub const IMA_PCR: u32 = 10;
/// Largest NV index read (an AK certificate is 1–2 KiB).
pub const MAX_NV_READ_LEN: usize = 8192;

/// Why a TPM operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TpmError {
    /// The device or socket failed (open, read, write).
    #[error("TPM transport: {0}")]
    Transport(String),
    /// The device or socket failed on an I/O operation (the error kept).
    #[error("TPM transport: {0}")]
    Io(#[source] confboot_util::IoFailure),
    /// The TPM answered with an error code.
    #[error("TPM2_{command} failed with response code {rc:#x}")]
    ResponseCode {
        /// The command that failed.
        command: &'static str,
        /// The TPM response code.
        rc: u32,
    },
    /// The TPM's answer (or a structure) could not be parsed.
    #[error("malformed TPM data: {0}")]
    Malformed(String),
    /// An argument or a TPM object is not what confboot can use.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl TpmError {
    /// Whether this is `TPM_RC_HANDLE` (the handle does not exist), in any
    /// parameter position.
    pub fn is_handle_missing(&self) -> bool {
        matches!(self, TpmError::ResponseCode { rc, .. } if rc & 0x80 != 0 && rc & 0x3f == 0x0b)
    }
}

impl From<structures::ParseError> for TpmError {
    fn from(e: structures::ParseError) -> Self {
        TpmError::Malformed(e.0)
    }
}

fn wire(what: &str) -> impl Fn(tpm2_protocol::TpmError) -> TpmError + '_ {
    move |e| TpmError::Malformed(format!("{what}: {e:?}"))
}

/// An attestation key loaded in the TPM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttestationKey {
    /// The TPM handle (persistent `0x81…` or transient `0x80…`).
    pub handle: u32,
    /// The key's public area, `TPMT_PUBLIC` bytes as the TPM returned them.
    pub public_area: Vec<u8>,
    /// Whether confboot created it (transient: flush it when done).
    pub transient: bool,
}

/// A quote: the signed `TPMS_ATTEST` and its `TPMT_SIGNATURE`, both as raw
/// TPM bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote {
    /// `TPMS_ATTEST` bytes (what the signature covers).
    pub attest: Vec<u8>,
    /// `TPMT_SIGNATURE` bytes.
    pub signature: Vec<u8>,
}

/// `TPM_ALG_RSASSA`.
pub const TPM_ALG_RSASSA: u16 = 0x0014;
/// `TPM_ALG_RSA`.
const TPM_ALG_RSA: u16 = 0x0001;
/// The longest RSA signature [`Tpm::quote_rsassa`] takes (RSA-4096).
pub const MAX_RSA_SIGNATURE_LEN: usize = 512;

/// One persistent connection to a TPM.
pub struct Tpm {
    transport: Box<dyn Transport>,
}

fn password_session() -> TpmsAuthCommand {
    TpmsAuthCommand {
        session_handle: TpmHandle::new(TPM_RS_PW),
        nonce: Tpm2bNonce::default(),
        session_attributes: TpmaSession::default(),
        hmac: Tpm2bAuth::default(),
    }
}

/// A selection of SHA-256 PCRs for `tpm2-protocol` commands.
fn sha256_selection(pcr_indices: &[u32]) -> Result<TpmlPcrSelection, TpmError> {
    if let Some(bad) = pcr_indices.iter().find(|&&i| i as usize >= PCR_COUNT) {
        return Err(TpmError::Unsupported(format!(
            "PCR {bad} (a TPM has PCRs 0..{PCR_COUNT})"
        )));
    }
    let bitmap = structures::pcr_bitmap(pcr_indices);
    let mut list = TpmlPcrSelection::new();
    list.try_push(TpmsPcrSelection {
        hash: TpmAlgId::Sha256,
        pcr_select: TpmsPcrSelect::try_from(&bitmap[..]).map_err(wire("PCR selection"))?,
    })
    .map_err(wire("PCR selection"))?;
    Ok(list)
}

/// `TPM_RC_OBJECT_MEMORY`: no room for another loaded object.
pub const RC_OBJECT_MEMORY: u32 = 0x902;
/// `TPM_CAP_HANDLES`.
const TPM_CAP_HANDLES: u32 = 1;
/// The first transient object handle.
const TRANSIENT_FIRST: u32 = 0x8000_0000;
/// Most handles asked for in one GetCapability (a TPM holds a few objects).
const MAX_LISTED_HANDLES: u32 = 64;

/// How often a command is sent when the TPM answers with a transient
/// warning ([`is_transient`]).
pub const TRANSIENT_ATTEMPTS: usize = 5;

/// Whether a response code asks to send the command again: `TPM_RC_RETRY`,
/// `TPM_RC_YIELDED`, `TPM_RC_TESTING` (a resource manager or a busy TPM).
pub fn is_transient(rc: u32) -> bool {
    matches!(rc, 0x922 | 0x908 | 0x90a)
}

/// Response code of a response frame (bytes 6..10; the transport checked
/// the header is whole).
fn response_code(response: &[u8]) -> u32 {
    u32::from_be_bytes([response[6], response[7], response[8], response[9]])
}

impl Tpm {
    /// Uses an already open transport.
    pub fn new(transport: Box<dyn Transport>) -> Self {
        Tpm { transport }
    }

    /// Opens `/dev/tpmrm0`, else `/dev/tpm0`.
    pub fn open_device() -> Result<Self, TpmError> {
        Ok(Tpm::new(Box::new(DeviceTransport::open_default()?)))
    }

    /// Connects to swtpm's TCP data port.
    pub fn connect_tcp(addr: SocketAddr) -> Result<Self, TpmError> {
        Ok(Tpm::new(Box::new(TcpTransport::connect(addr)?)))
    }

    /// Opens the TPM a command line names: `device` or a `/dev/...` path
    /// (`/dev/tpmrm0`, else `/dev/tpm0`), or `HOST:PORT` of a swtpm socket.
    pub fn open(spec: &str) -> Result<Self, TpmError> {
        if Tpm::is_device_spec(spec) {
            Tpm::open_device()
        } else {
            let addr = spec.parse().map_err(|e| {
                TpmError::Transport(format!("{spec:?} is neither `device` nor HOST:PORT: {e}"))
            })?;
            Tpm::connect_tcp(addr)
        }
    }

    /// Whether a [`Tpm::open`] spec names the machine's TPM device (not a
    /// swtpm socket).
    pub fn is_device_spec(spec: &str) -> bool {
        spec == "device" || spec.starts_with("/dev/")
    }

    /// What this connection talks to, for logs.
    pub fn describe(&self) -> String {
        self.transport.describe()
    }

    /// Sends a command frame; returns the response frame after checking its
    /// envelope with `tpm2-protocol` and that the response code is success.
    fn transact(
        &mut self,
        command: &[u8],
        cc: TpmCc,
        name: &'static str,
    ) -> Result<Vec<u8>, TpmError> {
        log::trace!("TPM2_{name}: {} command bytes", command.len());
        let mut attempt = 1;
        let response = loop {
            let response = self.transport.transact(command)?;
            let rc = response_code(&response);
            if rc == 0 {
                break response;
            }
            if is_transient(rc) && attempt < TRANSIENT_ATTEMPTS {
                log::debug!("TPM2_{name}: transient response code {rc:#x}, retrying");
                std::thread::sleep(std::time::Duration::from_millis(10 * attempt as u64));
                attempt += 1;
                continue;
            }
            return Err(TpmError::ResponseCode { command: name, rc });
        };
        let view = TpmResponse::cast(&response).map_err(wire(name))?;
        view.validate(cc).map_err(wire(name))?;
        Ok(response)
    }

    /// Marshals a command with `tpm2-protocol` and sends it.
    fn send<C: TpmFrame>(
        &mut self,
        command: &C,
        sessions: &[TpmsAuthCommand],
        name: &'static str,
    ) -> Result<Vec<u8>, TpmError> {
        let mut buf = [0u8; 4096];
        let mut writer = TpmWriter::new(&mut buf);
        let tag = if sessions.is_empty() {
            TpmSt::NoSessions
        } else {
            TpmSt::Sessions
        };
        tpm_marshal_command(command, tag, sessions, &mut writer).map_err(wire(name))?;
        let bytes = writer.as_bytes().to_vec();
        self.transact(&bytes, command.cc(), name)
    }

    /// Sends a command and unmarshals the response with `tpm2-protocol`.
    fn execute<C: TpmFrame, R: TpmUnmarshalBody>(
        &mut self,
        command: &C,
        sessions: &[TpmsAuthCommand],
        name: &'static str,
    ) -> Result<R, TpmError> {
        let response = self.send(command, sessions, name)?;
        TpmResponse::cast(&response)
            .and_then(|v| v.unmarshal::<R>())
            .map_err(wire(name))
    }

    /// Reads the given SHA-256 PCRs; returns `(index, digest)` ascending.
    /// TPM2_PCR_Read returns at most 8 digests per call, so this repeats
    /// until every requested PCR was read.
    pub fn pcr_read(&mut self, pcr_indices: &[u32]) -> Result<Vec<(u32, [u8; 32])>, TpmError> {
        let mut wanted: Vec<u32> = pcr_indices.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let mut values: Vec<(u32, [u8; 32])> = Vec::with_capacity(wanted.len());
        while !wanted.is_empty() {
            let command = TpmPcrReadCommand {
                handles: [],
                pcr_selection_in: sha256_selection(&wanted)?,
            };
            let response: TpmPcrReadResponse = self.execute(&command, &[], "PCR_Read")?;
            let mut returned = Vec::new();
            for sel in response.pcr_selection_out.iter() {
                if sel.hash != TpmAlgId::Sha256 {
                    return Err(TpmError::Malformed(format!(
                        "PCR_Read returned bank {:?}",
                        sel.hash
                    )));
                }
                let bitmap: &[u8] = &sel.pcr_select;
                for i in 0..bitmap.len().min(4) * 8 {
                    if bitmap[i / 8] & (1 << (i % 8)) != 0 {
                        returned.push(i as u32);
                    }
                }
            }
            if returned.is_empty() || returned.len() != response.pcr_values.len() {
                return Err(TpmError::Malformed(format!(
                    "PCR_Read returned {} digests for {} selected PCRs (SHA-256 bank allocated?)",
                    response.pcr_values.len(),
                    returned.len()
                )));
            }
            for (index, digest) in returned.iter().zip(response.pcr_values.iter()) {
                let digest: [u8; 32] = (**digest).try_into().map_err(|_| {
                    TpmError::Malformed(format!("PCR {index} digest of {} bytes", digest.len()))
                })?;
                if !wanted.contains(index) {
                    return Err(TpmError::Malformed(format!(
                        "PCR_Read returned PCR {index}, which was not asked for"
                    )));
                }
                values.push((*index, digest));
            }
            wanted.retain(|i| !returned.contains(i));
        }
        values.sort_unstable_by_key(|(i, _)| *i);
        Ok(values)
    }

    /// Reads all 24 SHA-256 PCRs.
    pub fn pcr_read_all(&mut self) -> Result<Vec<(u32, [u8; 32])>, TpmError> {
        self.pcr_read(&(0..PCR_COUNT as u32).collect::<Vec<_>>())
    }

    /// Extends one PCR's SHA-256 bank with `digest`:
    /// new = SHA-256(old ‖ digest).
    pub fn pcr_extend(&mut self, pcr_index: u32, digest: &[u8; 32]) -> Result<(), TpmError> {
        if pcr_index as usize >= PCR_COUNT {
            return Err(TpmError::Unsupported(format!("PCR {pcr_index}")));
        }
        let mut digests = TpmlDigestValues::new();
        digests
            .try_push(TpmtHa {
                hash_alg: TpmAlgId::Sha256,
                digest: TpmuHa::Digest(digest[..].try_into().map_err(wire("PCR_Extend"))?),
            })
            .map_err(wire("PCR_Extend"))?;
        let command = TpmPcrExtendCommand {
            handles: [TpmHandle::new(pcr_index)],
            digests,
        };
        self.send(&command, &[password_session()], "PCR_Extend")?;
        Ok(())
    }

    /// Reads a key's public area (`TPMT_PUBLIC` bytes) from its handle.
    pub fn read_public(&mut self, handle: u32) -> Result<Vec<u8>, TpmError> {
        let command = TpmReadPublicCommand {
            handles: [TpmHandle::new(handle)],
        };
        let response = self.send(&command, &[], "ReadPublic")?;
        // outPublic is TPM2B_PUBLIC; take its exact bytes.
        let mut r = Reader::new(&response[transport::HEADER_LEN..], "ReadPublic response");
        let public = r.tpm2b(structures::MAX_PUBLIC_LEN, "outPublic")?;
        Ok(public.to_vec())
    }

    /// Loads the AK from a persistent handle. Fails if the handle is empty
    /// or the key is not a restricted ECDSA P-256 signing key.
    pub fn load_ak(&mut self, persistent_handle: u32) -> Result<AttestationKey, TpmError> {
        let public_area = self.read_public(persistent_handle)?;
        check_ak_public(&public_area)?;
        Ok(AttestationKey {
            handle: persistent_handle,
            public_area,
            transient: false,
        })
    }

    /// Creates the AK in the owner hierarchy (TPM2_CreatePrimary with
    /// [`structures::ak_template`]; marshaled by hand). The key is transient:
    /// [`Tpm::flush`] it when done. Deterministic: the same owner seed gives
    /// the same key.
    pub fn create_ak(&mut self) -> Result<AttestationKey, TpmError> {
        let template = ak_template();
        let mut params = Writer::default();
        // inSensitive: TPM2B_SENSITIVE_CREATE { userAuth = empty, data = empty }
        params.u16(4).u16(0).u16(0);
        params.tpm2b(&template); // inPublic
        params.u16(0); // outsideInfo
        params.u32(0); // creationPCR: empty TPML_PCR_SELECTION
        let command = command_with_password(0x0000_0131, &[TPM_RH_OWNER], &params.bytes);
        let response = self.transact(&command, TpmCc::CreatePrimary, "CreatePrimary")?;
        let mut r = Reader::new(&response[transport::HEADER_LEN..], "CreatePrimary response");
        let handle = r.u32()?;
        let _param_size = r.u32()?;
        let public_area = r.tpm2b(structures::MAX_PUBLIC_LEN, "outPublic")?.to_vec();
        check_ak_public(&public_area)?;
        log::debug!("created a transient AK at {handle:#010x}");
        Ok(AttestationKey {
            handle,
            public_area,
            transient: true,
        })
    }

    /// The handles of the transient objects loaded in the TPM (as this
    /// connection sees them: all of them on a raw device or a swtpm socket,
    /// this process's own under a resource manager).
    pub fn transient_handles(&mut self) -> Result<Vec<u32>, TpmError> {
        // TPM2_GetCapability(TPM_CAP_HANDLES, first transient handle, count).
        let mut params = Writer::default();
        params
            .u32(TPM_CAP_HANDLES)
            .u32(TRANSIENT_FIRST)
            .u32(MAX_LISTED_HANDLES);
        let mut frame = Writer::default();
        frame
            .u16(0x8001)
            .u32((transport::HEADER_LEN + params.bytes.len()) as u32)
            .u32(0x0000_017a)
            .raw(&params.bytes);
        let response = self.transact(&frame.bytes, TpmCc::GetCapability, "GetCapability")?;
        let mut r = Reader::new(&response[transport::HEADER_LEN..], "GetCapability response");
        let _more = r.u8()?;
        if r.u32()? != TPM_CAP_HANDLES {
            return Err(TpmError::Malformed(
                "GetCapability: not a handle list".into(),
            ));
        }
        let count = r.u32()?;
        if count > MAX_LISTED_HANDLES {
            return Err(TpmError::Malformed(format!(
                "GetCapability: {count} handles, asked at most {MAX_LISTED_HANDLES}"
            )));
        }
        let mut handles = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let h = r.u32()?;
            if h >> 24 == 0x80 {
                handles.push(h);
            }
        }
        Ok(handles)
    }

    /// Loads the AK from `persistent_handle`, or creates one in the owner
    /// hierarchy when that handle is empty.
    ///
    /// When the TPM's object memory is full (`TPM_RC_OBJECT_MEMORY`) the
    /// transient objects in it are flushed and the AK loaded once more:
    /// without a resource manager (a raw device, a swtpm socket: one client
    /// at a time), objects a process loaded stay after it is killed, and
    /// after a few such deaths no AK fits; under a resource manager a
    /// process sees, and flushes, only its own.
    pub fn load_or_create_ak(
        &mut self,
        persistent_handle: u32,
    ) -> Result<AttestationKey, TpmError> {
        match self.load_or_create_ak_once(persistent_handle) {
            Err(TpmError::ResponseCode {
                rc: RC_OBJECT_MEMORY,
                command,
            }) => {
                let left = self.transient_handles()?;
                log::warn!(
                    "TPM2_{command}: the TPM's object memory is full; flushing the {} transient \
                     object(s) left in it (by a process that ended without flushing them)",
                    left.len()
                );
                for h in left {
                    self.flush(h)?;
                }
                self.load_or_create_ak_once(persistent_handle)
            }
            other => other,
        }
    }

    fn load_or_create_ak_once(
        &mut self,
        persistent_handle: u32,
    ) -> Result<AttestationKey, TpmError> {
        match self.read_public(persistent_handle) {
            // Azure's paravisor persists its RSA attestation key here (the
            // key its HCL report names, which `azure-sev-snp` evidence
            // quotes with): confboot's own ECC AK is created beside it.
            Ok(public) if public.starts_with(&TPM_ALG_RSA.to_be_bytes()) => {
                log::info!(
                    "the key at {persistent_handle:#010x} is an RSA key (a paravisor's); creating \
                     an ECC AK in the owner hierarchy"
                );
                return self.create_ak();
            }
            _ => {}
        }
        match self.load_ak(persistent_handle) {
            Ok(ak) => Ok(ak),
            Err(e) if e.is_handle_missing() => {
                log::info!(
                    "no AK at {persistent_handle:#010x}; creating one in the owner hierarchy"
                );
                self.create_ak()
            }
            Err(e) => Err(e),
        }
    }

    /// Flushes a transient object (e.g. an AK from [`Tpm::create_ak`]).
    pub fn flush(&mut self, handle: u32) -> Result<(), TpmError> {
        let command = TpmFlushContextCommand {
            handles: [],
            flush_handle: TpmHandle::new(handle),
        };
        self.send(&command, &[], "FlushContext")?;
        Ok(())
    }

    /// Quotes the SHA-256 PCRs `pcr_indices` with the AK (ECDSA-SHA256),
    /// qualifying data = `qualifying_data` (at most 64 bytes).
    pub fn quote(
        &mut self,
        ak: &AttestationKey,
        qualifying_data: &[u8],
        pcr_indices: &[u32],
    ) -> Result<Quote, TpmError> {
        let (attest, signature) =
            self.quote_raw(ak.handle, TpmAlgId::Ecdsa, qualifying_data, pcr_indices)?;
        structures::parse_ecdsa_signature(&signature)?;
        Ok(Quote { attest, signature })
    }

    /// Quotes the SHA-256 PCRs `pcr_indices` with the RSA signing key at
    /// `key_handle` (RSASSA-PKCS1-v1_5 with SHA-256, as the attestation key
    /// of Azure's paravisor vTPM signs), qualifying data =
    /// `qualifying_data` (at most 64 bytes). The quote's `signature` is the
    /// raw RSA signature, not a `TPMT_SIGNATURE`.
    pub fn quote_rsassa(
        &mut self,
        key_handle: u32,
        qualifying_data: &[u8],
        pcr_indices: &[u32],
    ) -> Result<Quote, TpmError> {
        let (attest, signature) =
            self.quote_raw(key_handle, TpmAlgId::Rsassa, qualifying_data, pcr_indices)?;
        let mut p = Reader::new(&signature, "Quote signature");
        // TPMT_SIGNATURE { sigAlg = RSASSA, hash = SHA-256, TPM2B sig }.
        let (alg, hash) = (p.u16()?, p.u16()?);
        if alg != TPM_ALG_RSASSA || hash != TPM_ALG_SHA256 {
            return Err(TpmError::Malformed(format!(
                "Quote: signature scheme {alg:#06x}/{hash:#06x}, want RSASSA/SHA-256"
            )));
        }
        let signature = p.tpm2b(MAX_RSA_SIGNATURE_LEN, "signature")?.to_vec();
        p.finish()?;
        Ok(Quote { attest, signature })
    }

    /// TPM2_Quote of the SHA-256 PCRs `pcr_indices` by the key at `handle`
    /// under `scheme` with SHA-256: the exact bytes the TPM signed
    /// (TPMS_ATTEST) and the signature's bytes (TPMT_SIGNATURE), unparsed.
    fn quote_raw(
        &mut self,
        handle: u32,
        scheme: TpmAlgId,
        qualifying_data: &[u8],
        pcr_indices: &[u32],
    ) -> Result<(Vec<u8>, Vec<u8>), TpmError> {
        let command = TpmQuoteCommand {
            handles: [TpmHandle::new(handle)],
            qualifying_data: Tpm2bData::try_from(qualifying_data).map_err(wire("Quote"))?,
            in_scheme: TpmtSigScheme {
                scheme,
                details: TpmuSigScheme::Hash(TpmsSchemeHash {
                    hash_alg: TpmAlgId::Sha256,
                }),
            },
            pcr_select: sha256_selection(pcr_indices)?,
        };
        let response = self.send(&command, &[password_session()], "Quote")?;
        // Sessions response: parameterSize u32, then quoted (TPM2B_ATTEST) and
        // signature (TPMT_SIGNATURE).
        let mut r = Reader::new(&response[transport::HEADER_LEN..], "Quote response");
        let param_size = r.u32()? as usize;
        let params = r.take(param_size)?;
        let mut p = Reader::new(params, "Quote parameters");
        let attest = p.tpm2b(structures::MAX_ATTEST_LEN, "quoted")?.to_vec();
        let signature = p.take(p.remaining())?.to_vec();
        Ok((attest, signature))
    }

    /// Reads a whole NV index (size from TPM2_NV_ReadPublic, at most
    /// [`MAX_NV_READ_LEN`]), in chunks the TPM accepts, with owner authorization.
    pub fn nv_read(&mut self, nv_index: u32) -> Result<Vec<u8>, TpmError> {
        let public: TpmNvReadPublicResponse = self.execute(
            &TpmNvReadPublicCommand {
                handles: [TpmHandle::new(nv_index)],
            },
            &[],
            "NV_ReadPublic",
        )?;
        let size = u16::from(public.nv_public.inner.data_size) as usize;
        if size > MAX_NV_READ_LEN {
            return Err(TpmError::Unsupported(format!(
                "NV index {nv_index:#010x} holds {size} bytes, at most {MAX_NV_READ_LEN} read"
            )));
        }
        let mut data = Vec::with_capacity(size);
        // 512 is below every TPM's MAX_NV_BUFFER_SIZE (swtpm: 2048).
        const CHUNK: usize = 512;
        while data.len() < size {
            let n = CHUNK.min(size - data.len());
            let command = TpmNvReadCommand {
                handles: [TpmHandle::new(TPM_RH_OWNER), TpmHandle::new(nv_index)],
                size: TpmUint16::new(n as u16),
                offset: TpmUint16::new(data.len() as u16),
            };
            let response: TpmNvReadResponse =
                self.execute(&command, &[password_session()], "NV_Read")?;
            if response.data.len() != n {
                return Err(TpmError::Malformed(format!(
                    "NV_Read returned {} bytes, asked {n}",
                    response.data.len()
                )));
            }
            data.extend_from_slice(&response.data);
        }
        Ok(data)
    }
}

/// Builds a command frame with one password session (empty password) for
/// commands marshaled by hand.
fn command_with_password(cc: u32, handles: &[u32], parameters: &[u8]) -> Vec<u8> {
    let mut body = Writer::default();
    for h in handles {
        body.u32(*h);
    }
    // Authorization area: size, then TPMS_AUTH_COMMAND { TPM_RS_PW, nonce
    // empty, attributes 0, hmac (password) empty }.
    body.u32(9).u32(TPM_RS_PW).u16(0).u8(0).u16(0);
    body.raw(parameters);
    let mut frame = Writer::default();
    frame
        .u16(0x8002)
        .u32((transport::HEADER_LEN + body.bytes.len()) as u32)
        .u32(cc)
        .raw(&body.bytes);
    frame.bytes
}

/// Checks that a public area is an AK confboot can use: ECC P-256, name
/// algorithm SHA-256, restricted signing, TPM-generated and TPM-bound.
pub fn check_ak_public(public_area: &[u8]) -> Result<structures::EccPublic, TpmError> {
    let p = parse_ecc_public(public_area)?;
    let required = structures::object_attributes::REQUIRED_FOR_AK;
    if p.object_attributes & required != required {
        return Err(TpmError::Unsupported(format!(
            "key attributes {:#010x} lack {:#010x} (restricted, sign, fixedTPM, sensitiveDataOrigin)",
            p.object_attributes, required
        )));
    }
    if p.name_alg != TPM_ALG_SHA256 {
        return Err(TpmError::Unsupported(format!(
            "key name algorithm {:#06x}, want SHA-256",
            p.name_alg
        )));
    }
    Ok(p)
}

/// SHA-256 over the concatenation of PCR values, as a quote's `pcrDigest`.
pub fn pcr_digest<'a>(pcr_values: impl IntoIterator<Item = &'a [u8]>) -> [u8; SHA256_LEN] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for v in pcr_values {
        ctx.update(v);
    }
    ctx.finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_marshaled_command_is_a_valid_frame() {
        use tpm2_protocol::frame::TpmCommand;
        let template = ak_template();
        let mut params = Writer::default();
        params.u16(4).u16(0).u16(0).tpm2b(&template).u16(0).u32(0);
        let frame = command_with_password(0x131, &[TPM_RH_OWNER], &params.bytes);
        let view = TpmCommand::cast(&frame).unwrap();
        view.validate().unwrap();
        assert_eq!(view.cc().unwrap(), TpmCc::CreatePrimary);
        assert_eq!(view.size() as usize, frame.len());
        assert_eq!(view.handles().unwrap(), &TPM_RH_OWNER.to_be_bytes());
    }

    /// A fake TPM on a socket that answers commands with `replies` in turn.
    fn fake_tpm(replies: Vec<Vec<u8>>) -> SocketAddr {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            for reply in replies {
                let mut header = [0u8; 10];
                s.read_exact(&mut header).unwrap();
                let size = u32::from_be_bytes(header[2..6].try_into().unwrap()) as usize;
                let mut rest = vec![0u8; size - 10];
                s.read_exact(&mut rest).unwrap();
                s.write_all(&reply).unwrap();
            }
        });
        addr
    }

    fn error_response(rc: u32) -> Vec<u8> {
        let mut r = vec![0x80, 0x01, 0, 0, 0, 10];
        r.extend_from_slice(&rc.to_be_bytes());
        r
    }

    #[test]
    fn transient_warnings_are_retried_and_errors_are_not() {
        let success = vec![0x80, 0x01, 0, 0, 0, 10, 0, 0, 0, 0];
        let mut tpm = Tpm::connect_tcp(fake_tpm(vec![
            error_response(0x922),
            error_response(0x908),
            success,
        ]))
        .unwrap();
        tpm.flush(0x8000_0000).unwrap();
        let mut tpm = Tpm::connect_tcp(fake_tpm(vec![error_response(0x18b)])).unwrap();
        assert_eq!(
            tpm.flush(0x8000_0000),
            Err(TpmError::ResponseCode {
                command: "FlushContext",
                rc: 0x18b
            })
        );
        let mut tpm =
            Tpm::connect_tcp(fake_tpm(vec![error_response(0x922); TRANSIENT_ATTEMPTS])).unwrap();
        assert_eq!(
            tpm.flush(0x8000_0000),
            Err(TpmError::ResponseCode {
                command: "FlushContext",
                rc: 0x922
            })
        );
    }

    #[test]
    fn handle_missing_is_recognized_in_any_position() {
        for rc in [0x18b, 0x28b, 0x98b] {
            assert!(TpmError::ResponseCode { command: "x", rc }.is_handle_missing());
        }
        assert!(
            !TpmError::ResponseCode {
                command: "x",
                rc: 0x101
            }
            .is_handle_missing()
        );
    }
}
