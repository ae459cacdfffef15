//! Intel's collateral for TDX quotes, as Intel's PCS serves it: TCB info
//! (`/tdx/certification/v4/tcb?fmspc=…`) and the TD QE identity
//! (`/tdx/certification/v4/qe/identity`). Each is a JSON object with the
//! signed member (`tcbInfo`, `enclaveIdentity`) and `signature`: ECDSA
//! P-256 over the member's exact bytes, hex `r ‖ s`, by the Intel SGX TCB
//! Signing certificate.
//!
//! The text is read once, duplicate keys refused at every level (a second
//! `tcbInfo` must not decide what a signature over the first covers), and
//! what is checked is parsed from the very bytes the signature covers.
//! Sizes and counts are bounded ([`MAX_COLLATERAL_LEN`], [`MAX_TCB_LEVELS`]).
//! Members Intel may add later are ignored; the members read must have
//! their documented types.
//!
//! [`TcbInfo::tcb_status`] gives a platform's TCB status by Intel's
//! algorithm: the first TCB level (in Intel's order, newest first) whose
//! SGX components and PCESVN the PCK certificate reaches and whose TDX
//! components the quote's `TEE_TCB_SVN` reaches (indexes 0 and 1, the TDX
//! module's SVN and version, skipped when the module's minor version is
//! not 0: a TDX module identity then decides them).
//!
//! # Freshness, and which clock it reads
//!
//! TCB info and the QE identity are current from their `issueDate` to
//! their `nextUpdate` (checked with the quote, `check::TCB_INFO` and
//! `check::QE_IDENTITY`), the CRLs from `thisUpdate` to `nextUpdate`, the
//! certificates within their validity. None of them reads the clock here:
//! each compares with the time [`crate::TdxValidator`] gives, which is its
//! time floor (`confboot_util::floor::TimeFloor`): the guest's wall clock,
//! which the host sets, raised to the latest time seen and to the
//! `issueDate` of every TCB info and QE identity that verified, so a clock
//! set back does not make stale collateral current again. The floor lasts
//! as long as the validator unless it is given one kept in a file
//! ([`crate::TdxValidator::with_time_floor`]).
//!
//! Read by hand, not with a serde derive: a derive skips the members it ignores
//! unread, so a repeated key inside an ignored member of Intel's collateral
//! would go unrefused.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use std::fmt;

use serde_json::{Map, Value};

use super::certs::{CertError, IntelCert, SgxExtensions};
use super::quote::QeReport;
use confboot_attest::measurements::parse_json_unique_keys;

/// The largest collateral document read (Intel's are a few KB).
pub const MAX_COLLATERAL_LEN: usize = 256 * 1024;
/// The most TCB levels a document (or a module identity) may list.
pub const MAX_TCB_LEVELS: usize = 256;
/// The most TDX module identities a TCB info may list.
pub const MAX_MODULE_IDENTITIES: usize = 64;

