//! The SEV-SNP policy, a JSON file in the style of the measurements file:
//!
//! ```json
//! {
//!   "measurement": {"expected": "<96 hex digits>", "warnOnly": false},
//!   "launch": "measuredDirectBoot",
//!   "kernelHash": "<64 hex digits>",
//!   "initrdHash": "<64 hex digits>",
//!   "cmdlineHash": "<64 hex digits>",
//!   "minimumTcb": {"bootloader": 3, "tee": 0, "snp": 8, "microcode": 115, "fmc": 0},
//!   "vmpl": 0,
//!   "allowDebug": false,
//!   "hostData": "<64 hex digits>",
//!   "idKeyDigests": ["<96 hex digits>"],
//!   "allowedChipIds": ["<128 hex digits>"],
//!   "rootBundles": ["milan_ask_ark_asvk.pem"],
//!   "vcekCacheDir": "/var/lib/confboot/vcek",
//!   "kdsFetch": false,
//!   "kdsBaseUrl": "https://kdsintf.amd.com",
//!   "insecureAnyImage": false
//! }
//! ```
//!
//! - `measurement` (required): the 48-byte launch measurement, the same
//!   entry shape as the measurements file (`expected`, optional `warnOnly`,
//!   default false). A `warnOnly` mismatch is logged and allowed.
//! - `launch` (required by every binary that reads a bare-metal SEV-SNP
//!   policy, [`SnpPolicy::load`] and [`SnpPolicy::from_json_direct_boot_at`];
//!   optional in the SNP part of an Azure policy, whose launch is the
//!   paravisor's and whose image the vTPM's PCRs pin): the launch the
//!   `measurement` was taken of, [`SnpLaunch`]. `"measuredDirectBoot"`: a
//!   direct boot whose firmware holds the SEV kernel hashes table, with
//!   `kernelHash`, `initrdHash` and `cmdlineHash` (all three required, and
//!   only with this launch), the SHA-256 the table holds: of the kernel
//!   file, of the initrd file (of no bytes without one), and of the command
//!   line with its terminating NUL byte, as QEMU and `sev-snp-measure` fill
//!   it. `"firmwareOnly"`: a launch without the table; its measurement pins
//!   the firmware alone, and it is refused
//!   ([`PolicyError::SnpLaunchNotMeasured`]) unless the policy says
//!   `"insecureAnyImage": true`. No `launch`:
//!   [`PolicyError::SnpLaunchUndeclared`].
//! - `minimumTcb` (optional; given, each field defaults to 0): the least SVN
//!   per component that both the report's `REPORTED_TCB` and `LAUNCH_TCB`
//!   must reach. `fmc` applies only to products with an FMC (Turin).
//!   Without it the product's default applies ([`MinimumTcb::default_for`],
//!   where each figure's source is given): Milan bootloader 3, TEE 0, SNP
//!   8, microcode 115; Genoa bootloader 7, TEE 0, SNP 14, microcode 72;
//!   Turin FMC 1, bootloader 1, TEE 1, SNP 4, microcode 82. A product
//!   without a default would be refused until the policy names a minimum
//!   (fails closed).
//! - `tcbWarningMargin` (optional, default 0: off): a TCB component fewer
//!   than this many SVNs above its minimum is admitted with a warning
//!   (logged at WARN, and in the check's text), so a rising minimum is
//!   seen coming rather than met as a refusal.
//! - `vmpl` (optional, default 0): the VMPL the report must have been
//!   requested at (0..=3).
//! - `allowDebug` (optional, default false): whether a guest policy with the
//!   DEBUG bit is accepted.
//! - `allowSmt` (optional, default true): whether a guest policy that lets
//!   the host run SMT is accepted; false requires SMT off.
//! - `allowMigrationAgent` (optional, default false): whether a guest policy
//!   that allows a migration agent is accepted.
//! - `minimumAbi` (optional, `"MAJOR.MINOR"`, default `"0.0"`): the least
//!   firmware ABI (`CURRENT_MAJOR.CURRENT_MINOR`) the report may carry.
//! - `hostData` (optional): if present, `HOST_DATA` must equal it (32 bytes).
//! - `idKeyDigests` (optional): if present and non-empty, `ID_KEY_DIGEST`
//!   must be one of them (48 bytes each).
//! - `allowedChipIds` (optional): if present, only reports whose `CHIP_ID`
//!   is one of these (64 bytes each, 128 hex digits) are admitted: the
//!   cluster runs on these machines and no others. The list is strict: at
//!   least one and at most [`MAX_ALLOWED_CHIP_IDS`] entries, no two equal,
//!   none all zero. A report whose chip id is masked (all zero: the guest
//!   was launched with `MASK_CHIP_ID`, as VLEK-signed reports may be) is
//!   refused while the list is present, since it names no machine. The id
//!   of a VLEK-signed report is the firmware's, signed by it, but not
//!   certified by the VLEK, which the cloud provider holds for many chips:
//!   that the firmware is genuine is what the signature shows, which chip
//!   it runs on the firmware says. Absent: any chip (as before).
//! - `signingKeys` (optional, default `["VCEK"]`): the kinds of
//!   endorsement key whose reports are admitted, `"VCEK"` (the chip's key,
//!   AMD-derived) and/or `"VLEK"` (a key the cloud provider loads, as on
//!   AWS: chip id zero, chained VLEK → ASVK → ARK). The report's
//!   `KEY_INFO` names the kind and the chain must be of that kind; this
//!   list decides whether that kind is trusted at all, so a report cannot
//!   pick a trust root the policy did not choose.
//! - `rootBundles` (optional): PEM files, each with one product's ARK and
//!   optionally its ASK and ASVK; when present they replace the built-in
//!   Milan/Genoa/Turin roots. Relative paths are relative to the policy file.
//! - `vcekCacheDir` (optional): a directory of VCEKs for reports whose
//!   evidence carries none, at `<dir>/<chip_id hex>/<reported_tcb hex>.der`
//!   (128 and 16 lowercase hex digits: the raw report fields).
//! - `kdsFetch` (optional, default false): fetch a VCEK that neither the
//!   evidence nor the cache holds from AMD's KDS (and store it in the cache).
//!   Needs confboot built with the cargo feature `kds`; refused otherwise.
//! - `kdsBaseUrl` (optional): the KDS or a caching proxy to fetch from
//!   (default `https://kdsintf.amd.com`).
//! - `insecureAnyImage` (optional, default false): accept a policy that pins
//!   no guest image (see below). Logged as a warning when the policy is read.
//!
//! Unknown keys are refused, so a typo cannot silently drop a check, and so
//! is a key named twice (a parser would keep only one of the two).
//!
//! A policy must pin the guest image: an enforced `measurement`, or a
//! non-empty `idKeyDigests` (the firmware launches a guest with an ID block
//! only if the launch measurement is the one the ID key signed, so an ID key
//! pins the set of images its owner signed). `hostData` does not count: the
//! hypervisor chooses `HOST_DATA` at launch, for any image, and the host is
//! the adversary. A policy whose measurement is `warnOnly` and that names no
//! ID key admits any guest image AMD's firmware runs; it is refused
//! ([`PolicyError::ImageNotPinned`]) unless it says `"insecureAnyImage": true`.
//!
//! # What the launch measurement pins, and under which launch
//!
//! `MEASUREMENT` is the digest the AMD firmware computes while the host
//! launches the guest: the pages it adds (the guest firmware, its
//! metadata's secrets, CPUID and zero pages), and one VMSA per vCPU (so the
//! vCPU count and type). It covers nothing loaded after launch. Whether it
//! pins the kernel, the initrd and the command line depends on the launch:
//!
//! | launch | what `MEASUREMENT` pins |
//! |---|---|
//! | measured direct boot: a firmware with an `SNP_KERNEL_HASHES` section (edk2's `OvmfPkg/AmdSev` build), whose hashes page the host fills with the SHA-256 of the kernel, initrd and command line | firmware, vCPUs, and the kernel, initrd and command line (the firmware refuses to boot others than the hashes name) |
//! | any other (a firmware without that section, a boot from a disk or a boot loader) | firmware and vCPUs only: any kernel, initrd and command line pass |
//!
//! So a policy pins the image only when its `measurement` is that of a
//! measured direct boot of the image, with the kernel hashes table, for
//! the firmware, vCPU count and type the cluster runs. The report carries
//! the measurement alone, not the launch it came of, so the policy says
//! which launch it was (`launch`, with the kernel, initrd and command-line
//! hashes it was taken with): a bare-metal policy that declares none, or
//! declares a launch without the hashes table (`firmwareOnly`), is refused
//! when it is read, since such a measurement admits any guest the host
//! boots under the firmware. An ID key (`idKeyDigests`) pins what its owner
//! signed, which is again only the launch measurement, so it needs the same
//! declaration.
//!
//! Read by hand, not with a serde derive: the bootstrapper links this parser,
//! and derives for the three policies (measurement, SNP, TDX) grew it by some
//! 12 KB, past its size budget.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::report::{Product, SigningKey, TcbVersion};
use confboot_attest::measurements::{
    MeasurementPolicy, PolicyError, parse_entry, parse_json_unique_keys, read_policy_text,
};

