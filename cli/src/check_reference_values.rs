//! `confboot check-reference-values`: reads reference values as a relying
//! party does (signed by a configured release key, well formed, within
//! their window) and prints what they expect; optionally writes a variant's
//! measurement policy and events in the formats joinsvc and `confboot
//! verify` read today.

use std::path::PathBuf;

use confboot_appraisal::reference::cose::MAX_KEY_PEM_BYTES;
use confboot_appraisal::reference::{MAX_SET_BYTES, ReleaseKey, open};
use confboot_attest::Variant;
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};

const IN: Opt = Opt::value(
    "in",
    "FILE",
    "The reference values (signed, or unsigned when no --release-key is given)",
);
const RELEASE_KEY: Opt = Opt::value(
    "release-key",
    "FILE",
    "A release public key (PEM); repeatable. With one, only a set signed by one of them is read",
);
const AT: Opt = Opt::value(
    "at",
    "TIME",
    "Check the window as of this time (RFC 3339 UTC, a date or Unix seconds); default now",
);
const POLICY_OUT: Opt = Opt::value(
    "policy-out",
    "FILE",
    "Write the qemu-vtpm measurement policy here (Constellation's JSON format)",
);
const EVENTS_OUT: Opt = Opt::value(
    "events-out",
    "FILE",
    "Write the qemu-vtpm predicted event log here",
);

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot check-reference-values",
    about: "Reads reference values as a relying party must: with release keys given, only a set \
signed by one of them (an unsigned set, another key's or a forged signature is refused); without, \
only an unsigned set. The set must be well formed, pin the image and be within its window. Prints \
the image's name and version, the window, the signer and each variant's PCRs. Exit status: 0 \
accepted, 1 refused or an output cannot be written, 2 bad arguments or an unreadable file.",
    usage: "confboot check-reference-values --in FILE [--release-key FILE]... [--at TIME] [--policy-out FILE] [--events-out FILE]",
    opts: &[IN, RELEASE_KEY, AT, POLICY_OUT, EVENTS_OUT, VERBOSITY],
};

/// What `confboot check-reference-values` runs with.
#[derive(Debug)]
struct Config {
    /// The set's file.
    input: PathBuf,
    /// The release public keys' files.
    release_keys: Vec<PathBuf>,
    /// The time the window is checked at, Unix seconds.
    at: i64,
    /// Where the policy goes, if anywhere.
    policy_out: Option<PathBuf>,
    /// Where the events go, if anywhere.
    events_out: Option<PathBuf>,
}

/// Why the options cannot be used (exit 2).
#[derive(Debug, thiserror::Error)]
enum OptionsError {
    /// An option is missing.
    #[error(transparent)]
    Args(#[from] confboot_util::args::ArgsError),
    /// `--at` is not an instant.
    #[error("--{option}: {0}", option = AT.long)]
    At(confboot_util::time::InstantError),
}

/// Why a `--release-key` file gives no release key (exit 2).
#[derive(Debug, thiserror::Error)]
enum KeyError {
    /// It cannot be read.
    #[error("{0}")]
    Read(confboot_util::fs::FileError),
    /// It is no release key.
    #[error("{0}")]
    Refused(confboot_appraisal::reference::ReferenceError),
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, OptionsError> {
        let input = m.required(&IN).map(PathBuf::from);
        let at = m
            .value(&AT)
            .map(|v| confboot_util::time::parse_instant(v).map_err(OptionsError::At))
            .transpose();
        Ok(Config {
            input: input?,
            release_keys: m
                .values(&RELEASE_KEY)
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            at: at?.unwrap_or_else(confboot_util::time::unix_now),
            policy_out: m.value(&POLICY_OUT).map(PathBuf::from),
            events_out: m.value(&EVENTS_OUT).map(PathBuf::from),
        })
    }
}

fn instant(t: i64) -> String {
    confboot_util::time::rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.max(0) as u64),
    )
}

/// Runs `confboot check-reference-values`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let fail = |code: i32, e: &dyn std::fmt::Display| {
        eprintln!("confboot check-reference-values: {e}");
        code
    };
    let config = match Config::from_matches(&m) {
        Ok(config) => config,
        Err(e) => return fail(2, &e),
    };
    let mut keys = Vec::new();
    for path in &config.release_keys {
        let key = confboot_util::fs::read_bounded(path, MAX_KEY_PEM_BYTES as u64)
            .map_err(KeyError::Read)
            .and_then(|pem| ReleaseKey::from_pem(&pem).map_err(KeyError::Refused));
        match key {
            Ok(key) => keys.push(key),
            Err(e) => {
                return fail(
                    2,
                    &format!("--{} {}: {e}", RELEASE_KEY.long, path.display()),
                );
            }
        }
    }
    let bytes = match confboot_util::fs::read_bounded(&config.input, MAX_SET_BYTES as u64) {
        Ok(bytes) => bytes,
        Err(e) => return fail(2, &format!("--{}: {e}", IN.long)),
    };
    let opened = match open(&bytes, &keys, config.at) {
        Ok(opened) => opened,
        Err(e) => return fail(1, &e),
    };
    let set = &opened.set;
    println!("image      {} {}", set.name, set.version);
    println!(
        "valid      {} to {}",
        instant(set.not_before),
        instant(set.not_after)
    );
    match opened.signer {
        Some(kid) => println!(
            "signed by  release key {}",
            confboot_util::hex::encode(&kid)
        ),
        None => println!("unsigned   (no release key given)"),
    }
    for v in &set.variants {
        if let Some(launch) = &v.launch {
            let hex = confboot_util::hex::encode;
            println!("variant    {} (a measured direct boot)", v.variant);
            for e in v.policy.entries().values() {
                println!("  launch   {}  enforced", hex(&e.value));
            }
            println!("  kernel   {}", hex(&launch.kernel));
            println!("  initrd   {}", hex(&launch.initrd));
            println!("  cmdline  {}", hex(&launch.cmdline));
            continue;
        }
        println!(
            "variant    {} ({} events)",
            v.variant,
            v.events.events.len()
        );
        for (pcr, e) in v.policy.entries() {
            let rule = if e.warn_only { "warnOnly" } else { "enforced" };
            println!("{pcr:>5}  {}  {rule}", confboot_util::hex::encode(&e.value));
        }
    }
    let vtpm = set.variant(Variant::QemuVtpm);
    for (path, text) in [
        (&config.policy_out, vtpm.map(|v| v.policy.to_json())),
        (&config.events_out, vtpm.map(|v| v.events.to_json())),
    ] {
        let Some(path) = path else { continue };
        let Some(text) = text else {
            return fail(1, &"the set has no qemu-vtpm reference values");
        };
        if let Err(e) = std::fs::write(path, text) {
            return fail(1, &format!("cannot write {}: {e}", path.display()));
        }
    }
    0
}
