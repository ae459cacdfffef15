//! The `nodeagent` binary: [`nodeagent::main`] (see the crate's docs), and
//! `nodeagent cluster-step` ([`nodeagent::cluster_step`]), the cluster step
//! the bootstrapper handed over to the node's OS.

fn main() {
    let mut args = std::env::args().skip(1);
    if std::env::args().nth(1).as_deref() == Some("cluster-step") {
        args.next();
        std::process::exit(nodeagent::cluster_step::main(args));
    }
    nodeagent::main();
}