/// Length of the SEV-SNP launch measurement (SHA-384).
pub const MEASUREMENT_LEN: usize = 48;

/// Length of an SEV-SNP `CHIP_ID`.
pub const CHIP_ID_LEN: usize = 64;

/// The most chip ids an `allowedChipIds` list may name.
pub const MAX_ALLOWED_CHIP_IDS: usize = 1024;

/// The SHA-256 digests the SEV kernel hashes table of a measured direct
/// boot holds (the policy's `kernelHash`, `initrdHash`, `cmdlineHash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelHashes {
    /// SHA-256 of the kernel file.
    pub kernel: [u8; 32],
    /// SHA-256 of the initrd file (of no bytes when there is none).
    pub initrd: [u8; 32],
    /// SHA-256 of the command line with its terminating NUL byte.
    pub cmdline: [u8; 32],
}

/// The launch an SEV-SNP policy's measurement was taken of (`launch`).
/// The hashes are boxed to keep the policy, held in every validator, small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnpLaunch {
    /// `"measuredDirectBoot"`: a direct boot whose firmware (edk2's
    /// `OvmfPkg/AmdSev` build) carries the SEV kernel hashes table, filled
    /// with these hashes: the measurement pins the kernel, initrd and
    /// command line.
    MeasuredDirectBoot(Box<KernelHashes>),
    /// `"firmwareOnly"`: a launch without the kernel hashes table: the
    /// measurement pins the firmware and vCPUs, not what they boot.
    FirmwareOnly,
}

/// Per-component minimum SVNs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinimumTcb {
    /// Minimum bootloader SVN.
    pub bootloader: u8,
    /// Minimum TEE SVN.
    pub tee: u8,
    /// Minimum SNP firmware SVN.
    pub snp: u8,
    /// Minimum microcode SVN.
    pub microcode: u8,
    /// Minimum FMC SVN (products with an FMC only).
    pub fmc: u8,
}

impl MinimumTcb {
    /// The default minimum for `product` when a policy names none
    /// (`None` for a product without one, whose reports are then
    /// refused). The figures, and where they come from:
    ///
    /// | product | FMC | bootloader | TEE | SNP | microcode | source |
    /// |---|---|---|---|---|---|---|
    /// | Milan | — | 3 | 0 | 8 | 115 | the TCB of SNP firmware 1.52; Constellation's default for Milan |
    /// | Genoa | — | 7 | 0 | 14 | 72 | the floors of Tinfoil's verifier (`tinfoil-go`, `verifier/attestation/sev.go`), with firmware ABI 1.55 |
    /// | Turin | 1 | 1 | 1 | 4 | 82 | the same verifier's Turin floors, with firmware ABI 1.58; SNP SVN 4 is also where Linux (`drivers/crypto/ccp/sev-dev.c`) places the Turin fix of AMD-SB-3023 |
    ///
    /// These are floors, not the newest TCB: after AMD-SB-3019 (2025) CCF
    /// raised its Milan minimum to bootloader 4, TEE 0, SNP 24, microcode
    /// 219 (its TCB version `db18000000000004`), and a cluster on current
    /// firmware should name its own `minimumTcb`, with a
    /// `tcbWarningMargin` to see the next raise coming.
    pub fn default_for(product: Product) -> Option<MinimumTcb> {
        match product {
            Product::Milan => Some(MinimumTcb {
                bootloader: 3,
                tee: 0,
                snp: 8,
                microcode: 115,
                fmc: 0,
            }),
            Product::Genoa => Some(MinimumTcb {
                bootloader: 7,
                tee: 0,
                snp: 14,
                microcode: 72,
                fmc: 0,
            }),
            Product::Turin => Some(MinimumTcb {
                bootloader: 1,
                tee: 1,
                snp: 4,
                microcode: 82,
                fmc: 1,
            }),
        }
    }

    /// Each component of `tcb` with its minimum, as `(name, actual,
    /// minimum)` (FMC only where the product has one).
    fn components(&self, tcb: &TcbVersion) -> Vec<(&'static str, u8, u8)> {
        let mut out = Vec::with_capacity(5);
        if let Some(fmc) = tcb.fmc {
            out.push(("fmc", fmc, self.fmc));
        }
        out.extend([
            ("bootloader", tcb.bootloader, self.bootloader),
            ("tee", tcb.tee, self.tee),
            ("snp", tcb.snp, self.snp),
            ("microcode", tcb.microcode, self.microcode),
        ]);
        out
    }

