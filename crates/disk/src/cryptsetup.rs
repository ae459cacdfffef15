//! The real state-disk backend: the `cryptsetup` program.
//!
//! Commands run (the key always on stdin via `--key-file -`, never in argv):
//! - `cryptsetup isLuks DEVICE`, `cryptsetup luksUUID DEVICE`
//! - `cryptsetup luksFormat --type luks2 --uuid U --batch-mode FORMAT_ARGS --pbkdf ... --key-file - DEVICE`
//!   ([`FORMAT_ARGS`]: every layout parameter the native writer uses, explicit);
//! - [`OpenMode::Map`]: `cryptsetup open --type luks2 --key-slot 0 --disable-external-tokens --key-file - DEVICE NAME`,
//!   giving `/dev/mapper/NAME`;
//! - [`OpenMode::HeaderOnly`]: the same with `--test-passphrase` and no NAME.
//!
//! Before either `open` the backend reads the header itself and refuses it
//! unless it is exactly the one it writes ([`CryptsetupBackend::expected`],
//! [`crate::luks2::expected`]): cryptsetup would map whatever cipher, sector
//! size and offset the header names and run whatever KDF costs it asks for.
//! cryptsetup reads the header again when it opens, and for a LUKS2 open it
//! takes no `--cipher`, `--key-size` or `--sector-size` (those are for plain
//! mode), so a host that serves the check one header and cryptsetup another
//! could make cryptsetup map its cipher, sector size or offset. So after
//! [`OpenMode::Map`] the backend reads the live mapping's table from the
//! kernel ([`crate::dm::DeviceMapper::table`]) and compares it with the
//! mapping it expects ([`crate::dm::crypt::check_live_table`]: the node's
//! cipher, key length, IV offset, device, offset, length and sector size,
//! no other option); anything else is removed at once and refused
//! ([`DiskError::MappingRefused`]). The native backend
//! ([`crate::luks2::Luks2Backend`], the one production images carry) has
//! no such gap: it maps from the header it checked.
//! - the measurement salt: `cryptsetup luksDump --dump-json-metadata DEVICE`
//!   to find it, `cryptsetup token import [--token-id N --token-replace]
//!   --json-file - DEVICE` to keep it, as a LUKS2 token of type
//!   [`SALT_TOKEN_TYPE`] bound to no key slot: `{"type": ..., "keyslots": [],
//!   "salt": HEX}`; likewise the record that the state file system was made
//!   ([`FILESYSTEM_TOKEN_TYPE`], `"fs": "ext4"`) and of a completed first
//!   boot ([`BOOTSTRAPPED_TOKEN_TYPE`], `"complete": true`).
//!
//! cryptsetup runs with `LC_ALL=C` so its messages are stable, on the
//! project's process runner (time-bounded, stoppable, output bounded).
//!
//! The header metadata ([`HeaderMetadata`]) is read as a JSON value, not with a
//! serde derive: it is cryptsetup's, with members this crate does not read,
//! which a derive would either refuse (unknown members denied) or skip unread;
//! the LUKS2 metadata is kept as a value (see `luks2::metadata`).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{DiskBackend, DiskError, DiskState, MetadataFault};
use crate::dm::crypt::{CryptLayout, check_live_table};
use crate::dm::wire::TableTarget;
use crate::dm::{DeviceMapper, DmError};
use crate::luks2::backend::{DATA_CIPHER, to_disk_error};
use crate::luks2::format::{DATA_OFFSET, VOLUME_KEY_LEN};
use crate::luks2::{ExpectedHeader, ExpectedKdf, FormatOptions, KdfChoice, Luks2};
use confboot_kms::{SecretBytes, is_uuid};
use confboot_sys::process::{CommandRunner, ProcessRunner, Stream};
use confboot_util::IoFailure;
use confboot_util::stop::Stop;

/// How much of the disk's start must be zero for it to count as blank: the
/// LUKS2 default header area (both binary headers, JSON and key slots), which
/// also covers the signatures of common file systems and partition tables.
pub const BLANK_PROBE_HEAD: u64 = 16 << 20;
/// How much of the disk's end must be zero (a backup GPT lives there).
pub const BLANK_PROBE_TAIL: u64 = 1 << 20;
/// How much of cryptsetup's stderr is kept in errors.
const STDERR_TAIL: usize = 1024;
/// The LUKS2 token type that keeps the measurement salt.
pub const SALT_TOKEN_TYPE: &str = "confboot-measurement-salt";
/// The LUKS2 token type that records the file system made on the disk.
pub const FILESYSTEM_TOKEN_TYPE: &str = "confboot-state-fs";
/// The LUKS2 token type that records a completed first boot.
pub const BOOTSTRAPPED_TOKEN_TYPE: &str = "confboot-bootstrapped";
/// How long one cryptsetup command may run (`luksFormat` with an
/// Argon2id benchmark takes seconds; a command waiting for something that
/// never comes is killed).
pub const CRYPTSETUP_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The most of each output stream of cryptsetup that is kept.
const MAX_OUTPUT: usize = MAX_METADATA + 64 * 1024;
/// The most header metadata read (LUKS2's JSON area is at most 4 MiB; a
/// header of one key slot and a few tokens is a few KiB).
const MAX_METADATA: usize = 4 << 20;

