//! `confboot sign`: signs an image's reference values (the unsigned CoRIM
//! `confboot measure --reference-values-out` writes) with a release key, as
//! COSE_Sign1 with ES256 (`confboot_appraisal::reference`).

use std::path::PathBuf;

use confboot_appraisal::reference::cose::MAX_KEY_PEM_BYTES;
use confboot_appraisal::reference::{
    MAX_SET_BYTES, ReferenceError, ReferenceSet, SigningKey, sign_unsigned,
};
use confboot_util::args::{ArgsError, Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot_util::fs::FileError;

/// Why nothing was signed (exit 2): the key or the input cannot be read,
/// or a reader would refuse them.
#[derive(Debug, thiserror::Error)]
enum SignError {
    /// A file cannot be read.
    #[error("--{option}: {error}")]
    Read {
        /// The option that names it.
        option: &'static str,
        /// Why.
        error: FileError,
    },
    /// The key or the set is refused.
    #[error("--{option}: {error}")]
    Refused {
        /// The option that names it.
        option: &'static str,
        /// Why.
        error: ReferenceError,
    },
    /// The set cannot be signed.
    #[error("{0}")]
    Sign(ReferenceError),
}

const KEY: Opt = Opt::value(
    "key",
    "KEY.pem",
    "The release key: a P-256 private key in PKCS#8 PEM (`confboot keygen`, or `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`)",
);
const IN: Opt = Opt::value("in", "FILE", "The unsigned reference values");
const OUT: Opt = Opt::value("out", "FILE", "Where the signed reference values go");

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot sign",
    about: "Signs reference values written by `confboot measure --reference-values-out` with a \
release key: COSE_Sign1, ES256, the key named by the SHA-256 of its public key (kid). The input \
is read as a reader reads it first: a set that a reader would refuse is not signed. Exit status: \
0 signed, 2 bad arguments, an unreadable or refused key or input, 1 the output cannot be written.",
    usage: "confboot sign --key KEY.pem --in FILE --out FILE",
    opts: &[KEY, IN, OUT, VERBOSITY],
};

/// What `confboot sign` runs with.
#[derive(Debug)]
struct Config {
    /// The release key's PEM file.
    key: PathBuf,
    /// The unsigned set.
    input: PathBuf,
    /// Where the signed set goes.
    output: PathBuf,
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, ArgsError> {
        let key = m.required(&KEY).map(PathBuf::from);
        let input = m.required(&IN).map(PathBuf::from);
        let output = m.required(&OUT).map(PathBuf::from);
        Ok(Config {
            key: key?,
            input: input?,
            output: output?,
        })
    }
}

/// Runs `confboot sign`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let config = match Config::from_matches(&m) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("confboot sign: {e}");
            return 2;
        }
    };
    let (signed, set, key) = match sign(&config) {
        Ok(done) => done,
        Err(e) => {
            eprintln!("confboot sign: {e}");
            return 2;
        }
    };
    if let Err(e) = std::fs::write(&config.output, &signed) {
        eprintln!(
            "confboot sign: cannot write {}: {e}",
            config.output.display()
        );
        return 1;
    }
    println!(
        "wrote {}: {} {} signed by release key {}",
        config.output.display(),
        set.name,
        set.version,
        confboot_util::hex::encode(&key.release_key().kid())
    );
    0
}

fn sign(config: &Config) -> Result<(Vec<u8>, ReferenceSet, SigningKey), SignError> {
    let read = |option: &'static str| move |error| SignError::Read { option, error };
    let refused = |option: &'static str| move |error| SignError::Refused { option, error };
    let pem = confboot_util::fs::read_bounded(&config.key, MAX_KEY_PEM_BYTES as u64)
        .map_err(read(KEY.long))?;
    let key = SigningKey::from_pem(&pem).map_err(refused(KEY.long))?;
    let unsigned = confboot_util::fs::read_bounded(&config.input, MAX_SET_BYTES as u64)
        .map_err(read(IN.long))?;
    let set = ReferenceSet::from_cbor(&unsigned).map_err(refused(IN.long))?;
    let signed = sign_unsigned(&unsigned, &key).map_err(SignError::Sign)?;
    Ok((signed, set, key))
}
