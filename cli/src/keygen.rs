//! `confboot keygen`: a new release key (P-256) for signing reference
//! values, and its public key for the readers that check them.

use std::path::PathBuf;

use confboot_appraisal::reference::SigningKey;
use confboot_util::args::{ArgsError, Command, Matches, Opt, VERBOSITY, parse_or_exit};

const OUT: Opt = Opt::value(
    "out",
    "KEY.pem",
    "Where the private key goes (PKCS#8 PEM, mode 0600; an existing file is not replaced)",
);
const PUBLIC_OUT: Opt = Opt::value(
    "public-out",
    "FILE",
    "Where the public key goes (SubjectPublicKeyInfo PEM); default KEY.pem with .pub added",
);

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot keygen",
    about: "Generates a release key for `confboot sign`: a P-256 private key in PKCS#8 PEM (as \
`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes it) and its public key, \
which readers of reference values are configured with. Prints the key id (the SHA-256 of the \
public key's DER). Exit status: 0 written, 2 bad arguments, 1 a file exists or cannot be written.",
    usage: "confboot keygen --out KEY.pem [--public-out FILE]",
    opts: &[OUT, PUBLIC_OUT, VERBOSITY],
};

/// What `confboot keygen` runs with.
#[derive(Debug)]
struct Config {
    /// The private key's file.
    out: PathBuf,
    /// The public key's file.
    public_out: PathBuf,
}

/// Why the options cannot be used (exit 2).
#[derive(Debug, thiserror::Error)]
enum OptionsError {
    /// An option is missing.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// The private and the public key would go to one file.
    #[error("--{} and --{} name one file", OUT.long, PUBLIC_OUT.long)]
    OneFile,
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, OptionsError> {
        let out = PathBuf::from(m.required(&OUT)?);
        let public_out = match m.value(&PUBLIC_OUT) {
            Some(p) => PathBuf::from(p),
            None => {
                let mut p = out.clone().into_os_string();
                p.push(".pub");
                PathBuf::from(p)
            }
        };
        if public_out == out {
            return Err(OptionsError::OneFile);
        }
        Ok(Config { out, public_out })
    }
}

/// Runs `confboot keygen`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let config = match Config::from_matches(&m) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("confboot keygen: {e}");
            return 2;
        }
    };
    let (key, pem) = match SigningKey::generate() {
        Ok(generated) => generated,
        Err(e) => {
            eprintln!("confboot keygen: {e}");
            return 1;
        }
    };
    if config.public_out.exists() {
        eprintln!(
            "confboot keygen: {} exists; not replaced",
            config.public_out.display()
        );
        return 1;
    }
    if let Err(e) = confboot_util::fs::write_new_private(&config.out, pem.as_bytes()) {
        eprintln!("confboot keygen: {}: {e}", config.out.display());
        return 1;
    }
    if let Err(e) = std::fs::write(&config.public_out, key.release_key().to_pem()) {
        eprintln!(
            "confboot keygen: cannot write {}: {e}",
            config.public_out.display()
        );
        return 1;
    }
    println!(
        "wrote {} (private) and {} (public); key id {}",
        config.out.display(),
        config.public_out.display(),
        confboot_util::hex::encode(&key.release_key().kid())
    );
    0
}