/// What `luksFormat` is given besides the UUID and the key-slot hashing:
/// the native writer's layout ([`crate::luks2::format`]), every value
/// explicit so that neither cryptsetup's compiled-in defaults nor the
/// device (cryptsetup picks 512-byte sectors on a device that reports
/// 512-byte physical sectors) choose them: `aes-xts-plain64` with a
/// 512-bit key, 4 KiB sectors, SHA-256, 16 KiB headers, the key-slot
/// region up to the data at 16 MiB.
pub const FORMAT_ARGS: [&str; 14] = [
    "--cipher",
    "aes-xts-plain64",
    "--key-size",
    "512",
    "--sector-size",
    "4096",
    "--hash",
    "sha256",
    "--luks2-metadata-size",
    "16384",
    "--luks2-keyslots-size",
    "16744448",
    "--offset",
    "32768",
];
/// How `cryptsetup open` starts: LUKS2 only, key slot 0 only (the one the
/// node writes), no token plugins.
pub const OPEN_ARGS: [&str; 6] = [
    "open",
    "--type",
    "luks2",
    "--key-slot",
    "0",
    "--disable-external-tokens",
];

/// The key-slot password hashing for new headers: always costs the node
/// chose (its measured command line), never cryptsetup's benchmark, whose
/// choice the node could not tell from a host's edit when it opens the
/// disk again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pbkdf {
    /// PBKDF2 with a fixed iteration count (cryptsetup's minimum is 1000).
    Pbkdf2 {
        /// Iterations.
        iterations: u32,
    },
    /// Argon2id with fixed costs.
    Argon2id {
        /// Iterations (time cost).
        iterations: u32,
        /// Memory cost in KiB.
        memory_kib: u32,
        /// Threads.
        parallel: u32,
    },
}

impl Default for Pbkdf {
    /// PBKDF2 with 1000 iterations. Key stretching protects low-entropy
    /// passphrases; state-disk keys are 32 random bytes (HKDF output), so a
    /// costly PBKDF adds nothing but boot time (argon2 takes seconds under
    /// software emulation, PBKDF2 well under one).
    fn default() -> Self {
        Pbkdf::Pbkdf2 { iterations: 1000 }
    }
}

/// Why a `--state-disk-pbkdf` value is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0}: want pbkdf2:ITERATIONS (1000 to 10000000), \
     or argon2id:PASSES:MEMORY_KIB:THREADS (1 to 32, 8 to 1048576, 1 to 16)"
)]
pub struct PbkdfSpecError(String);

impl std::str::FromStr for Pbkdf {
    type Err = PbkdfSpecError;

    /// `pbkdf2:ITERATIONS` or `argon2id:PASSES:MEMORY_KIB:THREADS`, each
    /// cost within what this node's own LUKS2
    /// reader accepts when it opens the disk again
    /// ([`crate::luks2::KdfLimits`]): a node never writes a header it
    /// would refuse.
    fn from_str(spec: &str) -> Result<Pbkdf, PbkdfSpecError> {
        let bad = || PbkdfSpecError(spec.chars().take(64).collect());
        let limits = crate::luks2::KdfLimits::default();
        let number = |text: &str, range: std::ops::RangeInclusive<u32>| {
            text.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| text.parse::<u32>().ok())
                .flatten()
                .filter(|n| range.contains(n))
                .ok_or_else(bad)
        };
        let parts: Vec<&str> = spec.split(':').collect();
        match parts.as_slice() {
            ["pbkdf2", iterations] => Ok(Pbkdf::Pbkdf2 {
                iterations: number(iterations, 1000..=limits.pbkdf2_iterations)?,
            }),
            ["argon2id", passes, memory, threads] => Ok(Pbkdf::Argon2id {
                iterations: number(passes, 1..=limits.argon2_time)?,
                memory_kib: number(memory, 8..=limits.argon2_memory_kib)?,
                parallel: number(threads, 1..=limits.argon2_cpus)?,
            }),
            _ => Err(bad()),
        }
    }
}

impl Pbkdf {
    /// The same choice for the native LUKS2 writer.
    pub fn kdf_choice(&self) -> crate::luks2::KdfChoice {
        use crate::luks2::KdfChoice;
        match *self {
            Pbkdf::Pbkdf2 { iterations } => KdfChoice::Pbkdf2 { iterations },
            Pbkdf::Argon2id {
                iterations,
                memory_kib,
                parallel,
            } => KdfChoice::Argon2id {
                time: iterations,
                memory_kib,
                cpus: parallel,
            },
        }
    }

    fn args(&self) -> Vec<String> {
        match *self {
            Pbkdf::Pbkdf2 { iterations } => vec![
                "--pbkdf".into(),
                "pbkdf2".into(),
                "--pbkdf-force-iterations".into(),
                iterations.to_string(),
            ],
            Pbkdf::Argon2id {
                iterations,
                memory_kib,
                parallel,
            } => vec![
                "--pbkdf".into(),
                "argon2id".into(),
                "--pbkdf-force-iterations".into(),
                iterations.to_string(),
                "--pbkdf-memory".into(),
                memory_kib.to_string(),
                "--pbkdf-parallel".into(),
                parallel.to_string(),
            ],
        }
    }
}