/// Why a collateral document is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CollateralError {
    /// The document exceeds [`MAX_COLLATERAL_LEN`].
    #[error("{what}: {len} bytes, at most {MAX_COLLATERAL_LEN} are read")]
    TooLarge {
        /// The document.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// Not JSON, or a key repeated.
    #[error("{what}: {reason}")]
    Json {
        /// The document.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// A member is missing or of the wrong type or value.
    #[error("{what}: member {field}: {reason}")]
    Field {
        /// The document.
        what: &'static str,
        /// The member's path.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// No TCB level matches the platform.
    #[error("no TCB level of the {what} matches: {reason}")]
    NoMatchingLevel {
        /// The document.
        what: &'static str,
        /// What was compared.
        reason: String,
    },
}

/// A TCB status, from best to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TcbStatus {
    /// Fully patched.
    UpToDate,
    /// Patched; software mitigations are needed.
    SWHardeningNeeded,
    /// Patched; the platform's configuration needs a change.
    ConfigurationNeeded,
    /// Both of the above.
    ConfigurationAndSWHardeningNeeded,
    /// A security update is missing.
    OutOfDate,
    /// A security update is missing and the configuration needs a change.
    OutOfDateConfigurationNeeded,
    /// Revoked.
    Revoked,
}

impl TcbStatus {
    /// Every status, best first.
    pub const ALL: [TcbStatus; 7] = [
        TcbStatus::UpToDate,
        TcbStatus::SWHardeningNeeded,
        TcbStatus::ConfigurationNeeded,
        TcbStatus::ConfigurationAndSWHardeningNeeded,
        TcbStatus::OutOfDate,
        TcbStatus::OutOfDateConfigurationNeeded,
        TcbStatus::Revoked,
    ];

    /// Intel's name.
    pub fn name(self) -> &'static str {
        match self {
            TcbStatus::UpToDate => "UpToDate",
            TcbStatus::SWHardeningNeeded => "SWHardeningNeeded",
            TcbStatus::ConfigurationNeeded => "ConfigurationNeeded",
            TcbStatus::ConfigurationAndSWHardeningNeeded => "ConfigurationAndSWHardeningNeeded",
            TcbStatus::OutOfDate => "OutOfDate",
            TcbStatus::OutOfDateConfigurationNeeded => "OutOfDateConfigurationNeeded",
            TcbStatus::Revoked => "Revoked",
        }
    }

    /// Looks a status up by Intel's name (exact).
    pub fn from_name(name: &str) -> Option<TcbStatus> {
        TcbStatus::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The status of a platform whose TDX module has its own status: the
    /// worse of the two, an out-of-date module on a platform that needs a
    /// configuration change being `OutOfDateConfigurationNeeded`.
    pub fn converge(platform: TcbStatus, module: TcbStatus) -> TcbStatus {
        let config = matches!(
            platform,
            TcbStatus::ConfigurationNeeded | TcbStatus::ConfigurationAndSWHardeningNeeded
        );
        match module {
            TcbStatus::OutOfDate if config => TcbStatus::OutOfDateConfigurationNeeded,
            m => platform.max(m),
        }
    }
}

impl fmt::Display for TcbStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A TCB level keyed by one ISV SVN (QE identity, TDX module identity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsvLevel {
    /// The least ISV SVN of the level.
    pub isv_svn: u16,
    /// `tcbDate`.
    pub tcb_date: String,
    /// `tcbStatus`.
    pub status: TcbStatus,
    /// `advisoryIDs`.
    pub advisory_ids: Vec<String>,
}

/// A TCB level of a TDX TCB info.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcbLevel {
    /// `sgxtcbcomponents[].svn`.
    pub sgx_components: [u8; 16],
    /// `pcesvn`.
    pub pce_svn: u16,
    /// `tdxtcbcomponents[].svn`.
    pub tdx_components: [u8; 16],
    /// `tcbDate`.
    pub tcb_date: String,
    /// `tcbStatus`.
    pub status: TcbStatus,
    /// `advisoryIDs`.
    pub advisory_ids: Vec<String>,
}

/// The expected TDX module (`tdxModule`, or one of `tdxModuleIdentities`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdxModuleIdentity {
    /// `id` (`TDX_<minor version, 2 hex digits>`; empty for `tdxModule`).
    pub id: String,
    /// `mrsigner`: the expected `MRSIGNERSEAM`.
    pub mr_signer: [u8; 48],
    /// `attributes`: the expected `SEAMATTRIBUTES` under the mask.
    pub attributes: [u8; 8],
    /// `attributesMask`.
    pub attributes_mask: [u8; 8],
    /// `tcbLevels` (module identities only).
    pub tcb_levels: Vec<IsvLevel>,
}

impl TdxModuleIdentity {
    /// Whether `MRSIGNERSEAM` and `SEAMATTRIBUTES` (masked) are this module's.
    pub fn matches(&self, mr_signer_seam: &[u8; 48], seam_attributes: &[u8; 8]) -> bool {
        let masked = |a: &[u8; 8]| -> Vec<u8> {
            a.iter()
                .zip(self.attributes_mask)
                .map(|(a, m)| a & m)
                .collect()
        };
        &self.mr_signer == mr_signer_seam && masked(seam_attributes) == masked(&self.attributes)
    }
}

/// TDX TCB info (`tcbInfo`, id `TDX`, version 3) whose signature was
/// checked: only [`SignedTcbInfo::verify`] makes one, so unchecked
/// collateral cannot reach a verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcbInfo {
    version: u64,
    issue_date: i64,
    next_update: i64,
    fmspc: [u8; 6],
    pce_id: [u8; 2],
    tcb_evaluation_data_number: u64,
    tdx_module: Option<TdxModuleIdentity>,
    tdx_module_identities: Vec<TdxModuleIdentity>,
    tcb_levels: Vec<TcbLevel>,
}

