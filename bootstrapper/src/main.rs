//! bootstrapper: runs on every node from the initramfs. It proves what the
//! node runs and obtains the node's state-disk key and join ticket, or takes
//! the admin's Init on the first node.

use confboot::args::{Command, VERBOSITY, parse_or_exit};

const CMD: Command = Command {
    name: "bootstrapper",
    about: "bootstrapper: runs on every confboot node, from the initramfs at VM boot.\n\
            It proves what the node runs (vTPM quote, SEV-SNP report) over attested TLS and obtains\n\
            the node's state-disk key and join ticket from a join service, or takes the admin's Init\n\
            on the first node.",
    usage: "bootstrapper [OPTIONS]",
    opts: &[VERBOSITY],
};

fn main() {
    let m = parse_or_exit(&CMD, std::env::args().skip(1));
    let verbosity = m.verbosity().unwrap_or_else(|e| {
        eprintln!("bootstrapper: {e}\nTry 'bootstrapper --help'.");
        std::process::exit(2)
    });
    confboot::logging::init("bootstrapper", verbosity);
    log::info!("bootstrapper {} starting", env!("CARGO_PKG_VERSION"));
    log::error!("this build has no bootstrapping flow yet (init server and join client)");
    std::process::exit(1);
}