    /// The components of `tcb` that reach their minimum by fewer than
    /// `margin` SVNs, as `name actual (minimum M)`: admitted, with a
    /// warning. A margin of 0 warns of nothing.
    pub fn near(&self, tcb: &TcbVersion, margin: u8) -> Vec<String> {
        self.components(tcb)
            .into_iter()
            .filter(|&(_, actual, min)| {
                actual >= min && u16::from(actual) < u16::from(min) + u16::from(margin)
            })
            .map(|(name, actual, min)| format!("{name} {actual} (minimum {min})"))
            .collect()
    }

    /// The components of `tcb` below their minimum, as `name actual < minimum`.
    pub fn shortfalls(&self, tcb: &TcbVersion) -> Vec<String> {
        self.components(tcb)
            .into_iter()
            .filter(|&(_, actual, min)| actual < min)
            .map(|(name, actual, min)| format!("{name} {actual} < {min}"))
            .collect()
    }
}

/// What an SEV-SNP report must satisfy, beyond its signatures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnpPolicy {
    /// The expected launch measurement, at index 0. Empty means "not
    /// checked", which [`SnpValidator`](super::SnpValidator) refuses (fails closed).
    pub measurement: MeasurementPolicy,
    /// Minimum TCB for both the reported and the launch TCB.
    /// `None`: the safe default per product ([`MinimumTcb::default_for`]).
    pub minimum_tcb: Option<MinimumTcb>,
    /// The required VMPL.
    pub vmpl: u32,
    /// Whether the DEBUG guest policy bit is accepted.
    pub allow_debug: bool,
    /// Whether a guest policy that lets the host run SMT is accepted
    /// (`allowSmt`, default true: most hosts run SMT; false requires a guest
    /// that the firmware launches only with SMT off).
    pub allow_smt: bool,
    /// Whether a guest policy that allows a migration agent is accepted
    /// (`allowMigrationAgent`, default false: a migration agent can read the
    /// guest's memory).
    pub allow_migration_agent: bool,
    /// The least firmware ABI version, `(major, minor)` (`minimumAbi`:
    /// `"1.51"`; default `0.0`, any).
    pub minimum_abi: (u8, u8),
    /// How close (in SVNs) to its minimum a TCB component is admitted
    /// with a warning (`tcbWarningMargin`; 0: no warning).
    pub tcb_warning_margin: u8,
    /// Required `HOST_DATA`, if any.
    pub host_data: Option<[u8; 32]>,
    /// Accepted `ID_KEY_DIGEST`s; empty means any.
    pub id_key_digests: Vec<[u8; 48]>,
    /// The chips whose reports are admitted (`allowedChipIds`); `None`:
    /// any chip. A list is never empty when read from a policy file, and a
    /// masked (all-zero) chip id never matches it.
    pub allowed_chip_ids: Option<Vec<[u8; CHIP_ID_LEN]>>,
    /// The kinds of endorsement key whose reports are admitted
    /// (`signingKeys`; default VCEK only).
    pub signing_keys: Vec<SigningKey>,
    /// PEM bundles replacing the built-in roots (resolved paths).
    pub root_bundles: Vec<PathBuf>,
    /// Directory of cached VCEKs.
    pub vcek_cache_dir: Option<PathBuf>,
    /// Whether a VCEK that neither evidence nor cache holds is fetched from
    /// AMD's KDS (needs the `kds` feature).
    pub kds_fetch: bool,
    /// The KDS (or a caching proxy) to fetch from; default AMD's.
    pub kds_base_url: Option<String>,
    /// Whether the policy file said `"insecureAnyImage": true`: it may pin no
    /// guest image (a `warnOnly` measurement and no ID key, or a
    /// `firmwareOnly` launch).
    pub insecure_any_image: bool,
    /// The launch the measurement was taken of (`launch`); `None`: not
    /// declared, which [`SnpPolicy::check_launch`] refuses.
    pub launch: Option<SnpLaunch>,
    /// The guest image is pinned by signed reference-value sets, not by
    /// this policy: it holds no `measurement` and no `launch`, and the
    /// validator reports the launch measurement for its caller to match
    /// against the live sets (a joinsvc with `--reference-values-dir`).
    /// Set only by [`SnpPolicy::load_platform`]; never read from a file.
    pub image_by_reference_values: bool,
}

/// What pins the guest image of a policy being parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pinned {
    /// Its `measurement` and `launch`.
    ByPolicy,
    /// Signed reference-value sets, matched by the caller.
    ByReferenceValues,
}

/// `"MAJOR.MINOR"`, each 0..=255.
fn parse_abi(value: &Value) -> Result<(u8, u8), PolicyError> {
    let bad = || format_err("minimumAbi must be \"MAJOR.MINOR\" (e.g. \"1.51\")");
    let text = value.as_str().ok_or_else(bad)?;
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    let part = |p: &str| {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse::<u8>().map_err(|_| bad())
    };
    Ok((part(major)?, part(minor)?))
}

fn format_err(m: impl Into<String>) -> PolicyError {
    PolicyError::Format(m.into())
}

fn hex_field<const N: usize>(v: &Value, what: &str) -> Result<[u8; N], PolicyError> {
    let s = v
        .as_str()
        .ok_or_else(|| format_err(format!("{what} must be a hex string")))?;
    let bytes = confboot_util::hex::decode(s).map_err(|e| format_err(format!("{what}: {e}")))?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| format_err(format!("{what} has {} bytes, want {N}", bytes.len())))
}

/// A list of hardware identities, each `N` bytes in hex: at least one, at
/// most `max`, no two equal, none all zero (the value a masked identity
/// reads as). SEV-SNP's `allowedChipIds` is one; a TDX policy pins its
/// platforms the same way (a key such as `allowedPlatformIds`, read here,
/// compared in its own named check).
fn parse_hardware_ids<const N: usize>(
    v: &Value,
    what: &str,
    max: usize,
) -> Result<Vec<[u8; N]>, PolicyError> {
    let arr = v
        .as_array()
        .ok_or_else(|| format_err(format!("{what} must be a list of {}-hex-digit ids", 2 * N)))?;
    if arr.is_empty() {
        return Err(format_err(format!(
            "{what} is empty: it would admit no machine (leave the key out to admit any)"
        )));
    }
    if arr.len() > max {
        return Err(format_err(format!(
            "{what} names {} ids, at most {max}",
            arr.len()
        )));
    }
    let mut ids: Vec<[u8; N]> = Vec::with_capacity(arr.len());
    for (i, entry) in arr.iter().enumerate() {
        let id: [u8; N] = hex_field(entry, &format!("{what}[{i}]"))?;
        if id.iter().all(|b| *b == 0) {
            return Err(format_err(format!(
                "{what}[{i}] is all zero, the id a masked report carries: it names no machine"
            )));
        }
        if ids.contains(&id) {
            return Err(format_err(format!(
                "{what}[{i}] repeats an earlier id ({}…)",
                confboot_util::hex::encode(&id[..8])
            )));
        }
        ids.push(id);
    }
    Ok(ids)
}