/// A TCB info document as Intel's PCS serves it, parsed but its signature
/// not checked: [`SignedTcbInfo::verify`] turns it into a [`TcbInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedTcbInfo {
    info: TcbInfo,
    signed: Vec<u8>,
    signature: [u8; 64],
}

/// The QE identity (`enclaveIdentity`, id `TD_QE`, version 2) whose
/// signature was checked: only [`SignedQeIdentity::verify`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QeIdentity {
    id: String,
    version: u64,
    issue_date: i64,
    next_update: i64,
    tcb_evaluation_data_number: u64,
    misc_select: u32,
    misc_select_mask: u32,
    attributes: [u8; 16],
    attributes_mask: [u8; 16],
    mr_signer: [u8; 32],
    isv_prod_id: u16,
    tcb_levels: Vec<IsvLevel>,
}

/// A QE identity document as Intel's PCS serves it, parsed but its
/// signature not checked: [`SignedQeIdentity::verify`] turns it into a
/// [`QeIdentity`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedQeIdentity {
    identity: QeIdentity,
    signed: Vec<u8>,
    signature: [u8; 64],
}

/// The members of a top-level JSON object with each value's exact text.
/// `text` must be valid JSON (checked before).
fn top_level_members(text: &str) -> Vec<(String, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut depth, mut i) = (0usize, 0usize);
    let mut key: Option<String> = None;
    let mut value_start: Option<usize> = None;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && key.is_none() && value_start.is_none() {
                    key = text
                        .get(start..=i)
                        .and_then(|k| serde_json::from_str(k).ok());
                }
            }
            b':' if depth == 1 && value_start.is_none() => value_start = Some(i + 1),
            b'{' | b'[' => depth += 1,
            c @ (b'}' | b']' | b',') => {
                if depth == 1
                    && let (Some(k), Some(s)) = (key.take(), value_start.take())
                {
                    out.push((k, text.get(s..i).unwrap_or("").trim()));
                }
                if c != b',' {
                    depth = depth.saturating_sub(1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// A signed document: the signed member's exact text, its object, and
/// the signature.
type Signed<'a> = (&'a str, Map<String, Value>, [u8; 64]);

/// Reads a signed document: its `member` value's exact text and object,
/// and its signature. Any other top-level key is refused.
fn signed_document<'a>(
    what: &'static str,
    member: &str,
    bytes: &'a [u8],
) -> Result<Signed<'a>, CollateralError> {
    if bytes.len() > MAX_COLLATERAL_LEN {
        return Err(CollateralError::TooLarge {
            what,
            len: bytes.len(),
        });
    }
    let json = |reason: String| CollateralError::Json { what, reason };
    let text = std::str::from_utf8(bytes).map_err(|e| json(e.to_string()))?;
    let root = parse_json_unique_keys(text).map_err(|e| json(e.to_string()))?;
    let Value::Object(mut root) = root else {
        return Err(json("not a JSON object".into()));
    };
    if let Some(other) = root.keys().find(|k| *k != member && *k != "signature") {
        return Err(field(what, other, "unknown top-level member"));
    }
    let signature = root
        .get("signature")
        .ok_or_else(|| field(what, "signature", "missing"))?;
    let signature: [u8; 64] = hex_array(what, "signature", signature)?;
    let Some(Value::Object(body)) = root.remove(member) else {
        return Err(field(what, member, "missing or not an object"));
    };
    let raw = top_level_members(text)
        .into_iter()
        .find(|(k, _)| k == member)
        .map(|(_, v)| v)
        .ok_or_else(|| field(what, member, "missing"))?;
    Ok((raw, body, signature))
}

fn field(what: &'static str, field: &str, reason: impl ToString) -> CollateralError {
    CollateralError::Field {
        what,
        field: field.to_string(),
        reason: reason.to_string(),
    }
}

fn get<'v>(
    what: &'static str,
    obj: &'v Map<String, Value>,
    name: &str,
) -> Result<&'v Value, CollateralError> {
    obj.get(name).ok_or_else(|| field(what, name, "missing"))
}

fn hex_array<const N: usize>(
    what: &'static str,
    name: &str,
    v: &Value,
) -> Result<[u8; N], CollateralError> {
    let s = v
        .as_str()
        .ok_or_else(|| field(what, name, "not a string"))?;
    let bytes = confboot_util::hex::decode(s).map_err(|e| field(what, name, e))?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| field(what, name, format!("{} bytes, want {N}", bytes.len())))
}

