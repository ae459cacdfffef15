//! The `azure-sev-snp` policy: what the SEV-SNP report must say (the
//! paravisor's launch, on AMD's chain) and what the vTPM's PCRs must hold
//! (the image), in one file:
//!
//! ```json
//! {"snp":  {"idKeyDigests": ["<96 hex digits>"], "rootBundles": ["milan.pem"]},
//!  "pcrs": {"4": {"expected": "<64 hex digits>"}, "9": {"expected": "<64 hex digits>"}}}
//! ```
//!
//! `snp` is an SEV-SNP policy (`confboot_snp::SnpPolicy`, its relative
//! paths resolved against the file's directory): on Azure the launch it
//! measures is the paravisor's (the HCL and Hyper-V's firmware, which
//! Azure builds and signs with its ID key), not the guest's image, so a
//! policy pins it by `idKeyDigests` or its measurement, and must pin one
//! (`SnpPolicy`'s own rule). `pcrs` is a measurement policy over the
//! paravisor vTPM's SHA-256 PCRs, where the image is measured.
//!
//! Where Azure's firmware and paravisor measure what, on a confidential
//! VM booting Linux through UEFI (the Hyper-V UEFI firmware in the
//! guest, the vTPM in the paravisor at VMPL 0):
//!
//! | PCR | what |
//! |---|---|
//! | 0 | the UEFI firmware (Azure updates it; pin it only for one firmware) |
//! | 1, 2, 3, 5, 6 | firmware configuration, option ROMs, the GPT, platform events |
//! | 4 | the boot applications: the kernel's EFI stub, or the unified kernel image that holds kernel, initrd and command line |
//! | 7 | Secure Boot: its state and the keys that verified the boot applications |
//! | 9 | what the kernel's EFI stub measures: the initrd it loads and the command line (`LoadOptions`) |
//! | 11, 12 | a unified kernel image's sections and command line, when systemd-stub boots it |
//! | 15 | the cluster mark (the node extends it; checked by the caller, never by the policy) |
//!
//! So the image is pinned when PCR 4 (the kernel) and PCR 9 (the initrd
//! and the command line) are enforced: [`AzureSnpPolicy::check_pins_image`]
//! refuses a policy that leaves either unenforced (PCR 15 is dropped first,
//! and 10, 16 and 23, which the running system can extend or reset, never
//! count), at load, at start and at every reload (each reads the file
//! through [`AzureSnpPolicy::load`]).

use std::path::Path;

use confboot_attest::measurements::{NEVER_PIN_IMAGE, parse_json_unique_keys, read_policy_text};
use confboot_attest::{MeasurementPolicy, PolicyError};
use confboot_snp::SnpPolicy;
use confboot_tpm::CLUSTER_ID_PCR;

/// The PCRs that pin the image on Azure: 4 (the kernel or unified kernel
/// image, measured by the firmware as a boot application) and 9 (the
/// initrd and command line, measured by the kernel's EFI stub).
pub const AZURE_IMAGE_PCRS: [u32; 2] = [4, 9];

/// The `azure-sev-snp` policy (see the module documentation).
#[derive(Clone, Debug)]
pub struct AzureSnpPolicy {
    /// What the SEV-SNP report must say.
    pub snp: SnpPolicy,
    /// What the vTPM's PCRs must hold, PCR 15 dropped.
    pub pcrs: MeasurementPolicy,
}

fn format(why: impl Into<String>) -> PolicyError {
    PolicyError::Format(format!("azure-sev-snp policy: {}", why.into()))
}

impl AzureSnpPolicy {
    /// A policy of its parts, held to [`AzureSnpPolicy::check_pins_image`]
    /// (PCR 15 dropped first).
    pub fn new(snp: SnpPolicy, mut pcrs: MeasurementPolicy) -> Result<Self, PolicyError> {
        pcrs.remove(CLUSTER_ID_PCR);
        let policy = AzureSnpPolicy { snp, pcrs };
        policy.check_pins_image()?;
        Ok(policy)
    }

    /// Parses the JSON text of a policy, strictly: the two members and
    /// nothing else, each key once, each part by its own parser, then the
    /// image rule. Relative paths resolve against `base`.
    pub fn from_json_at(text: &str, base: Option<&Path>) -> Result<Self, PolicyError> {
        let root = parse_json_unique_keys(text)?;
        let obj = root
            .as_object()
            .ok_or_else(|| format("the top level must be an object"))?;
        if let Some(other) = obj.keys().find(|k| *k != "snp" && *k != "pcrs") {
            return Err(format(format!(
                "unknown member {:?} (snp and pcrs only)",
                other.chars().take(32).collect::<String>()
            )));
        }
        let part = |name: &str| {
            obj.get(name)
                .filter(|v| v.is_object())
                .map(|v| v.to_string())
                .ok_or_else(|| format(format!("{name} must be an object")))
        };
        let snp = SnpPolicy::from_json_at(&part("snp")?, base)?;
        let pcrs = MeasurementPolicy::from_json(&part("pcrs")?)?;
        AzureSnpPolicy::new(snp, pcrs)
    }

