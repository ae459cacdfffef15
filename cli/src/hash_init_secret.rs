//! `confboot hash-init-secret`: the slow hash a node is given so it can
//! check the init secret without knowing it.

use std::path::PathBuf;

use confboot_kms::init_secret;
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};

const INIT_SECRET_FILE: Opt = Opt::value("init-secret-file", "FILE", "The init secret");
const ITERATIONS: Opt = Opt::value("iterations", "N", "PBKDF2 iterations").default("600000");

const CMD: Command = Command {
    name: "confboot hash-init-secret",
    about: "Print the PBKDF2-HMAC-SHA256 hash of an init secret, for the node's --init-secret-hash.",
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

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, String> {
        let init_secret_file = m.required(&INIT_SECRET_FILE).map(PathBuf::from);
        let iterations = m.parsed::<u32>(&ITERATIONS);
        let init_secret_file = init_secret_file.map_err(|e| e.to_string())?;
        let iterations = iterations.map_err(|e| e.to_string())?.unwrap_or(600_000);
        if iterations < init_secret::MIN_ITERATIONS {
            return Err(format!(
                "--{} must be at least {}",
                ITERATIONS.long,
                init_secret::MIN_ITERATIONS
            ));
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
    let result = Config::from_matches(&m).and_then(|config| {
        let secret = init_secret::read_file(&config.init_secret_file)
            .map_err(|e| format!("--{}: {e}", INIT_SECRET_FILE.long))?;
        Ok(init_secret::hash(&secret, config.iterations))
    });
    match result {
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
        assert!(
            Config::from_matches(&m)
                .unwrap_err()
                .starts_with("--iterations must be at least"),
        );
    }
}