fn uint(what: &'static str, name: &str, v: &Value, max: u64) -> Result<u64, CollateralError> {
    v.as_u64()
        .filter(|n| *n <= max)
        .ok_or_else(|| field(what, name, format!("not an integer 0..={max}")))
}

/// [`uint`] into the member's type, whose largest value is `max`.
fn uint_to<T: TryFrom<u64> + Into<u64> + Copy>(
    what: &'static str,
    name: &str,
    v: &Value,
    max: T,
) -> Result<T, CollateralError> {
    let n = uint(what, name, v, max.into())?;
    T::try_from(n).map_err(|_| field(what, name, format!("not an integer 0..={}", max.into())))
}

fn string(what: &'static str, name: &str, v: &Value) -> Result<String, CollateralError> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| field(what, name, "not a string"))
}

fn date(what: &'static str, name: &str, v: &Value) -> Result<i64, CollateralError> {
    let s = v
        .as_str()
        .ok_or_else(|| field(what, name, "not a string"))?;
    // Intel writes `2023-06-18T08:42:58Z`; fractions of a second are dropped.
    let whole = match s.split_once('.') {
        Some((head, tail)) if tail.ends_with('Z') => format!("{head}Z"),
        _ => s.to_string(),
    };
    if !whole.contains('T') {
        return Err(field(what, name, "not a date and time"));
    }
    confboot_util::time::parse_instant(&whole).map_err(|e| field(what, name, e))
}

fn array<'v>(
    what: &'static str,
    name: &str,
    v: &'v Value,
    max: usize,
) -> Result<&'v Vec<Value>, CollateralError> {
    let a = v
        .as_array()
        .ok_or_else(|| field(what, name, "not a list"))?;
    if a.len() > max {
        return Err(field(
            what,
            name,
            format!("{} entries, at most {max}", a.len()),
        ));
    }
    Ok(a)
}

fn object<'v>(
    what: &'static str,
    name: &str,
    v: &'v Value,
) -> Result<&'v Map<String, Value>, CollateralError> {
    v.as_object()
        .ok_or_else(|| field(what, name, "not an object"))
}

fn status(what: &'static str, name: &str, v: &Value) -> Result<TcbStatus, CollateralError> {
    let s = v
        .as_str()
        .ok_or_else(|| field(what, name, "not a string"))?;
    TcbStatus::from_name(s).ok_or_else(|| field(what, name, format!("unknown status {s:?}")))
}

fn advisories(
    what: &'static str,
    level: &Map<String, Value>,
) -> Result<Vec<String>, CollateralError> {
    match level.get("advisoryIDs") {
        None => Ok(Vec::new()),
        Some(v) => array(what, "advisoryIDs", v, 1024)?
            .iter()
            .map(|a| string(what, "advisoryIDs", a))
            .collect(),
    }
}

fn isv_levels(what: &'static str, v: &Value) -> Result<Vec<IsvLevel>, CollateralError> {
    array(what, "tcbLevels", v, MAX_TCB_LEVELS)?
        .iter()
        .map(|level| {
            let level = object(what, "tcbLevels[]", level)?;
            let tcb = object(what, "tcb", get(what, level, "tcb")?)?;
            Ok(IsvLevel {
                isv_svn: uint_to(what, "tcb.isvsvn", get(what, tcb, "isvsvn")?, u16::MAX)?,
                tcb_date: string(what, "tcbDate", get(what, level, "tcbDate")?)?,
                status: status(what, "tcbStatus", get(what, level, "tcbStatus")?)?,
                advisory_ids: advisories(what, level)?,
            })
        })
        .collect()
}

fn components(what: &'static str, name: &str, v: &Value) -> Result<[u8; 16], CollateralError> {
    let list = array(what, name, v, 16)?;
    if list.len() != 16 {
        return Err(field(
            what,
            name,
            format!("{} components, want 16", list.len()),
        ));
    }
    let mut out = [0u8; 16];
    for (slot, c) in out.iter_mut().zip(list) {
        let c = object(what, name, c)?;
        *slot = uint_to(what, name, get(what, c, "svn")?, u8::MAX)?;
    }
    Ok(out)
}