/// What [`DiskBackend::open`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Maps the decrypted device at `/dev/mapper/NAME` (needs device-mapper:
    /// nodes, QEMU guests).
    Map,
    /// The build-machine mode: checks that the key opens a key slot
    /// (`--test-passphrase`) and maps nothing. It exercises the same decisions
    /// on real LUKS2 headers (blank or LUKS, format or open, wrong key, UUIDs)
    /// but proves nothing about dm-crypt itself; real mapping is proven in the
    /// QEMU boot tests.
    HeaderOnly,
}

/// The `cryptsetup` backend for one device.
#[derive(Clone, Debug)]
pub struct CryptsetupBackend {
    /// The block device (or, in [`OpenMode::HeaderOnly`], an image file).
    pub device: PathBuf,
    /// The device-mapper name ([`OpenMode::Map`]): letters, digits, `_`, `-`, `.`.
    pub mapper_name: String,
    /// Key-slot hashing for new headers.
    pub pbkdf: Pbkdf,
    /// The cryptsetup program: a bare name is looked up in `PATH`.
    pub program: PathBuf,
    /// Map the device, or only check keys.
    pub mode: OpenMode,
    /// Runs cryptsetup (a [`CRYPTSETUP_TIMEOUT`] limit; its stop signal
    /// kills a running cryptsetup).
    pub runner: ProcessRunner,
    /// Where the mapping cryptsetup made is read back from.
    pub mapping_source: MappingSource,
    opened: bool,
}

/// Where [`OpenMode::Map`] reads the mapping cryptsetup made, to check it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingSource {
    /// The kernel: the device's number and size from the block device,
    /// the live table through device-mapper.
    Kernel,
    /// Given, for a cryptsetup stand-in that maps nothing (build
    /// machines have no device-mapper): what the kernel would report. The
    /// same check runs on it.
    Given {
        /// The backing device's number (`dev_t`) and size in bytes.
        block: (u64, u64),
        /// The live table.
        targets: Vec<TableTarget>,
    },
}

impl CryptsetupBackend {
    /// A backend mapping `device` as `/dev/mapper/<mapper_name>`, with
    /// `cryptsetup` from `PATH` and the default [`Pbkdf`].
    pub fn new(device: impl Into<PathBuf>, mapper_name: impl Into<String>) -> Self {
        CryptsetupBackend {
            device: device.into(),
            mapper_name: mapper_name.into(),
            pbkdf: Pbkdf::default(),
            program: PathBuf::from("cryptsetup"),
            mode: OpenMode::Map,
            runner: ProcessRunner::new(Some(CRYPTSETUP_TIMEOUT), Stop::new()),
            mapping_source: MappingSource::Kernel,
            opened: false,
        }
    }

    /// The build-machine backend ([`OpenMode::HeaderOnly`]) on a device or image file.
    pub fn header_only(device: impl Into<PathBuf>) -> Self {
        CryptsetupBackend {
            mode: OpenMode::HeaderOnly,
            ..CryptsetupBackend::new(device, "")
        }
    }

    /// Uses `program` as cryptsetup (e.g. `/sbin/cryptsetup` in the initramfs).
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    /// Reads the mapping back from `source` (the kernel by default).
    pub fn with_mapping_source(mut self, source: MappingSource) -> Self {
        self.mapping_source = source;
        self
    }

    /// Uses `pbkdf` for new headers.
    pub fn with_pbkdf(mut self, pbkdf: Pbkdf) -> Self {
        self.pbkdf = pbkdf;
        self
    }

    /// Runs `cryptsetup open` in `mode`: maps the device, or only checks
    /// that `key` opens a key slot.
    fn open_in(&self, mode: OpenMode, key: &SecretBytes) -> Result<(), DiskError> {
        if key.expose().is_empty() {
            return Err(DiskError::KeyUnavailable("the key is empty".into()));
        }
        if mode == OpenMode::Map {
            self.check_mapper_name()?;
        }
        self.check_header()?;
        // The device's number and size, for the mapping's check, before
        // anything is mapped (a file would be mapped through a loop device).
        let block = match (mode, &self.mapping_source) {
            (OpenMode::HeaderOnly, _) => None,
            (OpenMode::Map, MappingSource::Kernel) => {
                Some(crate::luks2::backend::block_device(&self.device)?)
            }
            (OpenMode::Map, MappingSource::Given { block, .. }) => Some(*block),
        };
        let device = self.device.as_os_str();
        let mut args: Vec<&OsStr> = OPEN_ARGS.iter().map(OsStr::new).collect();
        match mode {
            OpenMode::Map => {
                args.extend([
                    OsStr::new("--key-file"),
                    OsStr::new("-"),
                    device,
                    OsStr::new(&self.mapper_name),
                ]);
            }
            OpenMode::HeaderOnly => args.extend([
                OsStr::new("--test-passphrase"),
                OsStr::new("--key-file"),
                OsStr::new("-"),
                device,
            ]),
        }
        let out = self.run("open", &args, Some(key))?;
        match out.status {
            Some(0) => match block {
                Some(block) => self.check_mapping(block),
                None => Ok(()),
            },
            // cryptsetup: 2 = "no permission (bad passphrase)".
            Some(2) => Err(DiskError::WrongKey),
            Some(1) if self.luks_uuid()?.is_none() => Err(DiskError::NotLuks),
            _ => Err(out.into_error("open")),
        }
    }

