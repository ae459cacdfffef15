//! `confboot verity format`: builds the dm-verity hash tree of an image as
//! `veritysetup format` does (same options, same bytes, same report) and
//! prints the kernel command-line words that boot a node from it.

use std::path::PathBuf;

use confboot_disk::verity::{self, FormatOptions, FormatResult, MAX_SALT_LEN, VerityError};
use confboot_util::args::{ArgsError, Command, Matches, Opt, VERBOSITY};

const SALT: Opt = Opt::value(
    "salt",
    "HEX",
    "The salt, in hex (at most 256 bytes), or - for none [default: 32 random bytes]",
);
const DATA_BLOCK_SIZE: Opt = Opt::value(
    "data-block-size",
    "N",
    "The data block size in bytes: a power of two from 512 to 65536",
)
.default("4096");
const HASH_BLOCK_SIZE: Opt = Opt::value(
    "hash-block-size",
    "N",
    "The hash block size in bytes: a power of two from 512 to 65536",
)
.default("4096");
const HASH_OFFSET: Opt = Opt::value(
    "hash-offset",
    "BYTES",
    "Where the hash area (superblock, then tree) starts in HASH: a multiple of 512 \
(of the hash block size with --no-superblock); at or after the data's end when DATA is HASH",
)
.default("0");
const DATA_BLOCKS: Opt = Opt::value(
    "data-blocks",
    "N",
    "How many data blocks to cover [default: all whole blocks of DATA]",
);
const NO_SUPERBLOCK: Opt = Opt::flag(
    "no-superblock",
    "Write no superblock (the kernel command line then says confboot.root.superblock=0)",
);
const UUID: Opt = Opt::value(
    "uuid",
    "UUID",
    "The superblock's UUID [default: a random one]",
);
const ROOT_DEVICE: Opt = Opt::value(
    "root-device",
    "DEV",
    "The data's block device on the node, for the kernel command line (confboot.root=)",
)
.default("/dev/vdb");
const ROOT_HASH_DEVICE: Opt = Opt::value(
    "root-hash-device",
    "DEV",
    "The tree's block device on the node (confboot.root.hashdev=) [default: the root device \
when DATA is HASH; without it a separate HASH prints no kernel command line]",
);

/// The command's options and help.
pub const FORMAT_CMD: Command = Command {
    name: "confboot verity format",
    about: "Builds the dm-verity hash tree of DATA into HASH, as `veritysetup format` does \
(format version 1, SHA-256, the salt before each block; the same options, the same bytes): a \
superblock at --hash-offset (unless --no-superblock), then the tree. HASH may be DATA itself, \
with the tree after the data (--hash-offset at least DATA's size); otherwise it is created if \
missing and never truncated. DATA is read one block at a time. Prints veritysetup's report \
(`Root hash:` among it) and a last line `Kernel command line: confboot.root=...` with the words \
that make a node map DATA as its verified root: the devices there are the node's (--root-device, \
--root-hash-device), not these files. Exit status: 0 built, 2 bad arguments or options, 1 an \
I/O failure.",
    usage: "confboot verity format DATA HASH [--salt HEX|-] [--data-block-size N] \
[--hash-block-size N] [--hash-offset BYTES] [--data-blocks N] [--no-superblock] [--uuid UUID] \
[--root-device DEV] [--root-hash-device DEV]",
    opts: &[
        SALT,
        DATA_BLOCK_SIZE,
        HASH_BLOCK_SIZE,
        HASH_OFFSET,
        DATA_BLOCKS,
        NO_SUPERBLOCK,
        UUID,
        ROOT_DEVICE,
        ROOT_HASH_DEVICE,
        VERBOSITY,
    ],
};

const USAGE: &str = "confboot verity: dm-verity for the node's read-only root.\n\n\
Usage: confboot verity format DATA HASH [OPTIONS]\n       confboot verity format --help\n\n\
Commands:\n  format  Build the hash tree of an image, as veritysetup format does\n";

/// What `confboot verity format` runs with.
#[derive(Debug)]
struct Config {
    /// The image.
    data: PathBuf,
    /// Where the tree goes (may be `data`).
    hash: PathBuf,
    /// How the tree is built.
    options: FormatOptions,
    /// The data's device on the node.
    root_device: PathBuf,
    /// The tree's device on the node, when given.
    root_hash_device: Option<PathBuf>,
}

/// Why the options and arguments cannot be used (exit 2).
#[derive(Debug, thiserror::Error)]
enum OptionsError {
    /// An option is not of its type or out of its range.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// Not the two arguments DATA and HASH.
    #[error("want two arguments, DATA and HASH (got {0})")]
    Arguments(usize),
}