fn module_identity(
    what: &'static str,
    obj: &Map<String, Value>,
    with_levels: bool,
) -> Result<TdxModuleIdentity, CollateralError> {
    Ok(TdxModuleIdentity {
        id: match obj.get("id") {
            Some(v) => string(what, "tdxModuleIdentities[].id", v)?,
            None if !with_levels => String::new(),
            None => return Err(field(what, "tdxModuleIdentities[].id", "missing")),
        },
        mr_signer: hex_array(what, "mrsigner", get(what, obj, "mrsigner")?)?,
        attributes: hex_array(what, "attributes", get(what, obj, "attributes")?)?,
        attributes_mask: hex_array(what, "attributesMask", get(what, obj, "attributesMask")?)?,
        tcb_levels: if with_levels {
            isv_levels(what, get(what, obj, "tcbLevels")?)?
        } else {
            Vec::new()
        },
    })
}

/// The matched TCB levels of a platform and its verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcbMatch {
    /// The platform's TCB level.
    pub platform: TcbLevel,
    /// The TDX module identity's level, when the module's minor version is not 0.
    pub module: Option<IsvLevel>,
    /// The converged status ([`TcbStatus::converge`]).
    pub status: TcbStatus,
}

const TCB_INFO: &str = "TCB info";
const QE_IDENTITY: &str = "QE identity";

impl SignedTcbInfo {
    /// Parses a PCS TCB info answer (signature not yet checked).
    pub fn parse(bytes: &[u8]) -> Result<SignedTcbInfo, CollateralError> {
        let what = TCB_INFO;
        let (raw, info, signature) = signed_document(what, "tcbInfo", bytes)?;
        let id = string(what, "id", get(what, &info, "id")?)?;
        if id != "TDX" {
            return Err(field(what, "id", format!("{id:?}, want \"TDX\"")));
        }
        let version = uint(what, "version", get(what, &info, "version")?, u64::MAX)?;
        if version != 3 {
            return Err(field(what, "version", format!("{version}, want 3")));
        }
        let tdx_module = info
            .get("tdxModule")
            .map(|m| module_identity(what, object(what, "tdxModule", m)?, false))
            .transpose()?;
        let tdx_module_identities = match info.get("tdxModuleIdentities") {
            None => Vec::new(),
            Some(v) => array(what, "tdxModuleIdentities", v, MAX_MODULE_IDENTITIES)?
                .iter()
                .map(|m| module_identity(what, object(what, "tdxModuleIdentities[]", m)?, true))
                .collect::<Result<_, _>>()?,
        };
        let tcb_levels = array(
            what,
            "tcbLevels",
            get(what, &info, "tcbLevels")?,
            MAX_TCB_LEVELS,
        )?
        .iter()
        .map(|level| {
            let level = object(what, "tcbLevels[]", level)?;
            let tcb = object(what, "tcb", get(what, level, "tcb")?)?;
            Ok(TcbLevel {
                sgx_components: components(
                    what,
                    "sgxtcbcomponents",
                    get(what, tcb, "sgxtcbcomponents")?,
                )?,
                pce_svn: uint_to(what, "pcesvn", get(what, tcb, "pcesvn")?, u16::MAX)?,
                tdx_components: components(
                    what,
                    "tdxtcbcomponents",
                    get(what, tcb, "tdxtcbcomponents")?,
                )?,
                tcb_date: string(what, "tcbDate", get(what, level, "tcbDate")?)?,
                status: status(what, "tcbStatus", get(what, level, "tcbStatus")?)?,
                advisory_ids: advisories(what, level)?,
            })
        })
        .collect::<Result<Vec<_>, CollateralError>>()?;
        let info = TcbInfo {
            version,
            issue_date: date(what, "issueDate", get(what, &info, "issueDate")?)?,
            next_update: date(what, "nextUpdate", get(what, &info, "nextUpdate")?)?,
            fmspc: hex_array(what, "fmspc", get(what, &info, "fmspc")?)?,
            pce_id: hex_array(what, "pceId", get(what, &info, "pceId")?)?,
            tcb_evaluation_data_number: uint(
                what,
                "tcbEvaluationDataNumber",
                get(what, &info, "tcbEvaluationDataNumber")?,
                u64::MAX,
            )?,
            tdx_module,
            tdx_module_identities,
            tcb_levels,
        };
        Ok(SignedTcbInfo {
            info,
            signed: raw.as_bytes().to_vec(),
            signature,
        })
    }