    /// The header this backend writes (cryptsetup given the native
    /// writer's parameters, [`FORMAT_ARGS`] and [`Pbkdf`]'s), the only one
    /// it opens. cryptsetup lowers Argon2's lanes to the CPUs online (and
    /// its memory to what the machine has), so Argon2 costs are pinned as
    /// upper bounds: the node's own.
    pub fn expected(&self) -> ExpectedHeader {
        let kdf = match self.pbkdf.kdf_choice() {
            kdf @ KdfChoice::Pbkdf2 { .. } => ExpectedKdf::Exactly(kdf),
            kdf => ExpectedKdf::AtMost(kdf),
        };
        ExpectedHeader {
            kdf,
            ..ExpectedHeader::written_with(&FormatOptions::default())
        }
    }

    /// Reads the header once (both copies, chosen as cryptsetup chooses,
    /// every field bounded: [`crate::luks2::header`]) and refuses it unless
    /// it is exactly the one this backend writes ([`Self::expected`]), by
    /// the first field that is not; before cryptsetup runs a key
    /// derivation or maps anything.
    fn check_header(&self) -> Result<(), DiskError> {
        let disk = Luks2::read(&self.device).map_err(to_disk_error)?;
        self.expected().check(disk.header()).map_err(to_disk_error)
    }

