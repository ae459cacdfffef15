//! The TDX policy, a JSON file in the style of the SEV-SNP policy:
//!
//! ```json
//! {
//!   "mrtd": "<96 hex digits>",
//!   "rtmrs": {"0": "<96 hex digits>", "1": "<96 hex digits>"},
//!   "mrConfigId": "<96 hex digits>",
//!   "mrOwner": "<96 hex digits>",
//!   "mrOwnerConfig": "<96 hex digits>",
//!   "allowDebug": false,
//!   "tdAttributes": ["SEPT_VE_DISABLE"],
//!   "xfam": "<16 hex digits>",
//!   "minimumTeeTcbSvn": "<32 hex digits>",
//!   "acceptedTcbStatuses": ["UpToDate"],
//!   "rootCertificates": ["test_root.pem"],
//!   "collateral": {
//!     "tcbInfo": "tcb_info.json",
//!     "qeIdentity": "qe_identity.json",
//!     "pckCrl": "pck_crl.der",
//!     "rootCrl": "root_crl.der",
//!     "tcbInfoIssuerChain": "tcb_info_issuer_chain.pem"
//!   },
//!   "expectedEventLog": "ccel.bin",
//!   "insecureAnyImage": false
//! }
//! ```
//!
//! - `mrtd` (required unless `insecureAnyImage`): the TD's initial
//!   contents (its firmware image), 48 bytes.
//! - `rtmrs` (`"0"`, `"1"` and `"2"` required unless `insecureAnyImage`;
//!   `"3"` optional): expected RTMR values by index `"0"` to `"3"`, 48
//!   bytes each (see [Pinning the image](#pinning-the-image)).
//! - `mrConfigId`, `mrOwner`, `mrOwnerConfig` (optional): if present the
//!   field must equal it. The host sets them when it creates the TD, so
//!   they identify a configuration, never an image.
//! - `allowDebug` (optional, default false): whether a debuggable TD
//!   (`TDATTRIBUTES.DEBUG`, the host can read its memory) is accepted.
//! - `tdAttributes` (optional): the names of the `TDATTRIBUTES` bits the TD
//!   must have, exactly (DEBUG aside, which `allowDebug` decides):
//!   `SEPT_VE_DISABLE`, `MIGRATABLE`, `PKS`, `KL`, `PERFMON`. A bit
//!   without a name cannot be listed, so a TD with one is refused.
//! - `xfam` (optional): the `XFAM` field's 8 raw bytes as hex, exactly.
//! - `minimumTeeTcbSvn` (optional): each byte of `TEE_TCB_SVN` must reach
//!   the corresponding byte of this.
//! - `acceptedTcbStatuses` (optional, default `["UpToDate"]`): the TCB
//!   statuses (of the platform by TCB info, and of the QE by QE identity)
//!   accepted. `Revoked` cannot be accepted.
//! - `rootCertificates` (optional): PEM or DER files whose self-signed
//!   certificates replace the pinned Intel SGX Root CA (a test chain).
//!   Relative paths are relative to the policy file.
//! - `collateral` (optional): Intel's collateral as files, for a verifier
//!   that runs unattended (joinsvc; the CLI's options name them too and
//!   take precedence): `tcbInfo` and `qeIdentity` (Intel's PCS answers as
//!   served, signature included; a validator needs both), `pckCrl` and
//!   `rootCrl` (DER or PEM, checked when given), `tcbInfoIssuerChain` (the
//!   PCS's `TCB-Info-Issuer-Chain` header, PEM). Each is checked as of the
//!   time of the check: collateral past its `nextUpdate` refuses every
//!   quote until fresh files are in place and the verifier restarted.
//! - `expectedEventLog` (optional): a raw CCEL log area of the expected
//!   image (from a reference boot); an RTMR that differs from `rtmrs` is
//!   then explained by the first of its events that differs.
//! - `pcsFetch` (optional, default false): fetch the TCB info, QE identity
//!   and PCK CRL that `collateral` lacks, or that are past their
//!   `nextUpdate`, from Intel's PCS for the quote's platform, into
//!   `collateralCache` (required with it); they are kept as collateral
//!   files and loaded as those are, and checked as any collateral is. The
//!   root CRL is not fetched: name it in `collateral`. Needs confboot built
//!   with the cargo feature `pcs`; refused otherwise.
//! - `pcsBaseUrl` (optional): the PCS or a caching proxy to fetch from
//!   (default `https://api.trustedservices.intel.com`).
//! - `collateralCache` (optional): the directory fetched collateral is
//!   kept in.
//! - `insecureAnyImage` (optional, default false): accept a policy that
//!   does not pin the image (any of `mrtd`, RTMR0, RTMR1 and RTMR2 left
//!   out), which admits any TD, or any kernel, initrd or command line, on a
//!   genuine platform. Logged as a warning.
//!
//! Unknown keys are refused, so is a key named twice.
//!
//! # Pinning the image
//!
//! A TD's image is measured in four registers, and a policy must pin all
//! four ([`TdxPolicy::check_pins_image`]; [`TDX_IMAGE_REGISTERS`]):
//!
//! | register | measured by | what it covers |
//! |---|---|---|
//! | `MRTD` | the TDX module, at build time | the firmware (TDVF) image the host loaded |
//! | `RTMR0` | the firmware | its configuration: the TD HOB, the firmware volume's configuration, and the ACPI tables the host supplies (code the kernel runs, AML) |
//! | `RTMR1` | the firmware | the kernel (or boot loader) image it starts |
//! | `RTMR2` | the firmware or boot loader | the kernel command line and the initrd |
//! | `RTMR3` | the TD itself, at run time | the cluster mark (`confboot_cluster::mark`): all zero until the node is bootstrapped |
//!
//! A policy of `mrtd` alone admits any kernel, initrd and command line
//! under genuine firmware: the host boots a TD of its own and it passes.
//! So `mrtd` and `rtmrs` `"0"`, `"1"` and `"2"` are required, and a policy
//! without one of them is refused ([`PolicyError::TdxImageNotPinned`],
//! naming what is missing) wherever it is read: the parser applies the
//! rule, so every binary that loads a TDX policy refuses it at start (the
//! bootstrapper, the node agent, joinsvc and the CLI read it through
//! [`TdxPolicy::load`] or [`TdxPolicy::from_json_at`]), and
//! [`TdxValidator::new`](crate::TdxValidator::new) applies it again to a
//! policy built in code. The checks themselves fail closed too: a register
//! of the four without an expected value is a skipped check, which a
//! validator counts as a failure. `RTMR3` never counts: it is the cluster
//! mark, which a bootstrapped TD extends at will. Only `insecureAnyImage`
//! lifts the rule, for all four at once.
//!
//! Read by hand, not with a serde derive: the bootstrapper links this parser,
//! and derives for the three policies (measurement, SNP, TDX) grew it by some
//! 12 KB, past its size budget.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::collateral::TcbStatus;
use super::quote::td_attributes;
use confboot_attest::measurements::{PolicyError, parse_json_unique_keys, read_policy_text};

