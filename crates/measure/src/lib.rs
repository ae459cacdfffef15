//! Predicts what a QEMU direct-kernel boot under OVMF measures into the
//! vTPM, from the kernel, the initrd and the command line alone: no boot.
//!
//! The events, in the order OVMF and the Linux EFI stub log them (checked
//! against real boots by `tests/tests/boot.rs`):
//!
//! | PCR | event | digest |
//! |---|---|---|
//! | 4 | `EV_EFI_BOOT_SERVICES_APPLICATION` | Authenticode SHA-256 of the kernel file with the setup header QEMU patches in (loader type, heap, command-line pointer, the initrd's address and size: so PCR 4 depends on the initrd's size and the VM's memory) |
//! | 4 | `EV_EFI_ACTION` | SHA-256 of "Calling EFI Application from Boot Option" |
//! | 3, 4, 5, 6 | `EV_SEPARATOR` | SHA-256 of four zero bytes |
//! | 9 | `EV_EVENT_TAG` (the stub's load options) | SHA-256 of the command line, with ` initrd=initrd` when there is an initrd, in UTF-16LE with its NUL |
//! | 9 | `EV_EVENT_TAG` (the stub's initrd) | SHA-256 of the initrd file |
//! | 5 | `EV_EFI_ACTION` ×2 | "Exit Boot Services Invocation", "Exit Boot Services Returned with Success" |
//!
//! PCRs 0, 1, 2 and 7 measure the firmware itself, its configuration and
//! variables: they depend on the OVMF build and its variable store, not on
//! the image, and are not predicted.
//!
//! ```
//! use confboot_measure::{DirectBoot, InitrdDigest, MeasureError};
//! let boot = DirectBoot {
//!     kernel: b"not a kernel",
//!     initrd: Some(InitrdDigest::of(b"an initrd")),
//!     cmdline: "console=ttyS0",
//!     memory_mib: 1024,
//! };
//! assert!(matches!(boot.predict(), Err(MeasureError::NotBzImage(_))));
//! ```

pub mod authenticode;
pub mod snp;

use std::io::Read;

use authenticode::{PeError, authenticode_sha256};
use confboot_attest::MeasurementPolicy;
use confboot_tpm::CLUSTER_ID_PCR;
use confboot_tpm::event_log::{EventList, EventSummary};

/// The memory QEMU gives a VM when none is named (`-m`), in MiB; also what
/// the test VMs use.
pub const DEFAULT_MEMORY_MIB: u64 = 1024;
/// Largest kernel read (a bzImage is 5–15 MiB).
pub const MAX_KERNEL_LEN: u64 = 128 << 20;

/// What QEMU's pc and q35 machines reserve for ACPI tables at the top of
/// low memory (`acpi_data_size`, 0x20000 + 0x8000): the initrd goes below.
const QEMU_ACPI_DATA_SIZE: u64 = 0x28000;
/// Where QEMU puts the real-mode setup and the command line of a
/// protocol ≥ 2.02 kernel.
const QEMU_REAL_ADDR: u32 = 0x10000;
const QEMU_CMDLINE_ADDR: u32 = 0x20000;
/// q35 keeps RAM below 4 GiB under this; above it, low memory is 2 GiB.
const Q35_MAX_LOWMEM: u64 = 0xb000_0000;
const Q35_LOWMEM_ABOVE_MAX: u64 = 0x8000_0000;

/// The EV_EFI_ACTION strings OVMF logs.
const CALLING_EFI_APPLICATION: &str = "Calling EFI Application from Boot Option";
const EXIT_BOOT_SERVICES: [&str; 2] = [
    "Exit Boot Services Invocation",
    "Exit Boot Services Returned with Success",
];

/// PCRs a predicted policy enforces: the kernel (4), the command line and
/// initrd (9), and 15 (all-zero until the node is bootstrapped).
pub const PREDICTED_ENFORCED: [u32; 3] = [4, 9, CLUSTER_ID_PCR];
/// PCRs predicted but only warned on: separators and exit-boot-services
/// actions, which a firmware of another build may log differently.
pub const PREDICTED_WARN_ONLY: [u32; 3] = [3, 5, 6];

/// The size and SHA-256 of an initrd (read once, streaming).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitrdDigest {
    /// Its length in bytes.
    pub size: u64,
    /// Its SHA-256.
    pub sha256: [u8; 32],
}