    /// The mapping this backend makes of the block device `(device,
    /// size)`: [`FORMAT_ARGS`]' layout over the rest of the device.
    fn expected_mapping(&self, (device, size): (u64, u64)) -> CryptLayout<'static> {
        CryptLayout {
            cipher: DATA_CIPHER,
            iv_offset: 0,
            device,
            offset: DATA_OFFSET,
            length: size.saturating_sub(DATA_OFFSET),
            sector_size: self.expected().sector_size,
        }
    }

    /// Reads the live table of the mapping cryptsetup just made and
    /// refuses it unless it is [`Self::expected_mapping`] with a
    /// [`VOLUME_KEY_LEN`]-byte key; a refused mapping, or one whose table
    /// cannot be read, is removed at once.
    fn check_mapping(&self, block: (u64, u64)) -> Result<(), DiskError> {
        let name = &self.mapper_name;
        let dm_error = |e: DmError| DiskError::DeviceMapper {
            action: format!("checking the mapping {name}"),
            message: e.to_string(),
        };
        let targets = match &self.mapping_source {
            MappingSource::Kernel => DeviceMapper::open_default().and_then(|dm| dm.table(name)),
            MappingSource::Given { targets, .. } => Ok(targets.clone()),
        };
        let layout = self.expected_mapping(block);
        let checked = targets.map_err(dm_error).and_then(|targets| {
            check_live_table(&targets, &layout, VOLUME_KEY_LEN).map_err(DiskError::MappingRefused)
        });
        if let Err(e) = &checked {
            log::error!("removing /dev/mapper/{name}: {e}");
            self.remove_mapping();
        }
        checked
    }

    /// Removes the mapping through device-mapper ([`MappingSource::Kernel`]),
    /// or, if that fails or the mapping was [`MappingSource::Given`], with
    /// `cryptsetup close`; a failure is logged (the caller refuses the
    /// mapping either way).
    fn remove_mapping(&self) {
        let name = &self.mapper_name;
        let by_dm = match self.mapping_source {
            MappingSource::Kernel => DeviceMapper::open_default().and_then(|dm| dm.remove(name)),
            MappingSource::Given { .. } => Err(DmError::MappingGiven),
        };
        let Err(dm_failed) = by_dm else {
            return;
        };
        let closed = self.run("close", &[OsStr::new("close"), OsStr::new(name)], None);
        match closed {
            Ok(out) if out.status == Some(0) => {}
            Ok(out) => log::error!("removing {name}: {dm_failed}; {}", out.into_error("close")),
            Err(e) => log::error!("removing {name}: {dm_failed}; {e}"),
        }
    }

    fn luks_uuid(&self) -> Result<Option<String>, DiskError> {
        let device = self.device.as_os_str();
        let out = self.run("isLuks", &[OsStr::new("isLuks"), device], None)?;
        match out.status {
            Some(0) => {}
            Some(1) => return Ok(None),
            _ => return Err(out.into_error("isLuks")),
        }
        let out = self.run("luksUUID", &[OsStr::new("luksUUID"), device], None)?;
        if out.status != Some(0) {
            return Err(out.into_error("luksUUID"));
        }
        parse_luks_uuid(&out.stdout).map(Some)
    }

    /// The header's metadata, as `luksDump --dump-json-metadata` prints it.
    fn metadata(&self) -> Result<HeaderMetadata, DiskError> {
        let args = [
            OsStr::new("luksDump"),
            OsStr::new("--dump-json-metadata"),
            self.device.as_os_str(),
        ];
        let out = self.run("luksDump", &args, None)?;
        if out.status != Some(0) {
            return Err(out.into_error("luksDump"));
        }
        HeaderMetadata::parse(&out.stdout)
    }

    /// Writes a token of `token_type`, bound to no key slot, with `fields`;
    /// it replaces the header's token of that type if there is one.
    fn put_token(
        &mut self,
        token_type: &str,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), DiskError> {
        let mut token = fields;
        token.insert("type".into(), token_type.into());
        token.insert("keyslots".into(), serde_json::json!([]));
        let json = serde_json::Value::Object(token).to_string();
        let existing = self
            .metadata()?
            .token(token_type)?
            .map(|(id, _)| id.to_string());
        let mut args: Vec<&OsStr> = vec![OsStr::new("token"), OsStr::new("import")];
        if let Some(id) = &existing {
            args.extend([
                OsStr::new("--token-id"),
                OsStr::new(id),
                OsStr::new("--token-replace"),
            ]);
        }
        args.extend([
            OsStr::new("--json-file"),
            OsStr::new("-"),
            self.device.as_os_str(),
        ]);
        // Not a secret: it travels on stdin because that is where
        // `--json-file -` reads.
        let out = self.run(
            "token import",
            &args,
            Some(&SecretBytes::new(json.into_bytes())),
        )?;
        if out.status != Some(0) {
            return Err(out.into_error("token import"));
        }
        Ok(())
    }

    fn check_mapper_name(&self) -> Result<(), DiskError> {
        let n = &self.mapper_name;
        let ok = !n.is_empty()
            && n.len() <= 127
            && n != "."
            && n != ".."
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if ok {
            Ok(())
        } else {
            Err(DiskError::Config(format!("bad mapper name {n:?}")))
        }
    }

    /// Runs cryptsetup with `args`, feeding `key` (if any) on stdin, on the
    /// project's [`ProcessRunner`]: bounded in time ([`CRYPTSETUP_TIMEOUT`])
    /// and in the output kept ([`MAX_OUTPUT`] per stream).
    fn run(
        &self,
        action: &str,
        args: &[&OsStr],
        key: Option<&SecretBytes>,
    ) -> Result<RunOutput, DiskError> {
        let args = args
            .iter()
            .map(|a| {
                a.to_str()
                    .map(str::to_string)
                    .ok_or_else(|| DiskError::Config(format!("{a:?} is not UTF-8")))
            })
            .collect::<Result<Vec<String>, DiskError>>()?;
        log::debug!("running {} {}", self.program.display(), args.join(" "));
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let out = self
            .runner
            .run(
                &self.program,
                &args,
                key.map(SecretBytes::expose),
                &mut |stream, line| {
                    let kept = match stream {
                        Stream::Stdout => &mut stdout,
                        Stream::Stderr => &mut stderr,
                    };
                    if kept.len() + line.len() < MAX_OUTPUT {
                        kept.extend_from_slice(line.as_bytes());
                        kept.push(b'\n');
                    }
                },
            )
            .map_err(|error| DiskError::Run {
                action: action.to_string(),
                error,
            })?;
        Ok(RunOutput {
            status: out.status,
            stdout,
            stderr: sanitize(&stderr, key),
        })
    }
}

struct RunOutput {
    status: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

impl RunOutput {
    fn into_error(self, action: &str) -> DiskError {
        match self.status {
            Some(5) => DiskError::Busy(self.stderr),
            status => DiskError::Cryptsetup {
                action: action.to_string(),
                status,
                stderr: self.stderr,
            },
        }
    }
}

/// The tail of a program's message, printable: control characters other than
/// newline and tab become `?`, and the key (should a buggy program echo it)
/// becomes `<redacted>`.
fn sanitize(raw: &[u8], key: Option<&SecretBytes>) -> String {
    let mut bytes = raw.to_vec();
    if let Some(key) = key.map(|k| k.expose()).filter(|k| !k.is_empty()) {
        while let Some(at) = bytes.windows(key.len()).position(|w| w == key) {
            bytes.splice(at..at + key.len(), b"<redacted>".iter().copied());
        }
    }
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    String::from_utf8_lossy(&bytes[start..])
        .trim()
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// Why a device without a LUKS header is not blank: the first non-zero
/// byte [`is_blank`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no LUKS header, and non-zero data at byte offset {offset}")]
pub struct NotBlank {
    /// The byte's offset on the device.
    pub offset: u64,
}

/// Whether the device reads as zeros in its first [`BLANK_PROBE_HEAD`] and
/// last [`BLANK_PROBE_TAIL`] bytes; if not, where it does not.
pub fn is_blank(device: &Path) -> Result<Result<(), NotBlank>, DiskError> {
    let io =
        |e: io::Error| DiskError::Io(IoFailure::new(format!("reading {}", device.display()), e));
    let mut file = File::open(device).map_err(io)?;
    let size = file.seek(SeekFrom::End(0)).map_err(io)?;
    let head = BLANK_PROBE_HEAD.min(size);
    let tail_start = size.saturating_sub(BLANK_PROBE_TAIL).max(head);
    for (start, end) in [(0, head), (tail_start, size)] {
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut chunk = vec![0u8; 1 << 20];
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(chunk.len());
            file.read_exact(&mut chunk[..want]).map_err(io)?;
            if let Some(i) = chunk[..want].iter().position(|&b| b != 0) {
                return Ok(Err(NotBlank {
                    offset: at + i as u64,
                }));
            }
            at += want as u64;
        }
    }
    Ok(Ok(()))
}

impl DiskBackend for CryptsetupBackend {
    fn inspect(&self) -> Result<DiskState, DiskError> {
        if let Some(uuid) = self.luks_uuid()? {
            return Ok(DiskState::Luks { uuid });
        }
        Ok(match is_blank(&self.device)? {
            Ok(()) => DiskState::Blank,
            Err(not_blank) => DiskState::Unrecognized {
                reason: not_blank.to_string(),
            },
        })
    }