/// The registers a TDX policy must pin ([`TdxPolicy::check_pins_image`]):
/// `MRTD` (the firmware), `RTMR0` (its configuration, the host's ACPI
/// tables included), `RTMR1` (the kernel) and `RTMR2` (the command line
/// and the initrd). `RTMR3`, the cluster mark, never counts.
pub const TDX_IMAGE_REGISTERS: [&str; 4] = ["MRTD", "RTMR0", "RTMR1", "RTMR2"];

/// What a TDX quote must satisfy beyond its signatures and chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdxPolicy {
    /// Expected `MRTD`.
    pub mr_td: Option<[u8; 48]>,
    /// Expected `RTMR0` to `RTMR3`, each optional.
    pub rtmrs: [Option<[u8; 48]>; 4],
    /// Expected `MRCONFIGID`.
    pub mr_config_id: Option<[u8; 48]>,
    /// Expected `MROWNER`.
    pub mr_owner: Option<[u8; 48]>,
    /// Expected `MROWNERCONFIG`.
    pub mr_owner_config: Option<[u8; 48]>,
    /// Whether a debuggable TD is accepted.
    pub allow_debug: bool,
    /// The `TDATTRIBUTES` bits required exactly (DEBUG excluded), if given.
    pub td_attributes: Option<u64>,
    /// The `XFAM` raw bytes required exactly, if given.
    pub xfam: Option<[u8; 8]>,
    /// Per-byte minimum of `TEE_TCB_SVN`.
    pub minimum_tee_tcb_svn: Option<[u8; 16]>,
    /// Accepted TCB statuses (platform and QE).
    pub accepted_tcb_statuses: Vec<TcbStatus>,
    /// Root certificates replacing Intel's (resolved paths).
    pub root_certificates: Vec<PathBuf>,
    /// Collateral files (resolved paths).
    pub collateral: CollateralFiles,
    /// The expected CCEL log area (resolved path).
    pub expected_event_log: Option<PathBuf>,
    /// Whether the policy said `"insecureAnyImage": true`.
    pub insecure_any_image: bool,
    /// Whether TCB info, QE identity and PCK CRL that the collateral files
    /// lack (or that are past their `nextUpdate`) are fetched from Intel's
    /// PCS (`pcsFetch`; needs the cargo feature `pcs`).
    pub pcs_fetch: bool,
    /// The PCS or a caching proxy to fetch from (`pcsBaseUrl`).
    pub pcs_base_url: Option<String>,
    /// Where fetched collateral is kept (`collateralCache`, resolved path).
    pub collateral_cache: Option<PathBuf>,
}