impl InitrdDigest {
    /// The digest of bytes in memory.
    pub fn of(bytes: &[u8]) -> InitrdDigest {
        InitrdDigest {
            size: bytes.len() as u64,
            sha256: sha256(bytes),
        }
    }

    /// The digest of a file, read in blocks.
    pub fn read(mut file: impl Read) -> std::io::Result<InitrdDigest> {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        let mut buf = vec![0u8; 1 << 16];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            ctx.update(&buf[..n]);
            size += n as u64;
        }
        Ok(InitrdDigest {
            size,
            sha256: ctx.finish().as_ref().try_into().expect("32 bytes"),
        })
    }
}

/// A QEMU direct-kernel boot (`-kernel`, `-initrd`, `-append`, `-m`) of a
/// q35 machine under OVMF.
#[derive(Clone, Debug)]
pub struct DirectBoot<'a> {
    /// The kernel file (a bzImage with an EFI stub).
    pub kernel: &'a [u8],
    /// The initrd, if any.
    pub initrd: Option<InitrdDigest>,
    /// The whole `-append` string.
    pub cmdline: &'a str,
    /// The VM's memory (`-m`), in MiB.
    pub memory_mib: u64,
}

/// Why a boot cannot be predicted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeasureError {
    /// The kernel is not a bzImage QEMU loads the way predicted here.
    #[error("the kernel is not a bzImage: {0}")]
    NotBzImage(&'static str),
    /// The kernel's EFI stub image is not a valid PE image.
    #[error("the kernel's EFI image: {0}")]
    Kernel(PeError),
    /// The command line cannot be given to this kernel as predicted.
    #[error("the command line: {0}")]
    Cmdline(String),
    /// The initrd does not fit below the VM's low memory.
    #[error("an initrd of {size} bytes does not fit below {limit:#x} (give the VM more memory)")]
    InitrdTooLarge {
        /// Its size.
        size: u64,
        /// Where it would have to end.
        limit: u64,
    },
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn event(pcr: u32, event_type: &str, sha256: [u8; 32], description: &str) -> EventSummary {
    EventSummary {
        pcr,
        event_type: event_type.to_string(),
        sha256,
        description: description.to_string(),
    }
}

impl DirectBoot<'_> {
    /// The kernel file as OVMF receives it from QEMU: the setup header
    /// patched as QEMU's x86 Linux loader patches it for a protocol ≥ 2.02
    /// kernel loaded high.
    pub fn kernel_as_loaded(&self) -> Result<Vec<u8>, MeasureError> {
        let k = self.kernel;
        if k.len() < 0x250 {
            return Err(MeasureError::NotBzImage("shorter than a setup header"));
        }
        if &k[0x202..0x206] != b"HdrS" {
            return Err(MeasureError::NotBzImage("no HdrS setup header"));
        }
        let protocol = u16_at(k, 0x206);
        if protocol < 0x20c || k[0x211] & 0x01 == 0 {
            return Err(MeasureError::NotBzImage(
                "boot protocol below 2.12 or not loaded high (predictions cover modern kernels only)",
            ));
        }
        let cmdline_max = u32_at(k, 0x238) as usize;
        let options = self.cmdline;
        if !options.is_ascii() || options.bytes().any(|b| b.is_ascii_control()) {
            return Err(MeasureError::Cmdline(
                "only printable ASCII is predicted".into(),
            ));
        }
        if options.len() > cmdline_max {
            return Err(MeasureError::Cmdline(format!(
                "{} bytes, the kernel takes at most {cmdline_max}",
                options.len()
            )));
        }
        if options.split(' ').any(|w| w.starts_with("vga=")) {
            return Err(MeasureError::Cmdline(
                "vga= makes QEMU patch the video mode, which is not predicted".into(),
            ));
        }
        let mut out = k.to_vec();
        out[0x210] = 0xb0; // type_of_loader: QEMU
        out[0x211] |= 0x80; // loadflags: CAN_USE_HEAP
        let heap_end = QEMU_CMDLINE_ADDR - QEMU_REAL_ADDR - 0x200;
        out[0x224..0x226].copy_from_slice(&(heap_end as u16).to_le_bytes());
        out[0x228..0x22c].copy_from_slice(&QEMU_CMDLINE_ADDR.to_le_bytes());
        if let Some(initrd) = self.initrd {
            let mut initrd_max = u64::from(u32_at(k, 0x22c));
            const XLF_CAN_BE_LOADED_ABOVE_4G: u16 = 1 << 1;
            if u16_at(k, 0x236) & XLF_CAN_BE_LOADED_ABOVE_4G != 0 {
                initrd_max = u64::from(u32::MAX);
            }
            let memory = self.memory_mib.saturating_mul(1 << 20);
            let below_4g = if memory >= Q35_MAX_LOWMEM {
                Q35_LOWMEM_ABOVE_MAX
            } else {
                memory
            };
            let top = below_4g.saturating_sub(QEMU_ACPI_DATA_SIZE);
            if initrd_max >= top {
                initrd_max = top.saturating_sub(1);
            }
            if initrd.size > initrd_max || initrd.size > u64::from(u32::MAX) {
                return Err(MeasureError::InitrdTooLarge {
                    size: initrd.size,
                    limit: initrd_max,
                });
            }
            let addr = (initrd_max - initrd.size) & !0xfff;
            out[0x218..0x21c].copy_from_slice(&(addr as u32).to_le_bytes());
            out[0x21c..0x220].copy_from_slice(&(initrd.size as u32).to_le_bytes());
        }
        Ok(out)
    }

    /// The load options the EFI stub measures: the command line (and
    /// ` initrd=initrd`, which OVMF appends when there is an initrd) in
    /// UTF-16LE with a terminating NUL.
    pub fn load_options(&self) -> Vec<u8> {
        let suffix = if self.initrd.is_some() {
            " initrd=initrd"
        } else {
            ""
        };
        format!("{}{suffix}\0", self.cmdline)
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect()
    }

    /// The predicted event log (the extending events, in log order).
    pub fn predict(&self) -> Result<EventList, MeasureError> {
        let kernel =
            authenticode_sha256(&self.kernel_as_loaded()?).map_err(MeasureError::Kernel)?;
        let separator = sha256(&[0; 4]);
        let mut events = vec![
            event(
                4,
                "EV_EFI_BOOT_SERVICES_APPLICATION",
                kernel,
                "the kernel (Authenticode, setup header as QEMU loads it)",
            ),
            event(
                4,
                "EV_EFI_ACTION",
                sha256(CALLING_EFI_APPLICATION.as_bytes()),
                CALLING_EFI_APPLICATION,
            ),
        ];
        for pcr in 3..=6 {
            events.push(event(pcr, "EV_SEPARATOR", separator, "separator"));
        }
        events.push(event(
            9,
            "EV_EVENT_TAG",
            sha256(&self.load_options()),
            "LOADED_IMAGE::LoadOptions",
        ));
        if let Some(initrd) = self.initrd {
            events.push(event(9, "EV_EVENT_TAG", initrd.sha256, "Linux initrd"));
        }
        for action in EXIT_BOOT_SERVICES {
            events.push(event(5, "EV_EFI_ACTION", sha256(action.as_bytes()), action));
        }
        Ok(EventList { events })
    }
}