    fn format(&mut self, uuid: &str, key: &SecretBytes) -> Result<(), DiskError> {
        if !is_uuid(uuid) {
            return Err(DiskError::BadUuid(format!("{uuid:?} is not a UUID")));
        }
        if key.expose().is_empty() {
            return Err(DiskError::KeyUnavailable("the key is empty".into()));
        }
        // luksFormat --batch-mode overwrites an existing header without a
        // question: this check is what keeps a LUKS disk from being wiped.
        if let Some(existing) = self.luks_uuid()? {
            return Err(DiskError::AlreadyFormatted { uuid: existing });
        }
        let mut args: Vec<OsString> = ["luksFormat", "--type", "luks2", "--uuid", uuid]
            .iter()
            .map(OsString::from)
            .collect();
        args.push("--batch-mode".into());
        args.extend(FORMAT_ARGS.iter().map(OsString::from));
        args.extend(self.pbkdf.args().into_iter().map(OsString::from));
        args.extend(["--key-file".into(), "-".into()]);
        args.push(self.device.clone().into_os_string());
        let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
        let out = self.run("luksFormat", &args, Some(key))?;
        if out.status != Some(0) {
            return Err(out.into_error("luksFormat"));
        }
        Ok(())
    }

    fn open(&mut self, key: &SecretBytes) -> Result<(), DiskError> {
        self.open_in(self.mode, key)?;
        self.opened = true;
        Ok(())
    }

    fn check_key(&self, key: &SecretBytes) -> Result<(), DiskError> {
        self.open_in(OpenMode::HeaderOnly, key)
    }

    fn describe(&self) -> String {
        match self.mode {
            OpenMode::Map => format!(
                "{} (as /dev/mapper/{})",
                self.device.display(),
                self.mapper_name
            ),
            OpenMode::HeaderOnly => format!("{} (header only)", self.device.display()),
        }
    }

    fn mapped_device(&self) -> Option<PathBuf> {
        (self.opened && self.mode == OpenMode::Map)
            .then(|| Path::new("/dev/mapper").join(&self.mapper_name))
    }

    fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError> {
        let mut fields = serde_json::Map::new();
        fields.insert("salt".into(), confboot_util::hex::encode(salt).into());
        self.put_token(SALT_TOKEN_TYPE, fields)
    }

    fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
        self.metadata()?.measurement_salt()
    }

    fn record_filesystem(&mut self, fs: &str) -> Result<(), DiskError> {
        let mut fields = serde_json::Map::new();
        fields.insert("fs".into(), fs.into());
        self.put_token(FILESYSTEM_TOKEN_TYPE, fields)
    }

    fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
        let mut fields = serde_json::Map::new();
        fields.insert("complete".into(), true.into());
        self.put_token(BOOTSTRAPPED_TOKEN_TYPE, fields)
    }

    fn bootstrapped(&self) -> Result<bool, DiskError> {
        self.metadata()?.bootstrapped()
    }

    fn filesystem(&self) -> Result<Option<String>, DiskError> {
        self.metadata()?.filesystem()
    }
}

/// The UUID `cryptsetup luksUUID` printed (the header's), lowercased; an
/// error if it is not a UUID. The header is the host's to write, so what
/// it says is checked, and quoted only sanitized.
pub fn parse_luks_uuid(stdout: &[u8]) -> Result<String, DiskError> {
    let uuid = String::from_utf8_lossy(stdout).trim().to_ascii_lowercase();
    if !is_uuid(&uuid) {
        return Err(DiskError::BadUuid(format!(
            "the LUKS header's UUID {:?} is not a UUID",
            sanitize(uuid.as_bytes(), None)
        )));
    }
    Ok(uuid)
}

/// A LUKS2 header's metadata (its JSON area, as `cryptsetup luksDump
/// --dump-json-metadata` prints it), as far as confboot reads it: the
/// tokens it keeps there ([`SALT_TOKEN_TYPE`], [`FILESYSTEM_TOKEN_TYPE`],
/// [`BOOTSTRAPPED_TOKEN_TYPE`]). The header is not authenticated and the
/// host can write anything there, so every field is checked before use.
#[derive(Clone, Debug)]
pub struct HeaderMetadata {
    json: serde_json::Value,
}

