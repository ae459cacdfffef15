//! `confboot recover`: a node whose state disk is initialized but that
//! reaches no join service waits for the admin; this sends it the master
//! secret so it can derive its disk key and open its disk.

use std::path::Path;
use std::time::Duration;

use confboot_atls as atls;
use confboot_kms::MasterSecret;
use confboot_proto::DEFAULT_RECOVER_PORT;
use confboot_proto::recover::{RecoverMessage, RecoverResponse};
use confboot_util::args::{Command, Opt, VERBOSITY};

use crate::common;

const CMD: Command = Command {
    name: "confboot recover",
    about: "Recover a node that cannot reach a join service: verifies the node over attested TLS\n\
            against --measurements and --ak-trust (a vTPM node) or --snp-policy (an SEV-SNP node), as\n\
            --variants accepts (default qemu-vtpm; another variant is refused), then sends it the master secret (inside the kms:// URI) so it can\n\
            derive its state-disk key and open its disk.",
    usage: "confboot recover --node HOST[:PORT] --master-secret FILE --measurements FILE --ak-trust MODE\n       \
            confboot recover --node HOST[:PORT] --master-secret FILE --variants sev-snp --snp-policy FILE",
    opts: &[
        Opt::value(
            "node",
            "HOST[:PORT]",
            "The node's recovery API (default port 9999)",
        ),
        Opt::value("master-secret", "FILE", "The cluster's master secret")
            .default("confboot-mastersecret.json"),
        common::MEASUREMENTS,
        common::AK_TRUST,
        common::EXPECTED_EVENTS,
        common::VARIANTS,
        common::SNP_POLICY,
        VERBOSITY,
    ],
};

// The help text above names the default port.
const _: () = assert!(DEFAULT_RECOVER_PORT == 9999);

/// Runs `confboot recover`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    common::run_command(&CMD, args, recover)
}

fn recover(m: &confboot_util::args::Matches) -> Result<(), String> {
    let req = |n: &str| m.required(n).map_err(|e| e.to_string());
    let node = common::with_port(req("node")?, DEFAULT_RECOVER_PORT);
    let master =
        MasterSecret::read_file(Path::new(req("master-secret")?)).map_err(|e| e.to_string())?;
    let validators = common::node_validators(m)?;
    let measurements = common::policy_files(m);
    let (mut client, _) = atls::connect(&node, Duration::from_secs(30), &validators, None)
        .map_err(|e| common::explain_connect_error(&node, &e, &measurements))?;
    println!("node {node} attested");
    let msg = RecoverMessage {
        kms_uri: master.to_kms_uri().to_string(),
        storage_uri: "storage://no-store".into(),
    };
    let _: RecoverResponse = client
        .unary(confboot_proto::RECOVER, &msg, Duration::from_secs(120))
        .map_err(|s| format!("the node refused recovery: {s}"))?;
    println!("node {node} recovered: it opened its state disk");
    Ok(())
}