/// The collateral files a policy names (`collateral`), each optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollateralFiles {
    /// Intel's TCB info answer.
    pub tcb_info: Option<PathBuf>,
    /// Intel's TD QE identity answer.
    pub qe_identity: Option<PathBuf>,
    /// The PCK CA's CRL.
    pub pck_crl: Option<PathBuf>,
    /// The root CA's CRL.
    pub root_crl: Option<PathBuf>,
    /// The TCB info's issuer chain (PEM).
    pub tcb_info_issuer_chain: Option<PathBuf>,
}

impl Default for TdxPolicy {
    /// Nothing pinned; no debug; only `UpToDate`; Intel's root.
    fn default() -> Self {
        TdxPolicy {
            mr_td: None,
            rtmrs: [None; 4],
            mr_config_id: None,
            mr_owner: None,
            mr_owner_config: None,
            allow_debug: false,
            td_attributes: None,
            xfam: None,
            minimum_tee_tcb_svn: None,
            accepted_tcb_statuses: vec![TcbStatus::UpToDate],
            root_certificates: Vec::new(),
            collateral: CollateralFiles::default(),
            expected_event_log: None,
            insecure_any_image: false,
            pcs_fetch: false,
            pcs_base_url: None,
            collateral_cache: None,
        }
    }
}

fn format_err(m: impl Into<String>) -> PolicyError {
    PolicyError::Format(m.into())
}

fn hex_field<const N: usize>(v: &Value, what: &str) -> Result<[u8; N], PolicyError> {
    let s = v
        .as_str()
        .ok_or_else(|| format_err(format!("{what} must be a hex string")))?;
    let bytes = confboot_util::hex::decode(s).map_err(|e| format_err(format!("{what}: {e}")))?;
    bytes.as_slice().try_into().map_err(|_| {
        format_err(format!(
            "{what} has {} bytes, want {N} ({} hex digits)",
            bytes.len(),
            2 * N
        ))
    })
}

fn boolean(v: &Value, what: &str) -> Result<bool, PolicyError> {
    v.as_bool()
        .ok_or_else(|| format_err(format!("{what} must be true or false")))
}

impl TdxPolicy {
    /// Parses the JSON text of a policy; relative paths stay as written.
    pub fn from_json(text: &str) -> Result<TdxPolicy, PolicyError> {
        Self::from_json_at(text, None)
    }

