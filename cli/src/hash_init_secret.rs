//! `confboot hash-init-secret`: the slow hash a node is given so it can
//! check the init secret without knowing it.

use std::path::PathBuf;

use confboot_kms::init_secret::{self, WeakSecretError};
use confboot_util::args::{ArgsError, Command, Matches, Opt, VERBOSITY, exit_usage, parse_or_exit};
use confboot_util::fs::FileError;

const INIT_SECRET_FILE: Opt = Opt::value(
    "init-secret-file",
    "FILE",
    "The init secret (at least 16 bytes and an estimated 80 bits, see above)",
);
const ITERATIONS: Opt = Opt::value("iterations", "N", "PBKDF2 iterations").default("600000");

const CMD: Command = Command {
    name: "confboot hash-init-secret",
    about: "Print the PBKDF2-HMAC-SHA256 hash of an init secret, for the node's --init-secret-hash.\n\
            The hash goes on every node's kernel command line, which the host can read: a secret guessed\n\
            from it gives the host Init and Recover. A weak secret is refused: fewer than 16 bytes, or\n\
            an estimate below 80 bits (the length, with repeated characters counting little, times\n\
            log2 of the alphabet of the character classes it uses: lowercase 26, uppercase 26, digits 10,\n\
            other printable 33, any other byte 161). The estimate cannot see words: prefer random bytes,\n\
            e.g. `head -c 24 /dev/urandom | base64 > init-secret`.",
    usage: "confboot hash-init-secret --init-secret-file FILE",
    opts: &[INIT_SECRET_FILE, ITERATIONS, VERBOSITY],
};

/// What `confboot hash-init-secret` runs with.
#[derive(Debug)]
struct Config {
    /// The init secret's file.
    init_secret_file: PathBuf,
    /// PBKDF2 iterations (at least [`init_secret::MIN_ITERATIONS`]).
    iterations: u32,
}

/// Why the options cannot be used (exit 2).
#[derive(Debug, thiserror::Error)]
enum OptionsError {
    /// An option is missing or not of its type.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// `--iterations` below the least count.
    #[error("--{} must be at least {}", ITERATIONS.long, init_secret::MIN_ITERATIONS)]
    TooFewIterations,
}

/// Why no hash was printed (exit 1).
#[derive(Debug, thiserror::Error)]
enum HashError {
    /// The init secret cannot be read.
    #[error("--{option}: {0}", option = INIT_SECRET_FILE.long)]
    Read(FileError),
    /// The init secret is weak.
    #[error("--{option}: {0}", option = INIT_SECRET_FILE.long)]
    Weak(WeakSecretError),
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, OptionsError> {
        let init_secret_file = m.required(&INIT_SECRET_FILE).map(PathBuf::from);
        let iterations = m.parsed::<u32>(&ITERATIONS);
        let init_secret_file = init_secret_file?;
        let iterations = iterations?.unwrap_or(600_000);
        if iterations < init_secret::MIN_ITERATIONS {
            return Err(OptionsError::TooFewIterations);
        }
        Ok(Config {
            init_secret_file,
            iterations,
        })
    }
}

/// Runs `confboot hash-init-secret`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let config = Config::from_matches(&m).unwrap_or_else(|e| exit_usage(&CMD, &e));
    match hash_secret(&config) {
        Ok(h) => {
            println!("{h}");
            0
        }
        Err(e) => {
            eprintln!("confboot hash-init-secret: {e}");
            1
        }
    }
}

/// The hash of the secret in the file, unless the secret is weak.
fn hash_secret(config: &Config) -> Result<String, HashError> {
    let secret = init_secret::read_file(&config.init_secret_file).map_err(HashError::Read)?;
    init_secret::check_strength(&secret).map_err(HashError::Weak)?;
    Ok(init_secret::hash(&secret, config.iterations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        let m = CMD
            .parse(["--init-secret-file", "s"].into_iter().map(String::from))
            .unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.iterations, 600_000);
        let m = CMD
            .parse(
                ["--init-secret-file=s", "--iterations=1"]
                    .into_iter()
                    .map(String::from),
            )
            .unwrap();
        assert!(matches!(
            Config::from_matches(&m),
            Err(e @ OptionsError::TooFewIterations)
                if e.to_string().starts_with("--iterations must be at least")
        ),);
    }

    #[test]
    fn a_weak_init_secret_is_refused_and_a_random_one_hashed() {
        let dir = confboot_testkit::TempDir::new("hash-init-secret");
        let file = dir.path().join("init-secret");
        let config = Config {
            init_secret_file: file.clone(),
            iterations: init_secret::MIN_ITERATIONS,
        };
        std::fs::write(&file, "s3cret\n").unwrap();
        let e = hash_secret(&config).unwrap_err();
        assert!(matches!(e, HashError::Weak(_)), "{e:?}");
        let e = e.to_string();
        assert!(
            e.starts_with("--init-secret-file: the init secret is too weak: 6 bytes")
                && e.contains("want at least 16 bytes and 80 bits"),
            "{e}"
        );
        std::fs::write(&file, "q8Jm2vQx7ZP0cW1nR5tLkY3eHs9aFbUd\n").unwrap();
        let h = hash_secret(&config).unwrap();
        assert!(
            init_secret::InitSecretHash::parse(&h)
                .unwrap()
                .verify(b"q8Jm2vQx7ZP0cW1nR5tLkY3eHs9aFbUd")
        );
    }
}