fn path_list(v: &Value, what: &str, base: Option<&Path>) -> Result<Vec<PathBuf>, PolicyError> {
    let arr = v
        .as_array()
        .ok_or_else(|| format_err(format!("{what} must be a list of paths")))?;
    arr.iter()
        .map(|p| {
            p.as_str()
                .map(|s| resolve(s, base))
                .ok_or_else(|| format_err(format!("{what} must be a list of paths")))
        })
        .collect()
}

fn resolve(path: &str, base: Option<&Path>) -> PathBuf {
    let p = PathBuf::from(path);
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}

impl Default for SnpPolicy {
    /// Nothing pinned yet; SMT allowed, no migration agent, no debugging,
    /// VMPL 0.
    fn default() -> Self {
        SnpPolicy {
            measurement: MeasurementPolicy::default(),
            minimum_tcb: None,
            vmpl: 0,
            allow_debug: false,
            allow_smt: true,
            allow_migration_agent: false,
            minimum_abi: (0, 0),
            tcb_warning_margin: 0,
            host_data: None,
            id_key_digests: Vec::new(),
            allowed_chip_ids: None,
            signing_keys: vec![SigningKey::Vcek],
            root_bundles: Vec::new(),
            vcek_cache_dir: None,
            kds_fetch: false,
            kds_base_url: None,
            insecure_any_image: false,
            launch: None,
            image_by_reference_values: false,
        }
    }
}

impl SnpPolicy {
    /// Parses the JSON text of a policy; relative paths stay as written.
    /// The launch is read but not required (see [`SnpPolicy::from_json_at`]).
    pub fn from_json(text: &str) -> Result<SnpPolicy, PolicyError> {
        Self::from_json_at(text, None)
    }

    /// Parses the JSON text of a policy, resolving relative paths against
    /// `base`. A `launch` is read if present but not required: this is the
    /// parser of the SNP part of an Azure policy too, whose launch is the
    /// paravisor's. A bare-metal SEV-SNP policy is read with
    /// [`SnpPolicy::from_json_direct_boot_at`] or [`SnpPolicy::load`].
    pub fn from_json_at(text: &str, base: Option<&Path>) -> Result<SnpPolicy, PolicyError> {
        Self::parse(text, base, Pinned::ByPolicy)
    }

    /// Parses the platform part of a policy whose image signed
    /// reference-value sets pin: every key of [`SnpPolicy::from_json_at`]
    /// but `measurement`, `launch`, the kernel hashes and
    /// `insecureAnyImage`, which the sets stand in for (each is refused
    /// here, so that a policy file means one thing). The result says
    /// [`SnpPolicy::image_by_reference_values`].
    pub fn from_json_platform_at(
        text: &str,
        base: Option<&Path>,
    ) -> Result<SnpPolicy, PolicyError> {
        Self::parse(text, base, Pinned::ByReferenceValues)
    }

    /// Reads the platform part of a policy whose image signed sets pin
    /// ([`SnpPolicy::from_json_platform_at`]), bounded as
    /// [`SnpPolicy::load`].
    pub fn load_platform(path: &Path) -> Result<SnpPolicy, PolicyError> {
        let text = read_policy_text(path)?;
        Self::from_json_platform_at(&text, path.parent())
    }