    /// Reads a policy file (at most
    /// [`MAX_POLICY_BYTES`](confboot_attest::measurements::MAX_POLICY_BYTES)); relative paths
    /// in it resolve against its directory.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = read_policy_text(path)?;
        Self::from_json_at(&text, path.parent())
    }

    /// Refuses a policy whose PCRs leave the kernel (PCR 4) or the initrd
    /// and command line (PCR 9) unenforced ([`AZURE_IMAGE_PCRS`]).
    pub fn check_pins_image(&self) -> Result<(), PolicyError> {
        let missing: Vec<String> = AZURE_IMAGE_PCRS
            .into_iter()
            .filter(|i| {
                NEVER_PIN_IMAGE.contains(i)
                    || self.pcrs.entries().get(i).is_none_or(|e| e.warn_only)
            })
            .map(|i| format!("PCR {i}"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(PolicyError::CloudImageNotPinned {
            variant: "azure-sev-snp",
            missing: missing.join(", "),
            why: "on Azure the firmware measures the kernel or unified kernel image into PCR 4, \
                  the kernel's EFI stub the initrd and command line into PCR 9",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNP: &str = r#"{"measurement": {"expected": "7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a"}}"#;

    fn pcr(i: u32, warn_only: bool) -> String {
        format!(
            r#""{i}": {{"expected": "{}", "warnOnly": {warn_only}}}"#,
            "ab".repeat(32)
        )
    }

    fn policy(pcrs: &[String]) -> Result<AzureSnpPolicy, PolicyError> {
        AzureSnpPolicy::from_json_at(
            &format!(r#"{{"snp": {SNP}, "pcrs": {{{}}}}}"#, pcrs.join(", ")),
            None,
        )
    }

    fn missing(e: PolicyError) -> String {
        match e {
            PolicyError::CloudImageNotPinned { missing, .. } => missing,
            other => panic!("not an image-pin refusal: {other}"),
        }
    }

    #[test]
    fn the_kernel_initrd_and_command_line_must_be_pinned() {
        let p = policy(&[pcr(4, false), pcr(9, false), pcr(15, false)]).unwrap();
        assert!(p.pcrs.entries().contains_key(&4) && !p.pcrs.entries().contains_key(&15));
        assert_eq!(missing(policy(&[pcr(4, false)]).unwrap_err()), "PCR 9");
        assert_eq!(missing(policy(&[pcr(9, false)]).unwrap_err()), "PCR 4");
        assert_eq!(
            missing(policy(&[pcr(4, false), pcr(9, true)]).unwrap_err()),
            "PCR 9"
        );
        // The cluster mark and the firmware alone pin no image.
        assert_eq!(
            missing(policy(&[pcr(0, false), pcr(15, false)]).unwrap_err()),
            "PCR 4, PCR 9"
        );
        let e = policy(&[pcr(15, false)]).unwrap_err().to_string();
        assert!(
            e.contains("azure-sev-snp policy does not pin the image"),
            "{e}"
        );
    }

    #[test]
    fn the_policy_is_read_strictly() {
        let pins = format!("{{{}, {}}}", pcr(4, false), pcr(9, false));
        let refused = |text: String| AzureSnpPolicy::from_json_at(&text, None).unwrap_err();
        assert!(matches!(
            refused(format!(r#"{{"snp": {SNP}, "pcrs": {pins}, "tdx": {{}}}}"#)),
            PolicyError::Format(_)
        ));
        assert!(matches!(
            refused(format!(r#"{{"pcrs": {pins}}}"#)),
            PolicyError::Format(_)
        ));
        assert!(matches!(
            refused(format!(r#"{{"snp": {SNP}, "snp": {SNP}, "pcrs": {pins}}}"#)),
            PolicyError::DuplicateKey(_)
        ));
        // The SNP part keeps its own rule: a paravisor launch it pins.
        assert!(matches!(
            refused(format!(
                r#"{{"snp": {{"measurement": {{"expected": "{}", "warnOnly": true}}}}, "pcrs": {pins}}}"#,
                "7a".repeat(48)
            )),
            PolicyError::ImageNotPinned
        ));
    }

    #[test]
    fn a_policy_file_is_held_to_the_rule_when_it_is_loaded() {
        let dir = std::env::temp_dir().join(format!("azure-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("azure.json");
        std::fs::write(
            &file,
            format!(r#"{{"snp": {SNP}, "pcrs": {{{}}}}}"#, pcr(4, false)),
        )
        .unwrap();
        assert_eq!(missing(AzureSnpPolicy::load(&file).unwrap_err()), "PCR 9");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
