//! `confboot hash-init-secret`: the slow hash a node is given so it can
//! check the init secret without knowing it.

use confboot_kms::init_secret;
use confboot_util::args::{Command, Opt, VERBOSITY, parse_or_exit};

const CMD: Command = Command {
    name: "confboot hash-init-secret",
    about: "Print the PBKDF2-HMAC-SHA256 hash of an init secret, for the node's --init-secret-hash.",
    usage: "confboot hash-init-secret --init-secret-file FILE",
    opts: &[
        Opt::value("init-secret-file", "FILE", "The init secret"),
        Opt::value("iterations", "N", "PBKDF2 iterations").default("600000"),
        VERBOSITY,
    ],
};

/// Runs `confboot hash-init-secret`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let result = (|| -> Result<String, String> {
        let path = m.required("init-secret-file").map_err(|e| e.to_string())?;
        let secret = init_secret::read_file(std::path::Path::new(path))
            .map_err(|e| format!("--init-secret-file: {e}"))?;
        let iterations = m
            .parsed::<u32>("iterations")
            .map_err(|e| e.to_string())?
            .unwrap_or(600_000);
        if iterations < init_secret::MIN_ITERATIONS {
            return Err(format!(
                "--iterations must be at least {}",
                init_secret::MIN_ITERATIONS
            ));
        }
        Ok(init_secret::hash(&secret, iterations))
    })();
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