    fn parse(text: &str, base: Option<&Path>, pinned: Pinned) -> Result<SnpPolicy, PolicyError> {
        let root = parse_json_unique_keys(text)?;
        let obj = root
            .as_object()
            .ok_or_else(|| format_err("top level must be an object"))?;
        let mut policy = SnpPolicy::default();
        let mut seen_measurement = false;
        let mut launch: Option<&str> = None;
        let (mut kernel, mut initrd, mut cmdline) = (None, None, None);
        for (key, value) in obj {
            if pinned == Pinned::ByReferenceValues
                && matches!(
                    key.as_str(),
                    "launch"
                        | "kernelHash"
                        | "initrdHash"
                        | "cmdlineHash"
                        | "measurement"
                        | "insecureAnyImage"
                )
            {
                return Err(format_err(format!(
                    "{key:?} is the signed reference-value sets' (--reference-values-dir): \
                     this policy holds only the platform's checks"
                )));
            }
            match key.as_str() {
                "launch" => {
                    launch = Some(
                        value
                            .as_str()
                            .filter(|l| matches!(*l, "measuredDirectBoot" | "firmwareOnly"))
                            .ok_or_else(|| {
                                format_err(
                                    "launch must be \"measuredDirectBoot\" or \"firmwareOnly\"",
                                )
                            })?,
                    );
                }
                "kernelHash" => kernel = Some(hex_field::<32>(value, "kernelHash")?),
                "initrdHash" => initrd = Some(hex_field::<32>(value, "initrdHash")?),
                "cmdlineHash" => cmdline = Some(hex_field::<32>(value, "cmdlineHash")?),
                "measurement" => {
                    let entry = parse_entry(0, value, MEASUREMENT_LEN).map_err(|e| match e {
                        PolicyError::DigestLength { .. } => {
                            format_err("measurement: expected must be 48 bytes (96 hex digits)")
                        }
                        e => format_err(format!("measurement: {e}")),
                    })?;
                    policy.measurement = MeasurementPolicy::default();
                    policy.measurement.set(0, entry.value, entry.warn_only);
                    seen_measurement = true;
                }
                "minimumTcb" => policy.minimum_tcb = Some(parse_minimum_tcb(value)?),
                "vmpl" => {
                    policy.vmpl = value
                        .as_u64()
                        .filter(|v| *v <= 3)
                        .ok_or_else(|| format_err("vmpl must be 0, 1, 2 or 3"))?
                        as u32;
                }
                "allowDebug" => {
                    policy.allow_debug = value
                        .as_bool()
                        .ok_or_else(|| format_err("allowDebug must be true or false"))?;
                }
                "allowSmt" => {
                    policy.allow_smt = value
                        .as_bool()
                        .ok_or_else(|| format_err("allowSmt must be true or false"))?;
                }
                "allowMigrationAgent" => {
                    policy.allow_migration_agent = value
                        .as_bool()
                        .ok_or_else(|| format_err("allowMigrationAgent must be true or false"))?;
                }
                "minimumAbi" => policy.minimum_abi = parse_abi(value)?,
                "tcbWarningMargin" => {
                    policy.tcb_warning_margin =
                        value
                            .as_u64()
                            .and_then(|m| u8::try_from(m).ok())
                            .ok_or_else(|| format_err("tcbWarningMargin must be 0..=255"))?;
                }
                "hostData" => policy.host_data = Some(hex_field(value, "hostData")?),
                "idKeyDigests" => {
                    let arr = value
                        .as_array()
                        .ok_or_else(|| format_err("idKeyDigests must be a list"))?;
                    policy.id_key_digests = arr
                        .iter()
                        .map(|v| hex_field(v, "idKeyDigests entry"))
                        .collect::<Result<_, _>>()?;
                }
                "allowedChipIds" => {
                    policy.allowed_chip_ids = Some(parse_hardware_ids::<CHIP_ID_LEN>(
                        value,
                        "allowedChipIds",
                        MAX_ALLOWED_CHIP_IDS,
                    )?);
                }
                "signingKeys" => policy.signing_keys = parse_signing_keys(value)?,
                "rootBundles" => policy.root_bundles = path_list(value, "rootBundles", base)?,
                "vcekCacheDir" => {
                    let s = value
                        .as_str()
                        .ok_or_else(|| format_err("vcekCacheDir must be a path"))?;
                    policy.vcek_cache_dir = Some(resolve(s, base));
                }
                "kdsFetch" => {
                    policy.kds_fetch = value
                        .as_bool()
                        .ok_or_else(|| format_err("kdsFetch must be true or false"))?;
                    if policy.kds_fetch && !cfg!(feature = "kds") {
                        return Err(format_err(
                            "kdsFetch needs confboot built with the `kds` feature",
                        ));
                    }
                }
                "kdsBaseUrl" => {
                    let url = value
                        .as_str()
                        .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
                        .ok_or_else(|| format_err("kdsBaseUrl must be an http(s) URL"))?;
                    policy.kds_base_url = Some(url.to_string());
                }
                "insecureAnyImage" => {
                    policy.insecure_any_image = value
                        .as_bool()
                        .ok_or_else(|| format_err("insecureAnyImage must be true or false"))?;
                }
                other => return Err(format_err(format!("unknown key {other:?}"))),
            }
        }
        if pinned == Pinned::ByReferenceValues {
            policy.image_by_reference_values = true;
            return Ok(policy);
        }
        if !seen_measurement {
            return Err(format_err("\"measurement\" is required"));
        }
        policy.launch = match (launch, kernel, initrd, cmdline) {
            (Some("measuredDirectBoot"), Some(kernel), Some(initrd), Some(cmdline)) => {
                Some(SnpLaunch::MeasuredDirectBoot(Box::new(KernelHashes {
                    kernel,
                    initrd,
                    cmdline,
                })))
            }
            (Some("measuredDirectBoot"), ..) => {
                return Err(format_err(
                    "launch measuredDirectBoot needs kernelHash, initrdHash and cmdlineHash \
                     (the SHA-256 its kernel hashes table holds)",
                ));
            }
            (_, None, None, None) => launch.map(|_| SnpLaunch::FirmwareOnly),
            _ => {
                return Err(format_err(
                    "kernelHash, initrdHash and cmdlineHash belong to \"launch\": \
                     \"measuredDirectBoot\" only",
                ));
            }
        };
        if !policy.pins_image() {
            if !policy.insecure_any_image {
                return Err(PolicyError::ImageNotPinned);
            }
            log::warn!(
                "SEV-SNP policy pins no guest image (warnOnly measurement, no idKeyDigests) and \
                 says insecureAnyImage: ANY guest image AMD firmware runs is admitted"
            );
        }
        Ok(policy)
    }

    /// Whether the policy pins the guest image: an enforced launch
    /// measurement or at least one accepted ID key (`hostData` does not
    /// count: the host chooses it).
    pub fn pins_image(&self) -> bool {
        self.measurement.enforces_something() || !self.id_key_digests.is_empty()
    }

    /// Whether the declared launch lets the measurement pin the image: a
    /// measured direct boot does; no launch is refused
    /// ([`PolicyError::SnpLaunchUndeclared`]), and so is a `firmwareOnly`
    /// one ([`PolicyError::SnpLaunchNotMeasured`]) unless the policy says
    /// `insecureAnyImage` (then logged as a warning).
    pub fn check_launch(&self) -> Result<(), PolicyError> {
        match &self.launch {
            Some(SnpLaunch::MeasuredDirectBoot(_)) => Ok(()),
            None => Err(PolicyError::SnpLaunchUndeclared),
            Some(SnpLaunch::FirmwareOnly) if self.insecure_any_image => {
                log::warn!(
                    "SEV-SNP policy declares a firmwareOnly launch and says insecureAnyImage: \
                     ANY kernel, initrd and command line the host boots under the firmware is \
                     admitted"
                );
                Ok(())
            }
            Some(SnpLaunch::FirmwareOnly) => Err(PolicyError::SnpLaunchNotMeasured),
        }
    }

    /// Parses the JSON text of a bare-metal SEV-SNP policy, resolving
    /// relative paths against `base`: [`SnpPolicy::from_json_at`], then
    /// [`SnpPolicy::check_launch`].
    pub fn from_json_direct_boot_at(
        text: &str,
        base: Option<&Path>,
    ) -> Result<SnpPolicy, PolicyError> {
        let policy = Self::from_json_at(text, base)?;
        policy.check_launch()?;
        Ok(policy)
    }

    /// Reads a bare-metal SEV-SNP policy file (at most
    /// [`MAX_POLICY_BYTES`](confboot_attest::measurements::MAX_POLICY_BYTES),
    /// through [`read_policy_text`]) with
    /// [`SnpPolicy::from_json_direct_boot_at`]; relative paths in it are
    /// resolved against the file's directory.
    pub fn load(path: &Path) -> Result<SnpPolicy, PolicyError> {
        let text = read_policy_text(path)?;
        Self::from_json_direct_boot_at(&text, path.parent())
    }
}

/// `["VCEK"]`, `["VLEK"]` or both: not empty, none twice.
fn parse_signing_keys(value: &Value) -> Result<Vec<SigningKey>, PolicyError> {
    let bad = || format_err("signingKeys must list \"VCEK\" and/or \"VLEK\", each once");
    let arr = value.as_array().filter(|a| !a.is_empty()).ok_or_else(bad)?;
    let mut keys = Vec::with_capacity(2);
    for v in arr {
        let key = match v.as_str() {
            Some("VCEK") => SigningKey::Vcek,
            Some("VLEK") => SigningKey::Vlek,
            _ => return Err(bad()),
        };
        if keys.contains(&key) {
            return Err(bad());
        }
        keys.push(key);
    }
    Ok(keys)
}