    /// Verifies the signature with the TCB signing certificate `signer`
    /// (whose own chain the caller checks): the checked TCB info.
    pub fn verify(&self, signer: &IntelCert) -> Result<TcbInfo, CertError> {
        signer.verify_fixed("the TCB info", &self.signed, &self.signature)?;
        Ok(self.info.clone())
    }

    /// The FMSPC the document claims (unchecked: for choosing and caching
    /// documents, never for a verdict).
    pub fn claimed_fmspc(&self) -> [u8; 6] {
        self.info.fmspc
    }

    /// When the document claims it is due for update, Unix seconds
    /// (unchecked, as [`claimed_fmspc`](Self::claimed_fmspc)).
    pub fn claimed_next_update(&self) -> i64 {
        self.info.next_update
    }

    /// The `issueDate` it claims, before its signature is checked (a time
    /// floor takes it only once the signature verified).
    pub fn claimed_issue_date(&self) -> i64 {
        self.info.issue_date
    }
}

impl TcbInfo {
    /// `version`.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// `issueDate`, Unix seconds.
    pub fn issue_date(&self) -> i64 {
        self.issue_date
    }

    /// `nextUpdate`, Unix seconds.
    pub fn next_update(&self) -> i64 {
        self.next_update
    }

    /// `fmspc`.
    pub fn fmspc(&self) -> [u8; 6] {
        self.fmspc
    }

    /// `pceId`.
    pub fn pce_id(&self) -> [u8; 2] {
        self.pce_id
    }

    /// `tcbEvaluationDataNumber`.
    pub fn tcb_evaluation_data_number(&self) -> u64 {
        self.tcb_evaluation_data_number
    }

    /// `tdxModule`.
    pub fn tdx_module(&self) -> Option<&TdxModuleIdentity> {
        self.tdx_module.as_ref()
    }

    /// `tdxModuleIdentities`.
    pub fn tdx_module_identities(&self) -> &[TdxModuleIdentity] {
        &self.tdx_module_identities
    }

    /// `tcbLevels`, in Intel's order.
    pub fn tcb_levels(&self) -> &[TcbLevel] {
        &self.tcb_levels
    }

    /// The platform's TCB status by Intel's algorithm (see the module
    /// documentation): the PCK certificate's SGX TCB and PCESVN, the
    /// quote's `TEE_TCB_SVN`.
    pub fn tcb_status(
        &self,
        pck: &SgxExtensions,
        tee_tcb_svn: &[u8; 16],
    ) -> Result<TcbMatch, CollateralError> {
        let what = TCB_INFO;
        let module_minor = tee_tcb_svn[1];
        let tdx_from = if module_minor > 0 { 2 } else { 0 };
        let platform = self
            .tcb_levels
            .iter()
            .find(|level| {
                pck.sgx_tcb_components
                    .iter()
                    .zip(level.sgx_components)
                    .all(|(have, want)| *have >= want)
                    && pck.pce_svn >= level.pce_svn
                    && tee_tcb_svn[tdx_from..]
                        .iter()
                        .zip(&level.tdx_components[tdx_from..])
                        .all(|(have, want)| have >= want)
            })
            .cloned()
            .ok_or_else(|| CollateralError::NoMatchingLevel {
                what,
                reason: format!(
                    "SGX components {}, PCESVN {}, TEE TCB SVN {}",
                    confboot_util::hex::encode(&pck.sgx_tcb_components),
                    pck.pce_svn,
                    confboot_util::hex::encode(tee_tcb_svn)
                ),
            })?;
        if module_minor == 0 {
            return Ok(TcbMatch {
                status: platform.status,
                platform,
                module: None,
            });
        }
        let id = format!("TDX_{module_minor:02X}");
        let identity = self
            .tdx_module_identities
            .iter()
            .find(|m| m.id.eq_ignore_ascii_case(&id))
            .ok_or_else(|| CollateralError::NoMatchingLevel {
                what,
                reason: format!("no TDX module identity {id}"),
            })?;
        let module = identity
            .tcb_levels
            .iter()
            .find(|l| u16::from(tee_tcb_svn[0]) >= l.isv_svn)
            .cloned()
            .ok_or_else(|| CollateralError::NoMatchingLevel {
                what,
                reason: format!("TDX module {id} SVN {}", tee_tcb_svn[0]),
            })?;
        Ok(TcbMatch {
            status: TcbStatus::converge(platform.status, module.status),
            platform,
            module: Some(module),
        })
    }