/// The measurement policy of a predicted log: [`PREDICTED_ENFORCED`]
/// enforced (PCR 15 all-zero), [`PREDICTED_WARN_ONLY`] warned on.
pub fn predicted_policy(events: &EventList) -> MeasurementPolicy {
    let replayed = events.replay();
    let mut policy = MeasurementPolicy::default();
    for pcr in PREDICTED_ENFORCED {
        let value = replayed.get(&pcr).copied().unwrap_or([0; 32]);
        policy.set(pcr, value.to_vec(), false);
    }
    for pcr in PREDICTED_WARN_ONLY {
        if let Some(value) = replayed.get(&pcr) {
            policy.set(pcr, value.to_vec(), true);
        }
    }
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bzImage-shaped kernel around the PE of the Authenticode tests.
    fn kernel() -> Vec<u8> {
        let mut k = authenticode::tests::tiny_pe(&[0; 0x100], b"");
        k[0x202..0x206].copy_from_slice(b"HdrS");
        k[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
        k[0x211] = 0x01;
        k[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        k[0x236..0x238].copy_from_slice(&0x7fu16.to_le_bytes());
        k[0x238..0x23c].copy_from_slice(&2048u32.to_le_bytes());
        k
    }

    fn boot<'a>(k: &'a [u8], cmdline: &'a str, initrd: &[u8]) -> DirectBoot<'a> {
        DirectBoot {
            kernel: k,
            initrd: Some(InitrdDigest::of(initrd)),
            cmdline,
            memory_mib: DEFAULT_MEMORY_MIB,
        }
    }

    #[test]
    fn qemu_patches_loader_heap_cmdline_and_initrd_into_the_header() {
        let k = kernel();
        let loaded = boot(&k, "quiet", &[7; 0x1800]).kernel_as_loaded().unwrap();
        assert_eq!(loaded[0x210], 0xb0);
        assert_eq!(loaded[0x211], 0x81);
        assert_eq!(u16_at(&loaded, 0x224), 0xfe00);
        assert_eq!(u32_at(&loaded, 0x228), 0x20000);
        // 1 GiB, minus the ACPI data, minus one, minus the size, 4 KiB down.
        let top = (1u64 << 30) - 0x28000 - 1;
        assert_eq!(u64::from(u32_at(&loaded, 0x218)), (top - 0x1800) & !0xfff);
        assert_eq!(u32_at(&loaded, 0x21c), 0x1800);
        let differing: Vec<usize> = (0..k.len()).filter(|&i| k[i] != loaded[i]).collect();
        assert!(
            differing.iter().all(|&i| (0x210..0x22c).contains(&i)),
            "{differing:x?}"
        );
    }

    #[test]
    fn the_prediction_follows_each_input() {
        let k = kernel();
        let base = boot(&k, "console=ttyS0", b"initrd").predict().unwrap();
        assert_eq!(
            base,
            boot(&k, "console=ttyS0", b"initrd").predict().unwrap()
        );
        assert_eq!(
            base.to_json(),
            boot(&k, "console=ttyS0", b"initrd")
                .predict()
                .unwrap()
                .to_json()
        );
        let replay = base.replay();
        let other_cmdline = boot(&k, "console=ttyS1", b"initrd")
            .predict()
            .unwrap()
            .replay();
        assert_eq!(other_cmdline[&4], replay[&4]);
        assert_ne!(other_cmdline[&9], replay[&9]);
        let other_initrd = boot(&k, "console=ttyS0", b"INITRD")
            .predict()
            .unwrap()
            .replay();
        assert_eq!(other_initrd[&4], replay[&4], "same size, same header");
        assert_ne!(other_initrd[&9], replay[&9]);
        let longer_initrd = boot(&k, "console=ttyS0", &[0; 0x2000])
            .predict()
            .unwrap()
            .replay();
        assert_ne!(longer_initrd[&4], replay[&4], "the size is in the header");
        let mut other_kernel = k.clone();
        other_kernel[0x300] ^= 1;
        let other_kernel = boot(&other_kernel, "console=ttyS0", b"initrd")
            .predict()
            .unwrap()
            .replay();
        assert_ne!(other_kernel[&4], replay[&4]);
        assert_eq!(other_kernel[&9], replay[&9]);
        // The load options as OVMF builds them.
        let expected: Vec<u8> = "console=ttyS0 initrd=initrd\0"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        assert_eq!(boot(&k, "console=ttyS0", b"x").load_options(), expected);
        let policy = predicted_policy(&base);
        assert!(!policy.entries()[&4].warn_only && !policy.entries()[&9].warn_only);
        assert_eq!(policy.entries()[&15].value, vec![0; 32]);
        assert!(policy.entries()[&5].warn_only);
    }

    #[test]
    fn inputs_that_are_not_predicted_are_refused() {
        let k = kernel();
        assert!(matches!(
            boot(&k[..0x100], "x", b"i").predict(),
            Err(MeasureError::NotBzImage(_))
        ));
        let mut old = k.clone();
        old[0x206..0x208].copy_from_slice(&0x201u16.to_le_bytes());
        assert!(matches!(
            boot(&old, "x", b"i").predict(),
            Err(MeasureError::NotBzImage(_))
        ));
        for bad in ["vga=791 quiet", "tab\there", "ünïcode"] {
            assert!(
                matches!(boot(&k, bad, b"i").predict(), Err(MeasureError::Cmdline(_))),
                "{bad}"
            );
        }
        let long = "x".repeat(2049);
        assert!(matches!(
            boot(&k, &long, b"i").predict(),
            Err(MeasureError::Cmdline(_))
        ));
        let mut small = boot(&k, "x", b"i");
        small.memory_mib = 0;
        assert!(matches!(
            small.predict(),
            Err(MeasureError::InitrdTooLarge { .. })
        ));
        let mut not_pe = k.clone();
        not_pe[0x80] = b'X';
        assert!(matches!(
            boot(&not_pe, "x", b"i").predict(),
            Err(MeasureError::Kernel(PeError::NotPe))
        ));
    }
}