impl HeaderMetadata {
    /// Parses the metadata: JSON of at most 4 MiB (LUKS2's largest JSON area).
    pub fn parse(bytes: &[u8]) -> Result<HeaderMetadata, DiskError> {
        if bytes.len() > MAX_METADATA {
            return Err(DiskError::Metadata(MetadataFault::TooLarge(bytes.len())));
        }
        let json = serde_json::from_slice(bytes)
            .map_err(|e| DiskError::Metadata(MetadataFault::Json(e.to_string())))?;
        Ok(HeaderMetadata { json })
    }

    /// The id and content of the header's one token of `token_type`, if it
    /// has one (two of them are an error: which one is meant is unknown).
    pub fn token(&self, token_type: &str) -> Result<Option<(&str, &serde_json::Value)>, DiskError> {
        let Some(tokens) = self.json["tokens"].as_object() else {
            return Ok(None);
        };
        let mut found = tokens.iter().filter(|(_, t)| t["type"] == token_type);
        let Some((id, token)) = found.next() else {
            return Ok(None);
        };
        if found.next().is_some() {
            return Err(DiskError::Metadata(MetadataFault::DuplicateToken(
                token_type.to_string(),
            )));
        }
        Ok(Some((id.as_str(), token)))
    }

    /// The measurement salt its [`SALT_TOKEN_TYPE`] token keeps (hex), if
    /// it has that token. Its length is [`super::StateDisk`]'s to check.
    pub fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
        let Some((id, token)) = self.token(SALT_TOKEN_TYPE)? else {
            return Ok(None);
        };
        token["salt"]
            .as_str()
            .and_then(|h| confboot_util::hex::decode(h).ok())
            .map(Some)
            .ok_or_else(|| DiskError::Metadata(MetadataFault::SaltNotHex(id.to_string())))
    }

    /// The file system its [`FILESYSTEM_TOKEN_TYPE`] token records, if it
    /// has that token.
    pub fn filesystem(&self) -> Result<Option<String>, DiskError> {
        let Some((id, token)) = self.token(FILESYSTEM_TOKEN_TYPE)? else {
            return Ok(None);
        };
        token["fs"]
            .as_str()
            .map(|fs| Some(fs.to_string()))
            .ok_or_else(|| DiskError::Metadata(MetadataFault::NoFilesystem(id.to_string())))
    }

    /// Whether its [`BOOTSTRAPPED_TOKEN_TYPE`] token records a completed
    /// first boot (`"complete": true`).
    pub fn bootstrapped(&self) -> Result<bool, DiskError> {
        Ok(match self.token(BOOTSTRAPPED_TOKEN_TYPE)? {
            None => false,
            Some((_, token)) => token["complete"] == serde_json::Value::Bool(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admins_pbkdf_parses_within_what_the_node_opens_again() {
        use crate::luks2::KdfChoice;
        assert_eq!(
            "pbkdf2:1000".parse(),
            Ok(Pbkdf::Pbkdf2 { iterations: 1000 })
        );
        let argon: Pbkdf = "argon2id:4:65536:2".parse().unwrap();
        assert_eq!(
            argon.kdf_choice(),
            KdfChoice::Argon2id {
                time: 4,
                memory_kib: 65536,
                cpus: 2
            }
        );
        for bad in [
            "",
            // cryptsetup's own benchmark: the header would choose the costs.
            "cryptsetup-default",
            "pbkdf2",
            "pbkdf2:999",
            "pbkdf2:10000001",
            "pbkdf2:+1000",
            "pbkdf2:1000:1",
            "argon2id:4:65536",
            "argon2id:0:65536:2",
            "argon2id:4:4194304:2",
            "argon2id:4:65536:17",
            "argon2i:4:65536:2",
            "scrypt:1",
        ] {
            let e = bad.parse::<Pbkdf>().unwrap_err();
            assert!(
                e.to_string().contains("want pbkdf2:ITERATIONS"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn sanitize_bounds_redacts_and_replaces_controls() {
        let key = SecretBytes::new(b"s3cr3t".to_vec());
        assert_eq!(
            sanitize(b"bad s3cr3t here\x1b[31m\n", Some(&key)),
            "bad <redacted> here?[31m"
        );
        let long = vec![b'x'; 5000];
        assert_eq!(sanitize(&long, None).len(), STDERR_TAIL);
    }

    #[test]
    fn header_metadata_tokens_are_checked() {
        let meta = |tokens: &str| {
            HeaderMetadata::parse(
                format!(r#"{{"keyslots": {{}}, "tokens": {{{tokens}}}}}"#).as_bytes(),
            )
            .unwrap()
        };
        let salt = r#""0": {"type": "confboot-measurement-salt", "keyslots": [], "salt": "0a0b"}"#;
        let fs = r#""1": {"type": "confboot-state-fs", "keyslots": [], "fs": "ext4"}"#;
        let done = r#""2": {"type": "confboot-bootstrapped", "keyslots": [], "complete": true}"#;
        let m = meta(&format!("{salt}, {fs}, {done}"));
        assert_eq!(m.measurement_salt().unwrap(), Some(vec![0x0a, 0x0b]));
        assert_eq!(m.filesystem().unwrap().as_deref(), Some("ext4"));
        assert!(m.bootstrapped().unwrap());
        let empty = meta("");
        assert_eq!(empty.measurement_salt().unwrap(), None);
        assert_eq!(empty.filesystem().unwrap(), None);
        assert!(!empty.bootstrapped().unwrap());
        // Two tokens of a type, a salt that is not hex, no file system named.
        let twice = meta(&format!("{salt}, {}", salt.replace("\"0\"", "\"5\"")));
        assert!(
            matches!(twice.measurement_salt(), Err(DiskError::Metadata(MetadataFault::DuplicateToken(t))) if t == SALT_TOKEN_TYPE)
        );
        let not_hex = meta(r#""0": {"type": "confboot-measurement-salt", "salt": "zz"}"#);
        assert!(matches!(
            not_hex.measurement_salt(),
            Err(DiskError::Metadata(_))
        ));
        let unnamed = meta(r#""3": {"type": "confboot-state-fs", "fs": 4}"#);
        assert!(matches!(unnamed.filesystem(), Err(DiskError::Metadata(_))));
        assert!(matches!(
            HeaderMetadata::parse(b"{\"tokens\""),
            Err(DiskError::Metadata(_))
        ));
        assert!(matches!(
            HeaderMetadata::parse(&vec![b' '; MAX_METADATA + 1]),
            Err(DiskError::Metadata(MetadataFault::TooLarge(n))) if n == MAX_METADATA + 1
        ));
    }

    #[test]
    fn luks_uuid_output_is_checked() {
        assert_eq!(
            parse_luks_uuid(b"0A1B2C3D-0000-4000-8000-00000000000F\n").unwrap(),
            "0a1b2c3d-0000-4000-8000-00000000000f"
        );
        assert!(matches!(
            parse_luks_uuid(b"not-a-uuid\x1b[2J"),
            Err(DiskError::BadUuid(m)) if !m.contains('\x1b')
        ));
    }

    #[test]
    fn cryptsetup_is_given_the_native_writers_layout() {
        use crate::luks2::format::{
            DATA_OFFSET, HEADER_SIZE, KEYSLOTS_SIZE, SECTOR_SIZE, VOLUME_KEY_LEN,
        };
        let given = |option: &str| {
            let at = FORMAT_ARGS.iter().position(|a| *a == option).unwrap();
            FORMAT_ARGS[at + 1].to_string()
        };
        assert_eq!(given("--cipher"), crate::luks2::area::CIPHER);
        assert_eq!(given("--key-size"), (VOLUME_KEY_LEN * 8).to_string());
        assert_eq!(given("--sector-size"), SECTOR_SIZE.to_string());
        assert_eq!(given("--hash"), "sha256");
        assert_eq!(given("--luks2-metadata-size"), HEADER_SIZE.to_string());
        assert_eq!(given("--luks2-keyslots-size"), KEYSLOTS_SIZE.to_string());
        assert_eq!(given("--offset"), (DATA_OFFSET / 512).to_string());
        // What it opens: the native writer's header with the same KDF, the
        // Argon2 costs as bounds (cryptsetup lowers lanes to the CPUs).
        let argon = CryptsetupBackend::header_only("/dev/null").with_pbkdf(Pbkdf::Argon2id {
            iterations: 4,
            memory_kib: 65536,
            parallel: 2,
        });
        let expected = argon.expected();
        assert_eq!(
            expected.kdf,
            ExpectedKdf::AtMost(KdfChoice::Argon2id {
                time: 4,
                memory_kib: 65536,
                cpus: 2
            })
        );
        assert_eq!(
            (expected.sector_size, expected.digest_iterations),
            (4096, 1000..=1000)
        );
        assert_eq!(
            CryptsetupBackend::header_only("/dev/null").expected(),
            ExpectedHeader::written_with(&FormatOptions::default())
        );
    }

    #[test]
    fn pbkdf_arguments() {
        assert_eq!(
            Pbkdf::default().args(),
            ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"]
        );
        assert_eq!(
            Pbkdf::Argon2id {
                iterations: 4,
                memory_kib: 65536,
                parallel: 2
            }
            .args()
            .join(" "),
            "--pbkdf argon2id --pbkdf-force-iterations 4 --pbkdf-memory 65536 --pbkdf-parallel 2"
        );
    }

    #[test]
    fn mapper_names_are_checked_before_cryptsetup_runs() {
        for bad in ["", "a/b", "..", "x y", "\u{e9}"] {
            let mut b =
                CryptsetupBackend::new("/nonexistent", bad).with_program("/nonexistent/cryptsetup");
            assert!(
                matches!(
                    b.open(&SecretBytes::new(vec![1])),
                    Err(DiskError::Config(_))
                ),
                "{bad:?}"
            );
        }
        let b = CryptsetupBackend::new("/dev/vdb", "state");
        assert!(b.check_mapper_name().is_ok());
        assert_eq!(b.mapped_device(), None);
    }
}