fn parse_minimum_tcb(value: &Value) -> Result<MinimumTcb, PolicyError> {
    let obj = value
        .as_object()
        .ok_or_else(|| format_err("minimumTcb must be an object"))?;
    let mut min = MinimumTcb::default();
    for (name, v) in obj {
        let n = v
            .as_u64()
            .filter(|n| *n <= 255)
            .ok_or_else(|| format_err(format!("minimumTcb.{name} must be 0..=255")))?
            as u8;
        match name.as_str() {
            "bootloader" => min.bootloader = n,
            "tee" => min.tee = n,
            "snp" => min.snp = n,
            "microcode" => min.microcode = n,
            "fmc" => min.fmc = n,
            other => {
                return Err(format_err(format!(
                    "minimumTcb: unknown component {other:?}"
                )));
            }
        }
    }
    Ok(min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_attest::measurements::MAX_POLICY_BYTES;

    const M: &str = "7a1e5c266c0108dbc9bb94fa926951320940915d0aafb42464bd88b579ea158d3e1a0dc39b2c60bd95b9c480cd81841f";

    /// A measured direct boot's declaration.
    const DIRECT: &str = r#""launch": "measuredDirectBoot",
        "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111",
        "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222",
        "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333""#;

    #[test]
    fn a_platform_policy_leaves_the_image_to_the_signed_sets_and_holds_no_image_key() {
        let p = SnpPolicy::from_json_platform_at(
            r#"{"vmpl": 1, "allowSmt": false, "signingKeys": ["VCEK", "VLEK"]}"#,
            None,
        )
        .unwrap();
        assert!(p.image_by_reference_values);
        assert_eq!((p.vmpl, p.allow_smt), (1, false));
        assert!(p.measurement.entries().is_empty() && p.launch.is_none());
        // An empty one is every default check.
        assert!(
            SnpPolicy::from_json_platform_at("{}", None)
                .unwrap()
                .image_by_reference_values
        );
        for key in [
            r#""measurement": {"expected": "00"}"#,
            r#""launch": "measuredDirectBoot""#,
            r#""kernelHash": "11""#,
            r#""initrdHash": "11""#,
            r#""cmdlineHash": "11""#,
            r#""insecureAnyImage": true"#,
        ] {
            let e = SnpPolicy::from_json_platform_at(&format!("{{{key}}}"), None).unwrap_err();
            assert!(
                e.to_string().contains("signed reference-value sets"),
                "{key}: {e}"
            );
        }
        // The ordinary parsers never say the sets pin the image.
        let full = format!(
            r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "{k}", "initrdHash": "{k}", "cmdlineHash": "{k}"}}"#,
            "ab".repeat(48),
            k = "11".repeat(32)
        );
        assert!(
            !SnpPolicy::from_json_direct_boot_at(&full, None)
                .unwrap()
                .image_by_reference_values
        );
        assert!(
            SnpPolicy::from_json_at("{}", None).is_err(),
            "measurement required"
        );
    }

    #[test]
    fn the_launch_is_declared_and_only_a_measured_direct_boot_pins_the_image() {
        let m = format!(r#""measurement": {{"expected": "{M}"}}"#);
        let p = SnpPolicy::from_json_direct_boot_at(&format!("{{{m}, {DIRECT}}}"), None).unwrap();
        assert_eq!(
            p.launch,
            Some(SnpLaunch::MeasuredDirectBoot(Box::new(KernelHashes {
                kernel: [0x11; 32],
                initrd: [0x22; 32],
                cmdline: [0x33; 32],
            })))
        );
        // No launch: read (the SNP part of an Azure policy), refused for
        // bare metal.
        let bare = format!("{{{m}}}");
        assert_eq!(SnpPolicy::from_json(&bare).unwrap().launch, None);
        let err = SnpPolicy::from_json_direct_boot_at(&bare, None).unwrap_err();
        assert!(matches!(err, PolicyError::SnpLaunchUndeclared), "{err:?}");
        assert!(err.to_string().contains("measuredDirectBoot"), "{err}");
        // A launch without the kernel hashes table: refused, unless marked.
        let fw = format!(r#"{{{m}, "launch": "firmwareOnly"}}"#);
        assert_eq!(
            SnpPolicy::from_json(&fw).unwrap().launch,
            Some(SnpLaunch::FirmwareOnly)
        );
        let err = SnpPolicy::from_json_direct_boot_at(&fw, None).unwrap_err();
        assert!(matches!(err, PolicyError::SnpLaunchNotMeasured), "{err:?}");
        assert!(err.to_string().contains("insecureAnyImage"), "{err}");
        let marked = format!(r#"{{{m}, "launch": "firmwareOnly", "insecureAnyImage": true}}"#);
        assert!(SnpPolicy::from_json_direct_boot_at(&marked, None).is_ok());
        // An ID key pins the launch measurement its owner signed: the same
        // declaration is needed.
        let id = format!(
            r#"{{"measurement": {{"expected": "{M}", "warnOnly": true}}, "idKeyDigests": ["{}"]}}"#,
            "22".repeat(48)
        );
        assert!(matches!(
            SnpPolicy::from_json_direct_boot_at(&id, None),
            Err(PolicyError::SnpLaunchUndeclared)
        ));
        // Malformed declarations.
        let h = "44".repeat(32);
        for (bad, why) in [
            (format!(r#"{{{m}, "launch": "direct"}}"#), "launch must be"),
            (format!(r#"{{{m}, "launch": true}}"#), "launch must be"),
            (
                format!(r#"{{{m}, "launch": "measuredDirectBoot"}}"#),
                "needs kernelHash",
            ),
            (
                format!(
                    r#"{{{m}, "launch": "measuredDirectBoot", "kernelHash": "{h}", "initrdHash": "{h}"}}"#
                ),
                "needs kernelHash",
            ),
            (
                format!(r#"{{{m}, "launch": "firmwareOnly", "kernelHash": "{h}"}}"#),
                "measuredDirectBoot\" only",
            ),
            (
                format!(r#"{{{m}, "kernelHash": "{h}"}}"#),
                "measuredDirectBoot\" only",
            ),
            (
                format!(
                    r#"{{{m}, "launch": "measuredDirectBoot", "kernelHash": "{}", "initrdHash": "{h}", "cmdlineHash": "{h}"}}"#,
                    "44".repeat(48)
                ),
                "kernelHash has 48 bytes, want 32",
            ),
        ] {
            match SnpPolicy::from_json(&bad) {
                Err(PolicyError::Format(e)) => assert!(e.contains(why), "{bad}: {e}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        // Named twice: refused like any repeated key.
        assert!(matches!(
            SnpPolicy::from_json(&format!(r#"{{{m}, {DIRECT}, "launch": "firmwareOnly"}}"#)),
            Err(PolicyError::DuplicateKey(_))
        ));
    }

    #[test]
    fn parses_every_field() {
        let text = format!(
            r#"{{"measurement": {{"expected": "{M}", "warnOnly": true}},
                "minimumTcb": {{"bootloader": 3, "tee": 1, "snp": 8, "microcode": 115, "fmc": 2}},
                "vmpl": 1, "allowDebug": true, "hostData": "{h}",
                "idKeyDigests": ["{d}"], "rootBundles": ["a.pem", "/b.pem"],
                "vcekCacheDir": "cache"}}"#,
            h = "11".repeat(32),
            d = "22".repeat(48)
        );
        let p = SnpPolicy::from_json_at(&text, Some(Path::new("/etc/cb"))).unwrap();
        assert_eq!(
            p.measurement.entries()[&0].value,
            confboot_util::hex::decode(M).unwrap()
        );
        assert!(p.measurement.entries()[&0].warn_only);
        assert_eq!(
            p.minimum_tcb.unwrap(),
            MinimumTcb {
                bootloader: 3,
                tee: 1,
                snp: 8,
                microcode: 115,
                fmc: 2
            }
        );
        assert_eq!(p.vmpl, 1);
        assert!(p.allow_debug);
        assert_eq!(p.host_data, Some([0x11; 32]));
        assert_eq!(p.id_key_digests, vec![[0x22; 48]]);
        assert_eq!(
            p.root_bundles,
            vec![PathBuf::from("/etc/cb/a.pem"), PathBuf::from("/b.pem")]
        );
        assert_eq!(p.vcek_cache_dir, Some(PathBuf::from("/etc/cb/cache")));
    }

    #[test]
    fn defaults_are_strict() {
        let p =
            SnpPolicy::from_json(&format!(r#"{{"measurement": {{"expected": "{M}"}}}}"#)).unwrap();
        assert_eq!(p.vmpl, 0);
        assert!(!p.allow_debug);
        assert_eq!(p.minimum_tcb, None, "the per-product default applies");
        let milan = MinimumTcb::default_for(Product::Milan).unwrap();
        assert_eq!(
            (milan.bootloader, milan.tee, milan.snp, milan.microcode),
            (3, 0, 8, 115)
        );
        // Every product has a documented default (a product without one
        // would fail closed, see check_minimum_tcb).
        let genoa = MinimumTcb::default_for(Product::Genoa).unwrap();
        assert_eq!(
            (genoa.bootloader, genoa.tee, genoa.snp, genoa.microcode),
            (7, 0, 14, 72)
        );
        let turin = MinimumTcb::default_for(Product::Turin).unwrap();
        assert_eq!(
            (
                turin.fmc,
                turin.bootloader,
                turin.tee,
                turin.snp,
                turin.microcode
            ),
            (1, 1, 1, 4, 82)
        );
        assert_eq!(p.tcb_warning_margin, 0);
        assert!(p.host_data.is_none() && p.id_key_digests.is_empty());
    }

    #[test]
    fn a_tcb_near_its_minimum_is_named_for_a_warning() {
        let p = SnpPolicy::from_json(&format!(
            r#"{{"measurement": {{"expected": "{M}"}}, "tcbWarningMargin": 2}}"#
        ))
        .unwrap();
        assert_eq!(p.tcb_warning_margin, 2);
        let milan = MinimumTcb::default_for(Product::Milan).unwrap();
        let tcb = |snp: u8, microcode: u8| TcbVersion {
            fmc: None,
            bootloader: 9,
            tee: 5,
            snp,
            microcode,
        };
        // SNP 9 is one above 8, microcode 115 at its minimum: both named.
        assert_eq!(
            milan.near(&tcb(9, 115), 2),
            ["snp 9 (minimum 8)", "microcode 115 (minimum 115)"]
        );
        assert!(milan.near(&tcb(10, 117), 2).is_empty(), "two or more above");
        assert!(
            milan.near(&tcb(8, 115), 0).is_empty(),
            "a margin of 0 is off"
        );
        assert!(
            milan.near(&tcb(7, 115), 2).len() == 1,
            "below is a shortfall, not a warning"
        );
        for bad in ["256", "-1", "\"2\""] {
            let text =
                format!(r#"{{"measurement": {{"expected": "{M}"}}, "tcbWarningMargin": {bad}}}"#);
            assert!(SnpPolicy::from_json(&text).is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_malformed_policies() {
        let m = format!(r#""measurement": {{"expected": "{M}"}}"#);
        for bad in [
            "{}".to_string(),
            "[]".to_string(),
            r#"{"measurement": {"expected": "00"}}"#.to_string(),
            format!(
                r#"{{"measurement": {{"expected": "{}"}}}}"#,
                "00".repeat(32)
            ),
            format!(r#"{{{m}, "vmpl": 4}}"#),
            format!(r#"{{{m}, "vmpl": -1}}"#),
            format!(r#"{{{m}, "allowDebug": "no"}}"#),
            format!(r#"{{{m}, "minimumTcb": {{"snp": 256}}}}"#),
            format!(r#"{{{m}, "minimumTcb": {{"sn": 1}}}}"#),
            format!(r#"{{{m}, "hostData": "00"}}"#),
            format!(r#"{{{m}, "idKeyDigests": ["zz"]}}"#),
            format!(r#"{{{m}, "rootBundles": "x.pem"}}"#),
            format!(r#"{{{m}, "allowdebug": true}}"#),
        ] {
            assert!(
                matches!(SnpPolicy::from_json(&bad), Err(PolicyError::Format(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_policy_that_pins_no_image_is_refused_unless_marked() {
        let warn = format!(r#""measurement": {{"expected": "{M}", "warnOnly": true}}"#);
        let host = format!(r#""hostData": "{}""#, "11".repeat(32));
        let id = format!(r#""idKeyDigests": ["{}"]"#, "22".repeat(48));
        // warnOnly and nothing else, or only what the host chooses: refused.
        for text in [
            format!("{{{warn}}}"),
            format!("{{{warn}, {host}}}"),
            format!(r#"{{{warn}, "idKeyDigests": []}}"#),
            format!(r#"{{{warn}, {host}, "insecureAnyImage": false}}"#),
        ] {
            let err = SnpPolicy::from_json(&text).unwrap_err();
            assert!(
                matches!(err, PolicyError::ImageNotPinned),
                "{text}: {err:?}"
            );
            assert!(err.to_string().contains("insecureAnyImage"), "{err}");
        }
        // An ID key pins the images its owner signed.
        let p = SnpPolicy::from_json(&format!("{{{warn}, {id}}}")).unwrap();
        assert!(p.pins_image() && !p.insecure_any_image);
        // An enforced measurement pins the image.
        let p =
            SnpPolicy::from_json(&format!(r#"{{"measurement": {{"expected": "{M}"}}}}"#)).unwrap();
        assert!(p.pins_image());
        // Said explicitly: accepted, and the policy says so.
        let p = SnpPolicy::from_json(&format!(r#"{{{warn}, "insecureAnyImage": true}}"#)).unwrap();
        assert!(!p.pins_image() && p.insecure_any_image);
        assert!(matches!(
            SnpPolicy::from_json(&format!(r#"{{{warn}, "insecureAnyImage": "yes"}}"#)),
            Err(PolicyError::Format(_))
        ));
    }

    #[test]
    fn allowed_chip_ids_are_read_strictly() {
        let m = format!(r#""measurement": {{"expected": "{M}"}}"#);
        let (a, b) = ("a1".repeat(64), "b2".repeat(64));
        let p =
            SnpPolicy::from_json(&format!(r#"{{{m}, "allowedChipIds": ["{a}", "{b}"]}}"#)).unwrap();
        assert_eq!(p.allowed_chip_ids, Some(vec![[0xa1; 64], [0xb2; 64]]));
        // Without the key: any chip, as before.
        let p = SnpPolicy::from_json(&format!("{{{m}}}")).unwrap();
        assert_eq!(p.allowed_chip_ids, None);

        let too_many = vec![String::new(); MAX_ALLOWED_CHIP_IDS + 1]
            .iter()
            .enumerate()
            .map(|(i, _)| format!("\"{:0128x}\"", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        for (list, why) in [
            ("[]".to_string(), "is empty"),
            (format!(r#""{a}""#), "must be a list"),
            (
                format!(r#"["{a}", "{a}"]"#),
                "repeats an earlier id (a1a1a1a1a1a1a1a1…)",
            ),
            (format!(r#"["{}"]"#, "zz".repeat(64)), "allowedChipIds[0]"),
            (
                format!(r#"["{}"]"#, "a1".repeat(63)),
                "has 63 bytes, want 64",
            ),
            (
                format!(r#"["{}"]"#, "a1".repeat(65)),
                "has 65 bytes, want 64",
            ),
            (
                format!(r#"["{a}", 7]"#),
                "allowedChipIds[1] must be a hex string",
            ),
            (format!(r#"["{}"]"#, "00".repeat(64)), "is all zero"),
            (format!("[{too_many}]"), "names 1025 ids, at most 1024"),
        ] {
            let text = format!(r#"{{{m}, "allowedChipIds": {list}}}"#);
            match SnpPolicy::from_json(&text) {
                Err(PolicyError::Format(e)) => assert!(e.contains(why), "{why}: {e}"),
                other => panic!("{why}: {other:?}"),
            }
        }
        // Named twice: refused like any repeated key.
        assert!(matches!(
            SnpPolicy::from_json(&format!(
                r#"{{{m}, "allowedChipIds": ["{a}"], "allowedChipIds": ["{b}"]}}"#
            )),
            Err(PolicyError::DuplicateKey(_))
        ));
    }

    #[test]
    fn repeated_keys_are_refused() {
        let m = format!(r#""measurement": {{"expected": "{M}"}}"#);
        let w = format!(r#""measurement": {{"expected": "{M}", "warnOnly": true}}"#);
        for text in [
            // The later, permissive measurement would silently win.
            format!(r#"{{{m}, {w}, "insecureAnyImage": true}}"#),
            format!(r#"{{{m}, "allowDebug": false, "allowDebug": true}}"#),
            format!(r#"{{{m}, "minimumTcb": {{"snp": 8, "snp": 0}}}}"#),
            format!(
                r#"{{"measurement": {{"expected": "{M}", "warnOnly": false, "warnOnly": true}}}}"#
            ),
        ] {
            assert!(
                matches!(
                    SnpPolicy::from_json(&text),
                    Err(PolicyError::DuplicateKey(_))
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn load_is_bounded() {
        let dir =
            std::env::temp_dir().join(format!("confboot-snp-policy-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("snp.json");
        let mut text =
            format!(r#"{{"measurement": {{"expected": "{M}"}}, {DIRECT}}}"#).into_bytes();
        std::fs::write(&file, &text).unwrap();
        assert!(SnpPolicy::load(&file).is_ok());
        // A file is a bare-metal policy: its launch is required.
        std::fs::write(
            &file,
            format!(r#"{{"measurement": {{"expected": "{M}"}}}}"#),
        )
        .unwrap();
        assert!(matches!(
            SnpPolicy::load(&file),
            Err(PolicyError::SnpLaunchUndeclared)
        ));
        std::fs::write(&file, &text).unwrap();
        text.resize(MAX_POLICY_BYTES as usize + 1, b' ');
        std::fs::write(&file, &text).unwrap();
        assert!(matches!(
            SnpPolicy::load(&file),
            Err(PolicyError::TooLarge(n)) if n == MAX_POLICY_BYTES + 1
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kds_fetch_needs_the_feature() {
        let text = format!(
            r#"{{"measurement": {{"expected": "{M}"}}, "kdsFetch": true, "kdsBaseUrl": "https://kds.example"}}"#
        );
        let parsed = SnpPolicy::from_json(&text);
        if cfg!(feature = "kds") {
            let p = parsed.unwrap();
            assert!(p.kds_fetch);
            assert_eq!(p.kds_base_url.as_deref(), Some("https://kds.example"));
        } else {
            assert!(matches!(parsed, Err(PolicyError::Format(m)) if m.contains("`kds` feature")));
        }
        let bad = format!(r#"{{"measurement": {{"expected": "{M}"}}, "kdsBaseUrl": "ftp://x"}}"#);
        assert!(matches!(
            SnpPolicy::from_json(&bad),
            Err(PolicyError::Format(_))
        ));
    }

    #[test]
    fn shortfalls_name_each_component() {
        let min = MinimumTcb {
            bootloader: 3,
            tee: 0,
            snp: 9,
            microcode: 116,
            fmc: 0,
        };
        let tcb = TcbVersion {
            fmc: None,
            bootloader: 3,
            tee: 0,
            snp: 8,
            microcode: 115,
        };
        assert_eq!(
            min.shortfalls(&tcb),
            vec!["snp 8 < 9", "microcode 115 < 116"]
        );
    }
}