    /// Parses the JSON text of a policy, resolving relative paths against `base`.
    pub fn from_json_at(text: &str, base: Option<&Path>) -> Result<TdxPolicy, PolicyError> {
        let root = parse_json_unique_keys(text)?;
        let obj = root
            .as_object()
            .ok_or_else(|| format_err("top level must be an object"))?;
        let mut p = TdxPolicy::default();
        for (key, value) in obj {
            match key.as_str() {
                "mrtd" => p.mr_td = Some(hex_field(value, "mrtd")?),
                "rtmrs" => {
                    let rtmrs = value
                        .as_object()
                        .ok_or_else(|| format_err("rtmrs must be an object"))?;
                    for (index, v) in rtmrs {
                        let i = match index.as_str() {
                            "0" => 0,
                            "1" => 1,
                            "2" => 2,
                            "3" => 3,
                            other => {
                                return Err(format_err(format!(
                                    "rtmrs: key {other:?} is not 0, 1, 2 or 3"
                                )));
                            }
                        };
                        p.rtmrs[i] = Some(hex_field(v, &format!("rtmrs.{index}"))?);
                    }
                }
                "mrConfigId" => p.mr_config_id = Some(hex_field(value, "mrConfigId")?),
                "mrOwner" => p.mr_owner = Some(hex_field(value, "mrOwner")?),
                "mrOwnerConfig" => p.mr_owner_config = Some(hex_field(value, "mrOwnerConfig")?),
                "allowDebug" => p.allow_debug = boolean(value, "allowDebug")?,
                "tdAttributes" => {
                    let names = value
                        .as_array()
                        .ok_or_else(|| format_err("tdAttributes must be a list of bit names"))?;
                    let mut bits = 0u64;
                    for name in names {
                        let name = name.as_str().unwrap_or("");
                        let bit = td_attributes::NAMED
                            .iter()
                            .find(|(bit, n)| *n == name && *bit != td_attributes::DEBUG)
                            .map(|(bit, _)| *bit)
                            .ok_or_else(|| {
                                format_err(format!(
                                    "tdAttributes: {name:?} is not SEPT_VE_DISABLE, MIGRATABLE, \
                                     PKS, KL or PERFMON (DEBUG is allowDebug's)"
                                ))
                            })?;
                        if bits & bit != 0 {
                            return Err(format_err(format!("tdAttributes names {name} twice")));
                        }
                        bits |= bit;
                    }
                    p.td_attributes = Some(bits);
                }
                "xfam" => p.xfam = Some(hex_field(value, "xfam")?),
                "minimumTeeTcbSvn" => {
                    p.minimum_tee_tcb_svn = Some(hex_field(value, "minimumTeeTcbSvn")?)
                }
                "acceptedTcbStatuses" => {
                    let list = value.as_array().filter(|l| !l.is_empty()).ok_or_else(|| {
                        format_err("acceptedTcbStatuses must be a non-empty list")
                    })?;
                    let mut statuses = Vec::new();
                    for s in list {
                        let name = s.as_str().unwrap_or("");
                        let status = TcbStatus::from_name(name).ok_or_else(|| {
                            format_err(format!("acceptedTcbStatuses: unknown status {name:?}"))
                        })?;
                        if status == TcbStatus::Revoked {
                            return Err(format_err(
                                "acceptedTcbStatuses: Revoked is never accepted",
                            ));
                        }
                        if statuses.contains(&status) {
                            return Err(format_err(format!(
                                "acceptedTcbStatuses names {name} twice"
                            )));
                        }
                        statuses.push(status);
                    }
                    p.accepted_tcb_statuses = statuses;
                }
                "rootCertificates" => {
                    let list = value
                        .as_array()
                        .filter(|l| !l.is_empty())
                        .ok_or_else(|| format_err("rootCertificates must be a non-empty list"))?;
                    p.root_certificates = list
                        .iter()
                        .map(|v| {
                            v.as_str()
                                .map(|s| resolve(s, base))
                                .ok_or_else(|| format_err("rootCertificates must list paths"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "collateral" => p.collateral = collateral_files(value, base)?,
                "expectedEventLog" => {
                    p.expected_event_log = Some(
                        value
                            .as_str()
                            .map(|s| resolve(s, base))
                            .ok_or_else(|| format_err("expectedEventLog must be a path"))?,
                    )
                }
                "insecureAnyImage" => p.insecure_any_image = boolean(value, "insecureAnyImage")?,
                "pcsFetch" => p.pcs_fetch = boolean(value, "pcsFetch")?,
                "pcsBaseUrl" => {
                    let url = value
                        .as_str()
                        .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
                        .ok_or_else(|| format_err("pcsBaseUrl must be an http(s) URL"))?;
                    p.pcs_base_url = Some(url.to_string());
                }
                "collateralCache" => {
                    p.collateral_cache = Some(
                        value
                            .as_str()
                            .map(|s| resolve(s, base))
                            .ok_or_else(|| format_err("collateralCache must be a path"))?,
                    )
                }
                other => return Err(format_err(format!("unknown key {other:?}"))),
            }
        }
        if p.pcs_fetch && p.collateral_cache.is_none() {
            return Err(format_err(
                "pcsFetch needs collateralCache (where fetched collateral is kept)",
            ));
        }
        p.check_pins_image()?;
        if p.insecure_any_image && !p.unpinned().is_empty() {
            log::warn!(
                "TDX policy does not pin {} and says insecureAnyImage: ANY TD (firmware, \
                 kernel, initrd, command line) on a genuine platform is admitted",
                p.unpinned().join(", ")
            );
        }
        Ok(p)
    }

    /// The registers of [`TDX_IMAGE_REGISTERS`] this policy gives no
    /// expected value for, in that order.
    pub fn unpinned(&self) -> Vec<&'static str> {
        let pinned = [
            self.mr_td.is_some(),
            self.rtmrs[0].is_some(),
            self.rtmrs[1].is_some(),
            self.rtmrs[2].is_some(),
        ];
        TDX_IMAGE_REGISTERS
            .into_iter()
            .zip(pinned)
            .filter(|(_, pinned)| !pinned)
            .map(|(name, _)| name)
            .collect()
    }

    /// Whether the policy pins the image: an expected value for each
    /// register of [`TDX_IMAGE_REGISTERS`] (the firmware, its configuration
    /// and the host's ACPI tables, the kernel, the command line and
    /// initrd), unless it says `insecureAnyImage`;
    /// otherwise [`PolicyError::TdxImageNotPinned`] names those missing.
    pub fn check_pins_image(&self) -> Result<(), PolicyError> {
        let missing = self.unpinned();
        if missing.is_empty() || self.insecure_any_image {
            Ok(())
        } else {
            Err(PolicyError::TdxImageNotPinned { missing })
        }
    }

    /// Reads a policy file (at most
    /// [`MAX_POLICY_BYTES`](confboot_attest::measurements::MAX_POLICY_BYTES),
    /// through [`read_policy_text`]); relative paths in
    /// it are resolved against the file's directory.
    pub fn load(path: &Path) -> Result<TdxPolicy, PolicyError> {
        let text = read_policy_text(path)?;
        Self::from_json_at(&text, path.parent())
    }
}

/// The `collateral` object: known keys only, each a path.
fn collateral_files(value: &Value, base: Option<&Path>) -> Result<CollateralFiles, PolicyError> {
    let obj = value
        .as_object()
        .ok_or_else(|| format_err("collateral must be an object"))?;
    let mut files = CollateralFiles::default();
    for (key, v) in obj {
        let slot = match key.as_str() {
            "tcbInfo" => &mut files.tcb_info,
            "qeIdentity" => &mut files.qe_identity,
            "pckCrl" => &mut files.pck_crl,
            "rootCrl" => &mut files.root_crl,
            "tcbInfoIssuerChain" => &mut files.tcb_info_issuer_chain,
            other => return Err(format_err(format!("collateral: unknown key {other:?}"))),
        };
        *slot = Some(
            v.as_str()
                .map(|s| resolve(s, base))
                .ok_or_else(|| format_err(format!("collateral.{key} must be a path")))?,
        );
    }
    Ok(files)
}

fn resolve(path: &str, base: Option<&Path>) -> PathBuf {
    let p = PathBuf::from(path);
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(b: u8, n: usize) -> String {
        confboot_util::hex::encode(&vec![b; n])
    }

    #[test]
    fn parses_every_field() {
        let text = format!(
            r#"{{"mrtd": "{m}", "rtmrs": {{"0": "{r0}", "1": "{r0}", "2": "{r0}", "3": "{r3}"}},
                "mrConfigId": "{c}", "mrOwner": "{o}", "mrOwnerConfig": "{oc}",
                "allowDebug": true, "tdAttributes": ["SEPT_VE_DISABLE", "PKS"],
                "xfam": "e702060000000000", "minimumTeeTcbSvn": "{svn}",
                "acceptedTcbStatuses": ["UpToDate", "SWHardeningNeeded"],
                "rootCertificates": ["root.pem"],
                "collateral": {{"tcbInfo": "t.json", "qeIdentity": "/q.json",
                    "pckCrl": "p.der", "rootCrl": "r.der", "tcbInfoIssuerChain": "c.pem"}},
                "expectedEventLog": "ccel.bin"}}"#,
            m = h(1, 48),
            r0 = h(2, 48),
            r3 = h(3, 48),
            c = h(4, 48),
            o = h(5, 48),
            oc = h(6, 48),
            svn = h(7, 16)
        );
        let p = TdxPolicy::from_json_at(&text, Some(Path::new("/etc/cb"))).unwrap();
        assert_eq!(p.mr_td, Some([1; 48]));
        assert_eq!(
            p.rtmrs,
            [Some([2; 48]), Some([2; 48]), Some([2; 48]), Some([3; 48])]
        );
        assert_eq!(
            (p.mr_config_id, p.mr_owner, p.mr_owner_config),
            (Some([4; 48]), Some([5; 48]), Some([6; 48]))
        );
        assert!(p.allow_debug);
        assert_eq!(
            p.td_attributes,
            Some(td_attributes::SEPT_VE_DISABLE | td_attributes::PKS)
        );
        assert_eq!(p.xfam, Some([0xe7, 0x02, 0x06, 0, 0, 0, 0, 0]));
        assert_eq!(p.minimum_tee_tcb_svn, Some([7; 16]));
        assert_eq!(
            p.accepted_tcb_statuses,
            vec![TcbStatus::UpToDate, TcbStatus::SWHardeningNeeded]
        );
        assert_eq!(p.root_certificates, vec![PathBuf::from("/etc/cb/root.pem")]);
        assert_eq!(
            p.collateral,
            CollateralFiles {
                tcb_info: Some("/etc/cb/t.json".into()),
                qe_identity: Some("/q.json".into()),
                pck_crl: Some("/etc/cb/p.der".into()),
                root_crl: Some("/etc/cb/r.der".into()),
                tcb_info_issuer_chain: Some("/etc/cb/c.pem".into()),
            }
        );
        assert_eq!(p.expected_event_log, Some("/etc/cb/ccel.bin".into()));
    }

    /// `"mrtd"` and `"rtmrs"` 0 to 2, each of byte `b`: a policy that pins
    /// the image.
    fn pins(b: u8) -> String {
        format!(
            r#""mrtd": "{m}", "rtmrs": {{"0": "{m}", "1": "{m}", "2": "{m}"}}"#,
            m = h(b, 48)
        )
    }

    #[test]
    fn defaults_are_strict() {
        let p = TdxPolicy::from_json(&format!("{{{}}}", pins(1))).unwrap();
        assert!(!p.allow_debug);
        assert_eq!(p.accepted_tcb_statuses, vec![TcbStatus::UpToDate]);
        assert!(p.root_certificates.is_empty() && p.td_attributes.is_none());
    }

    #[test]
    fn refuses_malformed_policies() {
        let m = format!(r#""mrtd": "{}""#, h(1, 48));
        for bad in [
            "[]".to_string(),
            r#"{"mrtd": "00"}"#.to_string(),
            format!(r#"{{{m}, "rtmrs": {{"4": "{}"}}}}"#, h(0, 48)),
            format!(r#"{{{m}, "rtmrs": {{"0": "{}"}}}}"#, h(0, 32)),
            format!(r#"{{{m}, "allowDebug": "no"}}"#),
            format!(r#"{{{m}, "tdAttributes": ["DEBUG"]}}"#),
            format!(r#"{{{m}, "tdAttributes": ["PKS", "PKS"]}}"#),
            format!(r#"{{{m}, "tdAttributes": ["bit 5"]}}"#),
            format!(r#"{{{m}, "xfam": "00"}}"#),
            format!(r#"{{{m}, "acceptedTcbStatuses": []}}"#),
            format!(r#"{{{m}, "acceptedTcbStatuses": ["Revoked"]}}"#),
            format!(r#"{{{m}, "acceptedTcbStatuses": ["uptodate"]}}"#),
            format!(r#"{{{m}, "rootCertificates": []}}"#),
            format!(r#"{{{m}, "mrtD": "{}"}}"#, h(1, 48)),
            format!(r#"{{{m}, "collateral": {{"tcbinfo": "t.json"}}}}"#),
            format!(r#"{{{m}, "collateral": {{"tcbInfo": 1}}}}"#),
            format!(r#"{{{m}, "collateral": []}}"#),
            format!(r#"{{{m}, "expectedEventLog": false}}"#),
        ] {
            assert!(
                matches!(TdxPolicy::from_json(&bad), Err(PolicyError::Format(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_policy_that_pins_no_image_is_refused_unless_marked() {
        let all = vec!["MRTD", "RTMR0", "RTMR1", "RTMR2"];
        for text in [
            "{}".to_string(),
            r#"{"insecureAnyImage": false}"#.to_string(),
        ] {
            assert!(
                matches!(
                    TdxPolicy::from_json(&text),
                    Err(PolicyError::TdxImageNotPinned { missing }) if missing == all
                ),
                "{text}"
            );
        }
        let p = TdxPolicy::from_json(r#"{"insecureAnyImage": true}"#).unwrap();
        assert!(p.insecure_any_image && p.mr_td.is_none());
        assert_eq!(p.unpinned(), all);
    }

    #[test]
    fn a_policy_must_pin_mrtd_and_rtmrs_0_to_2() {
        let r = h(2, 48);
        let m = format!(r#""mrtd": "{}""#, h(1, 48));
        for (text, want) in [
            // MRTD alone: any kernel, initrd and command line.
            (format!("{{{m}}}"), vec!["RTMR0", "RTMR1", "RTMR2"]),
            // The module's old example: RTMR0 and RTMR1, any command line.
            (
                format!(r#"{{{m}, "rtmrs": {{"0": "{r}", "1": "{r}"}}}}"#),
                vec!["RTMR2"],
            ),
            (
                format!(r#"{{{m}, "rtmrs": {{"1": "{r}", "2": "{r}"}}}}"#),
                vec!["RTMR0"],
            ),
            (
                format!(r#"{{{m}, "rtmrs": {{"0": "{r}", "2": "{r}"}}}}"#),
                vec!["RTMR1"],
            ),
            (
                format!(r#"{{"rtmrs": {{"0": "{r}", "1": "{r}", "2": "{r}"}}}}"#),
                vec!["MRTD"],
            ),
            // RTMR3, the cluster mark, never counts.
            (
                format!(r#"{{{m}, "rtmrs": {{"3": "{r}"}}}}"#),
                vec!["RTMR0", "RTMR1", "RTMR2"],
            ),
        ] {
            let e = TdxPolicy::from_json(&text).unwrap_err();
            assert!(
                matches!(&e, PolicyError::TdxImageNotPinned { missing } if *missing == want),
                "{text}: {e:?}"
            );
            assert!(e.to_string().contains(&want.join(", ")), "{e}");
            // insecureAnyImage keeps its meaning: accepted, warned.
            let insecure = format!(r#"{}, "insecureAnyImage": true}}"#, &text[..text.len() - 1]);
            let p = TdxPolicy::from_json(&insecure).unwrap();
            assert_eq!(p.unpinned(), want, "{insecure}");
            assert!(p.check_pins_image().is_ok());
        }
        let p = TdxPolicy::from_json(&format!("{{{}}}", pins(1))).unwrap();
        assert!(p.unpinned().is_empty() && p.check_pins_image().is_ok());
        // A policy built in code is held to the rule by its check.
        let code = TdxPolicy {
            mr_td: Some([1; 48]),
            ..TdxPolicy::default()
        };
        assert!(matches!(
            code.check_pins_image(),
            Err(PolicyError::TdxImageNotPinned { missing }) if missing == ["RTMR0", "RTMR1", "RTMR2"]
        ));
    }

    #[test]
    fn repeated_keys_are_refused() {
        let m = format!(r#""mrtd": "{}""#, h(1, 48));
        for text in [
            format!(r#"{{{m}, {m}}}"#),
            format!(r#"{{{m}, "allowDebug": false, "allowDebug": true}}"#),
            format!(
                r#"{{{m}, "rtmrs": {{"0": "{r}", "0": "{r}"}}}}"#,
                r = h(0, 48)
            ),
        ] {
            assert!(
                matches!(
                    TdxPolicy::from_json(&text),
                    Err(PolicyError::DuplicateKey(_))
                ),
                "{text}"
            );
        }
    }
}
