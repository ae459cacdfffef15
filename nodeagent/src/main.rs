//! The `nodeagent` binary: [`nodeagent::main`] (see the crate's docs), and
//! `nodeagent cluster-step` ([`nodeagent::cluster_step`]), the cluster step
//! the bootstrapper handed over to the node's OS.

use confboot_util::args::{ArgsError, nearest};

/// The subcommands of the `nodeagent` binary.
const SUBCOMMANDS: [&str; 1] = ["cluster-step"];

fn main() {
    let mut args = std::env::args().skip(1);
    match std::env::args().nth(1) {
        Some(word) if word == "cluster-step" => {
            args.next();
            std::process::exit(nodeagent::cluster_step::main(args));
        }
        // A word where an option or a subcommand is expected: a usage
        // error that names the subcommand it is nearest to.
        Some(word) if !word.starts_with('-') => {
            let e = ArgsError::UnknownCommand {
                nearest: nearest(&word, SUBCOMMANDS),
                given: word,
            };
            eprintln!("nodeagent: {e}\nTry 'nodeagent --help'.");
            std::process::exit(2);
        }
        _ => nodeagent::main(),
    }
}
