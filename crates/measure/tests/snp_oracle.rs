//! The SEV-SNP launch digest prediction against `sev-snp-measure`, the
//! reference implementation VMM operators use (pinned release from PyPI,
//! installed by `scripts/setup.sh`): the same firmware, kernel, initrd,
//! command line, vCPUs and guest features give the same 48 bytes.

use std::path::Path;
use std::process::Command;

use confboot_measure::snp::{KernelHashes, SnpFirmware, SnpLaunch, SnpMeasureError, VcpuType};
use confboot_testkit::TempDir;
use confboot_testkit::ovmf::{
    self, DEBIAN_OVMF, SECTION_CPUID, SECTION_KERNEL_HASHES, SECTION_MEMORY, SECTION_SECRETS,
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the oracle prints for one launch.
struct Oracle<'a> {
    firmware: &'a Path,
    boot: Option<(&'a Path, Option<&'a Path>, &'a str)>,
    vcpus: u32,
    vcpu_type: &'a str,
    guest_features: u64,
}

impl Oracle<'_> {
    fn digest(&self) -> String {
        let mut cmd = Command::new(ovmf::sev_snp_measure());
        cmd.args(["--mode", "snp", "--output-format", "hex"])
            .arg("--vcpus")
            .arg(self.vcpus.to_string())
            .args(["--vcpu-type", self.vcpu_type])
            .arg("--guest-features")
            .arg(format!("{:#x}", self.guest_features))
            .arg("--ovmf")
            .arg(self.firmware);
        if let Some((kernel, initrd, append)) = self.boot {
            cmd.arg("--kernel").arg(kernel).args(["--append", append]);
            if let Some(initrd) = initrd {
                cmd.arg("--initrd").arg(initrd);
            }
        }
        let out = cmd.output().expect("run sev-snp-measure");
        assert!(
            out.status.success(),
            "sev-snp-measure failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn predicted(&self) -> String {
        let firmware = SnpFirmware::parse(std::fs::read(self.firmware).unwrap()).unwrap();
        let hashes = self.boot.map(|(kernel, initrd, append)| {
            let initrd = initrd.map(|i| std::fs::read(i).unwrap());
            KernelHashes::of(&std::fs::read(kernel).unwrap(), initrd.as_deref(), append)
        });
        let launch = SnpLaunch {
            firmware: &firmware,
            hashes,
            vcpus: self.vcpus,
            vcpu_signature: self.vcpu_type.parse::<VcpuType>().unwrap().signature(),
            guest_features: self.guest_features,
        };
        hex(&launch.launch_digest().unwrap())
    }
}

#[test]
fn a_firmware_only_launch_of_debians_ovmf_is_the_digest_sev_snp_measure_computes() {
    for (vcpus, vcpu_type, features) in [
        (1, "EPYC-Milan", 0x1),
        (4, "EPYC-Genoa-v1", 0x1),
        (2, "EPYC-v4", 0x21),
    ] {
        let oracle = Oracle {
            firmware: Path::new(DEBIAN_OVMF),
            boot: None,
            vcpus,
            vcpu_type,
            guest_features: features,
        };
        assert_eq!(oracle.predicted(), oracle.digest(), "{vcpus} × {vcpu_type}");
    }
}

#[test]
fn a_measured_direct_boot_is_the_digest_sev_snp_measure_computes() {
    let dir = TempDir::new("snp-oracle");
    let kernel = dir.path().join("vmlinuz");
    let initrd = dir.path().join("initrd");
    std::fs::write(&kernel, ovmf::filler(3 * 4096 + 17, 7)).unwrap();
    std::fs::write(&initrd, ovmf::filler(9000, 8)).unwrap();
    let crafted = dir.path().join("crafted.fd");
    std::fs::write(
        &crafted,
        ovmf::crafted_from(&std::fs::read(DEBIAN_OVMF).unwrap()),
    )
    .unwrap();
    let synthetic = dir.path().join("synthetic.fd");
    std::fs::write(
        &synthetic,
        ovmf::synthetic(
            6,
            &[
                (0x80_0000, 0x3000, SECTION_MEMORY),
                (0x80_3000, 0x1000, SECTION_SECRETS),
                (0x80_4000, 0x1000, SECTION_CPUID),
                (0x80_5000, 0x1000, SECTION_KERNEL_HASHES),
                (0x80_6000, 0x2000, SECTION_MEMORY),
            ],
            Some(0x80_5f00 - 0x100),
            0x0080_b004,
        ),
    )
    .unwrap();
    let line = "console=ttyS0 root=/dev/vda confboot.cluster=x";
    for (firmware, initrd, append, vcpus, vcpu_type) in [
        (&crafted, Some(initrd.as_path()), line, 1, "EPYC-Milan"),
        (&crafted, None, "", 2, "EPYC-Rome-v3"),
        (&synthetic, Some(initrd.as_path()), line, 3, "EPYC-Turin"),
    ] {
        let oracle = Oracle {
            firmware,
            boot: Some((&kernel, initrd, append)),
            vcpus,
            vcpu_type,
            guest_features: 0x1,
        };
        assert_eq!(
            oracle.predicted(),
            oracle.digest(),
            "{} {vcpus} × {vcpu_type}",
            firmware.display()
        );
    }
    // The table moves the digest: another command line is another launch.
    let a = Oracle {
        firmware: &crafted,
        boot: Some((&kernel, None, "a")),
        vcpus: 1,
        vcpu_type: "EPYC",
        guest_features: 1,
    };
    let b = Oracle {
        boot: Some((&kernel, None, "b")),
        ..a
    };
    assert_ne!(a.predicted(), b.predicted());
}

#[test]
fn a_firmware_that_cannot_take_a_measured_direct_boot_is_refused() {
    let debian = SnpFirmware::parse(std::fs::read(DEBIAN_OVMF).unwrap()).unwrap();
    assert!(!debian.has_kernel_hashes());
    let launch = SnpLaunch {
        firmware: &debian,
        hashes: Some(KernelHashes::of(b"k", None, "")),
        vcpus: 1,
        vcpu_signature: VcpuType::EpycMilan.signature(),
        guest_features: 1,
    };
    assert_eq!(
        launch.launch_digest().unwrap_err(),
        SnpMeasureError::NoKernelHashesSection
    );
    // The 4 MiB build has no SEV metadata at all.
    assert_eq!(
        SnpFirmware::parse(std::fs::read("/usr/share/OVMF/OVMF_CODE_4M.fd").unwrap()).unwrap_err(),
        SnpMeasureError::NoMetadata
    );
    // A table outside its page, a section of unknown type, a secrets
    // section of two pages: each refused by name.
    let outside = ovmf::synthetic(
        3,
        &[(0x80_0000, 0x1000, SECTION_KERNEL_HASHES)],
        Some(0x80_1000),
        0x0080_b004,
    );
    let fw = SnpFirmware::parse(outside).unwrap();
    let launch = SnpLaunch {
        firmware: &fw,
        ..launch
    };
    assert_eq!(
        launch.launch_digest().unwrap_err(),
        SnpMeasureError::HashesTableOutside(0x80_1000)
    );
    let unknown = ovmf::synthetic(3, &[(0x80_0000, 0x1000, 7)], None, 0x0080_b004);
    assert_eq!(
        SnpFirmware::parse(unknown).unwrap_err(),
        SnpMeasureError::UnknownSection(7)
    );
    let two = ovmf::synthetic(
        3,
        &[(0x80_0000, 0x2000, SECTION_SECRETS)],
        None,
        0x0080_b004,
    );
    assert!(matches!(
        SnpFirmware::parse(two).unwrap_err(),
        SnpMeasureError::Metadata(_)
    ));
    // No vCPU, too many.
    for vcpus in [0, 513] {
        let launch = SnpLaunch {
            vcpus,
            hashes: None,
            ..launch
        };
        assert_eq!(
            launch.launch_digest().unwrap_err(),
            SnpMeasureError::Vcpus(vcpus)
        );
    }
}