    /// The module identity that must match `MRSIGNERSEAM` and
    /// `SEAMATTRIBUTES`: `TDX_<minor>` when the module's minor version is
    /// not 0 and the TCB info lists it, else `tdxModule`.
    pub fn module_for(&self, tee_tcb_svn: &[u8; 16]) -> Option<&TdxModuleIdentity> {
        let id = format!("TDX_{:02X}", tee_tcb_svn[1]);
        let listed = (tee_tcb_svn[1] > 0)
            .then(|| {
                self.tdx_module_identities
                    .iter()
                    .find(|m| m.id.eq_ignore_ascii_case(&id))
            })
            .flatten();
        listed.or(self.tdx_module.as_ref())
    }
}

impl SignedQeIdentity {
    /// Parses a PCS QE identity answer (signature not yet checked).
    pub fn parse(bytes: &[u8]) -> Result<SignedQeIdentity, CollateralError> {
        let what = QE_IDENTITY;
        let (raw, e, signature) = signed_document(what, "enclaveIdentity", bytes)?;
        let id = string(what, "id", get(what, &e, "id")?)?;
        if id != "TD_QE" {
            return Err(field(what, "id", format!("{id:?}, want \"TD_QE\"")));
        }
        let version = uint(what, "version", get(what, &e, "version")?, u64::MAX)?;
        if version != 2 {
            return Err(field(what, "version", format!("{version}, want 2")));
        }
        let be32 = |name: &str| -> Result<u32, CollateralError> {
            Ok(u32::from_be_bytes(hex_array(
                what,
                name,
                get(what, &e, name)?,
            )?))
        };
        let identity = QeIdentity {
            id,
            version,
            issue_date: date(what, "issueDate", get(what, &e, "issueDate")?)?,
            next_update: date(what, "nextUpdate", get(what, &e, "nextUpdate")?)?,
            tcb_evaluation_data_number: uint(
                what,
                "tcbEvaluationDataNumber",
                get(what, &e, "tcbEvaluationDataNumber")?,
                u64::MAX,
            )?,
            misc_select: be32("miscselect")?,
            misc_select_mask: be32("miscselectMask")?,
            attributes: hex_array(what, "attributes", get(what, &e, "attributes")?)?,
            attributes_mask: hex_array(what, "attributesMask", get(what, &e, "attributesMask")?)?,
            mr_signer: hex_array(what, "mrsigner", get(what, &e, "mrsigner")?)?,
            isv_prod_id: uint_to(what, "isvprodid", get(what, &e, "isvprodid")?, u16::MAX)?,
            tcb_levels: isv_levels(what, get(what, &e, "tcbLevels")?)?,
        };
        Ok(SignedQeIdentity {
            identity,
            signed: raw.as_bytes().to_vec(),
            signature,
        })
    }

    /// Verifies the signature with the TCB signing certificate `signer`:
    /// the checked QE identity.
    pub fn verify(&self, signer: &IntelCert) -> Result<QeIdentity, CertError> {
        signer.verify_fixed("the QE identity", &self.signed, &self.signature)?;
        Ok(self.identity.clone())
    }

    /// When the document claims it is due for update, Unix seconds
    /// (unchecked: for caching documents, never for a verdict).
    pub fn claimed_next_update(&self) -> i64 {
        self.identity.next_update
    }

    /// The `issueDate` it claims, before its signature is checked (a time
    /// floor takes it only once the signature verified).
    pub fn claimed_issue_date(&self) -> i64 {
        self.identity.issue_date
    }
}

impl QeIdentity {
    /// `id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `version`.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// `issueDate`, Unix seconds.
    pub fn issue_date(&self) -> i64 {
        self.issue_date
    }

    /// `nextUpdate`, Unix seconds.
    pub fn next_update(&self) -> i64 {
        self.next_update
    }

    /// `tcbEvaluationDataNumber`.
    pub fn tcb_evaluation_data_number(&self) -> u64 {
        self.tcb_evaluation_data_number
    }

    /// `miscselect`.
    pub fn misc_select(&self) -> u32 {
        self.misc_select
    }

    /// `miscselectMask`.
    pub fn misc_select_mask(&self) -> u32 {
        self.misc_select_mask
    }

    /// `attributes`.
    pub fn attributes(&self) -> [u8; 16] {
        self.attributes
    }

