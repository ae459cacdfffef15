//! `confboot`: the admin's command line. Each command is a module with a
//! `run(args) -> exit code` function; this file only dispatches.

mod check_reference_values;
mod check_report;
mod common;
mod ear_output;
mod hash_init_secret;
mod hex_option;
mod init;
mod keygen;
mod measure;
mod measure_snp;
mod recover;
mod sign;
mod verify;
mod verify_azure;
mod verify_gcp;
mod verify_nitro;
mod verify_quote;
mod verify_report;
mod verity;

use confboot_util::args::{ArgsError, Command, VERBOSITY, nearest, parse_or_exit};

/// A subcommand: its name, one line of help, and its entry point.
struct Subcommand {
    name: &'static str,
    about: &'static str,
    run: fn(Vec<String>) -> i32,
}

const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        name: "init",
        about: "Initialize a new cluster on its first node",
        run: init::run,
    },
    Subcommand {
        name: "recover",
        about: "Send the master secret to a node that cannot rejoin",
        run: recover::run,
    },
    Subcommand {
        name: "hash-init-secret",
        about: "Print the hash of an init secret for a node's configuration",
        run: hash_init_secret::run,
    },
    Subcommand {
        name: "verify",
        about: "Verify a running node's attestation (its verify service) against a policy and the cluster id",
        run: verify::run,
    },
    Subcommand {
        name: "verify-report",
        about: "Verify an AMD SEV-SNP attestation report offline, check by check",
        run: verify_report::run,
    },
    Subcommand {
        name: "verify-quote",
        about: "Verify an Intel TDX quote offline with Intel's collateral, check by check",
        run: verify_quote::run,
    },
    Subcommand {
        name: "verify-azure",
        about: "Verify an Azure confidential VM's evidence (HCL report, vTPM quote) offline, check by check",
        run: verify_azure::run,
    },
    Subcommand {
        name: "verify-nitro",
        about: "Verify AWS NitroTPM evidence (NSM document, TPM quote) offline, check by check",
        run: verify_nitro::run,
    },
    Subcommand {
        name: "verify-gcp",
        about: "Verify a GCE vTPM attestation (AK certificate, quotes, event log) offline, check by check",
        run: verify_gcp::run,
    },
    Subcommand {
        name: "measure",
        about: "Predict a QEMU/OVMF boot's PCRs, or its SEV-SNP launch digest (--variant sev-snp), from kernel, initrd and command line",
        run: measure::run,
    },
    Subcommand {
        name: "keygen",
        about: "Generate a release key (P-256) for signing reference values",
        run: keygen::run,
    },
    Subcommand {
        name: "sign",
        about: "Sign an image's reference values (measure --reference-values-out) with a release key",
        run: sign::run,
    },
    Subcommand {
        name: "check-reference-values",
        about: "Read reference values as a relying party does: signature, shape and validity window",
        run: check_reference_values::run,
    },
    Subcommand {
        name: "verity",
        about: "Build the dm-verity hash tree of the node's root image (verity format), as veritysetup does",
        run: verity::run,
    },
    Subcommand {
        name: "version",
        about: "Print the version of confboot",
        run: version,
    },
];

fn usage() -> String {
    let mut s = String::from(
        "confboot: the admin's command line of a confboot cluster. It initializes the first node,\n\
         recovers nodes and verifies attestation evidence, talking attested TLS to the nodes.\n\n\
         Usage: confboot <COMMAND> [OPTIONS]\n       confboot <COMMAND> --help\n\nCommands:\n",
    );
    let width = SUBCOMMANDS.iter().map(|c| c.name.len()).max().unwrap_or(0) + 2;
    for c in SUBCOMMANDS {
        s.push_str(&format!("  {:width$}{}\n", c.name, c.about));
    }
    s
}

fn main() {
    let mut args = std::env::args().skip(1);
    let code = match args.next().as_deref() {
        None | Some("-h") | Some("--help") | Some("help") => {
            print!("{}", usage());
            0
        }
        Some(name) => match SUBCOMMANDS.iter().find(|c| c.name == name) {
            Some(c) => (c.run)(args.collect()),
            None => {
                let e = ArgsError::UnknownCommand {
                    given: name.to_string(),
                    nearest: nearest(name, SUBCOMMANDS.iter().map(|c| c.name)),
                };
                eprintln!("confboot: {e}\n\n{}", usage());
                2
            }
        },
    };
    std::process::exit(code);
}

const VERSION_CMD: Command = Command {
    name: "confboot version",
    about: "Print the version of confboot.",
    usage: "confboot version",
    opts: &[VERBOSITY],
};

fn version(args: Vec<String>) -> i32 {
    parse_or_exit(&VERSION_CMD, args);
    println!("confboot {}", env!("CARGO_PKG_VERSION"));
    0
}
