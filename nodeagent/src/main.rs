//! The `nodeagent` binary: [`nodeagent::main`] (see the crate's docs).

fn main() {
    nodeagent::main();
}