fn invalid(opt: &Opt, value: &str, reason: impl Into<String>) -> ArgsError {
    ArgsError::Invalid {
        option: opt.long.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

fn block_size(m: &Matches, opt: &Opt) -> Result<u32, ArgsError> {
    let value = m.value(opt).expect("has a default");
    let size = m.parsed::<u32>(opt)?.expect("has a default");
    verity::check_block_size(opt.long, size).map_err(|_| {
        invalid(
            opt,
            value,
            format!(
                "want a power of two from {} to {}",
                verity::MIN_BLOCK_SIZE,
                verity::MAX_BLOCK_SIZE
            ),
        )
    })?;
    Ok(size)
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, OptionsError> {
        let (data, hash) = match m.positional() {
            [data, hash] => (PathBuf::from(data), PathBuf::from(hash)),
            other => return Err(OptionsError::Arguments(other.len())),
        };
        let salt = match m.value(&SALT) {
            None => FormatOptions::default().salt,
            Some("-") => Vec::new(),
            Some(hex) => {
                let salt = confboot_util::hex::decode(hex)
                    .map_err(|e| invalid(&SALT, hex, format!("not hex: {e}")))?;
                if salt.is_empty() || salt.len() > MAX_SALT_LEN {
                    return Err(invalid(
                        &SALT,
                        hex,
                        format!("want 1 to {MAX_SALT_LEN} bytes, or - for none"),
                    )
                    .into());
                }
                salt
            }
        };
        let data_block_size = block_size(m, &DATA_BLOCK_SIZE)?;
        let hash_block_size = block_size(m, &HASH_BLOCK_SIZE)?;
        let hash_offset = m.parsed::<u64>(&HASH_OFFSET)?.expect("has a default");
        let data_blocks = m.parsed::<u64>(&DATA_BLOCKS)?;
        let uuid = match m.value(&UUID) {
            None => None,
            Some(text) => {
                if !confboot_kms::is_uuid(text) {
                    return Err(invalid(&UUID, text, "want 8-4-4-4-12 hex digits").into());
                }
                let bytes = confboot_util::hex::decode(&text.replace('-', ""))
                    .map_err(|e| invalid(&UUID, text, e.to_string()))?;
                Some(bytes.try_into().expect("16 bytes"))
            }
        };
        Ok(Config {
            data,
            hash,
            options: FormatOptions {
                salt,
                data_block_size,
                hash_block_size,
                hash_offset,
                data_blocks,
                superblock: !m.flag(&NO_SUPERBLOCK),
                uuid,
            },
            root_device: PathBuf::from(m.value(&ROOT_DEVICE).expect("has a default")),
            root_hash_device: m.value(&ROOT_HASH_DEVICE).map(PathBuf::from),
        })
    }
}

/// A UUID's text: lowercase hex in groups of 8-4-4-4-12.
fn uuid_text(u: &[u8; 16]) -> String {
    let h = confboot_util::hex::encode(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// veritysetup's report of a format, line for line, then the kernel
/// command line (when the node's devices are known).
fn report(config: &Config, r: &FormatResult) -> String {
    let p = &r.params;
    let salt = if p.salt.is_empty() {
        "-".to_string()
    } else {
        confboot_util::hex::encode(&p.salt)
    };
    let mut out = format!(
        "VERITY header information for {}\n\
         UUID:            \t{}\n\
         Hash type:       \t1\n\
         Data blocks:     \t{}\n\
         Data block size: \t{}\n\
         Hash blocks:     \t{}\n\
         Hash block size: \t{}\n\
         Hash algorithm:  \t{}\n\
         Salt:            \t{salt}\n\
         Root hash:      \t{}\n",
        config.hash.display(),
        r.uuid.as_ref().map(uuid_text).unwrap_or_default(),
        p.data_blocks,
        p.data_block_size,
        r.hash_blocks,
        p.hash_block_size,
        verity::HASH_ALGORITHM,
        confboot_util::hex::encode(&r.root_hash),
    );
    // veritysetup 2.6 prints the size only for a hash area at offset 0.
    if p.hash_offset == 0 {
        out.push_str(&format!(
            "Hash device size: \t{} [bytes]\n",
            r.hash_device_size
        ));
    }
    if let Some(words) = kernel_cmdline(config, r) {
        out.push_str(&format!("Kernel command line: {words}\n"));
    }
    out
}

/// The `confboot.root*` words for the node's devices: `None` when the tree
/// is in a separate file and `--root-hash-device` does not name its device.
fn kernel_cmdline(config: &Config, r: &FormatResult) -> Option<String> {
    let one_file = r.params.hash_device == r.params.data_device;
    let hash_device = match (&config.root_hash_device, one_file) {
        (Some(dev), _) => dev.clone(),
        (None, true) => config.root_device.clone(),
        (None, false) => return None,
    };
    let params = verity::VerityParams {
        data_device: config.root_device.clone(),
        hash_device,
        ..r.params.clone()
    };
    Some(params.cmdline_words())
}

/// Runs `confboot verity ACTION`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let mut args = args.into_iter();
    match args.next().as_deref() {
        Some("format") => format(args.collect()),
        None | Some("-h") | Some("--help") | Some("help") => {
            print!("{USAGE}");
            0
        }
        Some(other) => {
            let e = ArgsError::UnknownCommand {
                given: other.to_string(),
                nearest: confboot_util::args::nearest(other, ["format"]),
            };
            eprintln!("confboot verity: {e}\n\n{USAGE}");
            2
        }
    }
}

fn format(args: Vec<String>) -> i32 {
    let m = confboot_util::args::parse_or_exit(&FORMAT_CMD, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let config = match Config::from_matches(&m) {
        Ok(config) => config,
        Err(e) => confboot_util::args::exit_usage(&FORMAT_CMD, &e),
    };
    match verity::format(&config.data, &config.hash, &config.options) {
        Ok(r) => {
            print!("{}", report(&config, &r));
            if kernel_cmdline(&config, &r).is_none() {
                eprintln!(
                    "confboot verity format: no kernel command line: the tree is in a separate \
                     file; name its device on the node with --{}",
                    ROOT_HASH_DEVICE.long
                );
            }
            0
        }
        Err(e @ VerityError::Io(_)) => {
            eprintln!("{}: {e}", FORMAT_CMD.name);
            1
        }
        Err(e) => {
            eprintln!("{}: {e}", FORMAT_CMD.name);
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let m = FORMAT_CMD
            .parse(args.iter().map(|s| s.to_string()))
            .map_err(|e| e.to_string())?;
        Config::from_matches(&m).map_err(|e| e.to_string())
    }

    #[test]
    fn every_option_the_config_reads_is_declared() {
        let c = parse(&["data", "hash"]).unwrap();
        assert_eq!(c.options.salt.len(), 32);
        assert_eq!(
            (c.options.data_block_size, c.options.hash_block_size),
            (4096, 4096)
        );
        assert_eq!(c.options.hash_offset, 0);
        assert!(c.options.superblock && c.options.uuid.is_none());
        assert_eq!(c.root_device, PathBuf::from("/dev/vdb"));
        assert_eq!(c.root_hash_device, None);
        let c = parse(&[
            "d",
            "h",
            "--salt",
            "-",
            "--data-block-size=512",
            "--hash-block-size",
            "1024",
            "--hash-offset",
            "8192",
            "--data-blocks",
            "7",
            "--no-superblock",
            "--uuid",
            "01234567-89AB-cdef-0123-456789abcdef",
            "--root-device",
            "/dev/sda",
            "--root-hash-device",
            "/dev/sdb",
        ])
        .unwrap();
        assert!(c.options.salt.is_empty());
        assert_eq!(
            (c.options.data_block_size, c.options.hash_block_size),
            (512, 1024)
        );
        assert_eq!(
            (c.options.hash_offset, c.options.data_blocks),
            (8192, Some(7))
        );
        assert!(!c.options.superblock);
        assert_eq!(
            c.options.uuid.map(|u| uuid_text(&u)).unwrap(),
            "01234567-89ab-cdef-0123-456789abcdef"
        );
        assert_eq!(c.root_hash_device, Some(PathBuf::from("/dev/sdb")));
    }

    #[test]
    fn bad_input_is_named() {
        let refused = |args: &[&str]| parse(args).unwrap_err();
        assert!(refused(&["d"]).contains("two arguments"));
        let m = FORMAT_CMD.parse(["d".to_string()]).unwrap();
        assert!(matches!(
            Config::from_matches(&m),
            Err(OptionsError::Arguments(1))
        ));
        assert!(refused(&["d", "h", "x"]).contains("two arguments"));
        assert!(refused(&["d", "h", "--salt", "xyz"]).contains("not hex"));
        assert!(refused(&["d", "h", "--salt", ""]).contains("1 to 256 bytes"));
        assert!(refused(&["d", "h", "--salt", &"00".repeat(257)]).contains("1 to 256 bytes"));
        assert!(refused(&["d", "h", "--data-block-size", "1000"]).contains("power of two"));
        assert!(refused(&["d", "h", "--hash-block-size", "131072"]).contains("power of two"));
        assert!(refused(&["d", "h", "--hash-block-size", "-1"]).contains("hash-block-size"));
        assert!(refused(&["d", "h", "--uuid", "nope"]).contains("8-4-4-4-12"));
    }
}