    /// `attributesMask`.
    pub fn attributes_mask(&self) -> [u8; 16] {
        self.attributes_mask
    }

    /// `mrsigner`.
    pub fn mr_signer(&self) -> [u8; 32] {
        self.mr_signer
    }

    /// `isvprodid`.
    pub fn isv_prod_id(&self) -> u16 {
        self.isv_prod_id
    }

    /// `tcbLevels`, in Intel's order.
    pub fn tcb_levels(&self) -> &[IsvLevel] {
        &self.tcb_levels
    }

    /// The differences between the QE report and this identity
    /// (MRSIGNER, ISVPRODID, MISCSELECT and ATTRIBUTES under their masks);
    /// empty when it matches.
    pub fn mismatches(&self, qe: &QeReport) -> Vec<String> {
        let hex = confboot_util::hex::encode;
        let mut out = Vec::new();
        if qe.mr_signer() != self.mr_signer {
            out.push(format!(
                "MRSIGNER {} is not {}",
                hex(&qe.mr_signer()),
                hex(&self.mr_signer)
            ));
        }
        if qe.isv_prod_id() != self.isv_prod_id {
            out.push(format!(
                "ISVPRODID {} is not {}",
                qe.isv_prod_id(),
                self.isv_prod_id
            ));
        }
        if qe.misc_select() & self.misc_select_mask != self.misc_select & self.misc_select_mask {
            out.push(format!(
                "MISCSELECT {:#010x} under mask {:#010x} is not {:#010x}",
                qe.misc_select(),
                self.misc_select_mask,
                self.misc_select
            ));
        }
        let masked = |a: [u8; 16]| -> Vec<u8> {
            a.iter()
                .zip(self.attributes_mask)
                .map(|(a, m)| a & m)
                .collect()
        };
        if masked(qe.attributes()) != masked(self.attributes) {
            out.push(format!(
                "ATTRIBUTES {} under mask {} is not {}",
                hex(&qe.attributes()),
                hex(&self.attributes_mask),
                hex(&self.attributes)
            ));
        }
        out
    }

    /// The QE's TCB level: the first (Intel's order, highest first) whose
    /// ISV SVN the QE reaches.
    pub fn tcb_level(&self, isv_svn: u16) -> Result<&IsvLevel, CollateralError> {
        self.tcb_levels
            .iter()
            .find(|l| isv_svn >= l.isv_svn)
            .ok_or_else(|| CollateralError::NoMatchingLevel {
                what: QE_IDENTITY,
                reason: format!("QE ISVSVN {isv_svn}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_their_exact_text() {
        let text = r#" {"a" : {"x":"}\"" , "y":[1,{}]} ,"b":"s", "c":[ ] } "#;
        serde_json::from_str::<Value>(text).unwrap();
        assert_eq!(
            top_level_members(text),
            vec![
                ("a".to_string(), r#"{"x":"}\"" , "y":[1,{}]}"#),
                ("b".to_string(), r#""s""#),
                ("c".to_string(), "[ ]"),
            ]
        );
    }

    #[test]
    fn statuses_converge_to_the_worse() {
        use TcbStatus::*;
        assert_eq!(TcbStatus::converge(UpToDate, UpToDate), UpToDate);
        assert_eq!(
            TcbStatus::converge(SWHardeningNeeded, UpToDate),
            SWHardeningNeeded
        );
        assert_eq!(TcbStatus::converge(UpToDate, OutOfDate), OutOfDate);
        assert_eq!(
            TcbStatus::converge(ConfigurationNeeded, OutOfDate),
            OutOfDateConfigurationNeeded
        );
        assert_eq!(TcbStatus::converge(UpToDate, Revoked), Revoked);
        for s in TcbStatus::ALL {
            assert_eq!(TcbStatus::from_name(s.name()), Some(s));
        }
    }

    #[test]
    fn a_second_signed_member_is_refused() {
        let doc = br#"{"tcbInfo":{"id":"TDX"},"tcbInfo":{"id":"TDX"},"signature":"00"}"#;
        assert!(matches!(
            SignedTcbInfo::parse(doc),
            Err(CollateralError::Json { .. })
        ));
        let doc = br#"{"tcbInfo":{"id":"TDX"},"extra":1,"signature":"00"}"#;
        assert!(matches!(
            SignedTcbInfo::parse(doc),
            Err(CollateralError::Field { .. })
        ));
    }
}
