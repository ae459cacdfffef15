//! Azure SEV-SNP nodes on the join path, end to end: a real joinsvc
//! process accepting `azure-sev-snp` with the production validator (its
//! policy pins a test ARK minted by `confboot_tests::snp` and the image's
//! PCRs), and nodes whose production Azure issuer reads the HCL report
//! from a swtpm's NV index `0x01400001` and quotes with the RSA key it
//! names, over real aTLS. The evidence is made for the test
//! (`confboot_tests::azure`); the recorded samples of real Azure VMs are
//! the verifier's oracle (`crates/azure/tests/azure.rs`).
//!
//! Each refusal is seen twice: the node gets no ticket, and joinsvc's log
//! names the check that refused it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use confboot_attest::{Issuer, MeasurementPolicy};
use confboot_cluster::ticket::JoinTicket;
use confboot_proto::join::IssueJoinTicketRequest;
use confboot_tests::TempDir;
use confboot_tests::azure::{AzureVm, AzureVmSpec};
use confboot_tests::cluster::Joinsvc;
use confboot_tests::snp::{Guest, ReplayingIssuer, Tcb, TestAmd, TestChip};
use confboot_tests::tickets::SealedClient;

const DISK: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
/// The paravisor's launch measurement the policy expects.
const PARAVISOR: [u8; 48] = [0x7a; 48];
const KERNEL: &[u8] = b"the kernel";
const INITRD: &[u8] = b"the initrd and command line";

fn joinsvc_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_joinsvc"))
}

fn amd() -> &'static TestAmd {
    static AMD: OnceLock<TestAmd> = OnceLock::new();
    AMD.get_or_init(TestAmd::new)
}

fn chip() -> &'static TestChip {
    static CHIP: OnceLock<TestChip> = OnceLock::new();
    CHIP.get_or_init(|| amd().chip([1; 64], Tcb::CURRENT))
}

fn spec(image: (&'static [u8], &'static [u8])) -> AzureVmSpec<'static> {
    AzureVmSpec {
        chip: chip(),
        guest: Guest {
            measurement: PARAVISOR,
            debug: false,
        },
        claims_key: None,
        image,
    }
}

fn vm(spec: AzureVmSpec<'static>) -> AzureVm {
    AzureVm::start(amd(), spec).expect("a swtpm with the paravisor's indices")
}

/// An `azure-sev-snp` policy: the paravisor's launch on the test ARK, and
/// `pcrs`.
fn policy(dir: &Path, pcrs: &str) -> PathBuf {
    std::fs::write(dir.join("test-ark.pem"), amd().root_bundle_pem()).unwrap();
    let file = dir.join("azure.json");
    std::fs::write(
        &file,
        format!(
            r#"{{"snp": {{"measurement": {{"expected": "{}"}}, "rootBundles": ["test-ark.pem"]}}, "pcrs": {pcrs}}}"#,
            confboot_util::hex::encode(&PARAVISOR)
        ),
    )
    .unwrap();
    file
}

fn joinsvc(policy: &Path) -> Joinsvc {
    let policy = policy.display().to_string();
    Joinsvc::start_with(
        &joinsvc_bin(),
        &MeasurementPolicy::default(),
        &[],
        &["--variants", "azure-sev-snp", "--azure-policy", &policy],
    )
}

fn join(joinsvc: &Joinsvc, issuer: &Arc<dyn Issuer>) -> Result<JoinTicket, String> {
    let mut client = SealedClient::connect(
        joinsvc.rpc_addr,
        Duration::from_secs(20),
        &[],
        Arc::clone(issuer),
    )
    .map_err(|e| e.to_string())?;
    let req = IssueJoinTicketRequest {
        disk_uuid: DISK.into(),
        ..Default::default()
    };
    client
        .join(&req, Duration::from_secs(20))
        .map_err(|e| e.to_string())
}

fn assert_refused(joinsvc: &Joinsvc, issuer: &Arc<dyn Issuer>, why: &str) {
    let err = join(joinsvc, issuer).expect_err(why);
    assert!(!err.is_empty());
    let line = joinsvc.process.wait_for_line(why, 500);
    assert!(line.contains("refused"), "{line}");
}

#[test]
fn an_azure_node_joins_over_atls_and_gets_its_ticket() {
    let dir = TempDir::new("azure-join");
    let node = vm(spec((KERNEL, INITRD)));
    let joinsvc = joinsvc(&policy(dir.path(), &node.image_pcrs_json()));
    let issuer: Arc<dyn Issuer> = node.issuer().unwrap();
    let ticket = join(&joinsvc, &issuer).expect("an honest Azure node is admitted");
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK).expose()
    );
    assert!(!ticket.token.is_empty());
    joinsvc
        .process
        .wait_for_line("joining nodes may attest with: azure-sev-snp", 100);
}

#[test]
fn an_azure_node_of_another_image_is_refused() {
    let dir = TempDir::new("azure-image");
    let expected = vm(spec((KERNEL, INITRD)));
    let joinsvc = joinsvc(&policy(dir.path(), &expected.image_pcrs_json()));
    let other = vm(spec((KERNEL, b"another command line")));
    let issuer: Arc<dyn Issuer> = other.issuer().unwrap();
    assert_refused(&joinsvc, &issuer, "measurement 9 differs");
}

#[test]
fn an_hcl_report_that_names_another_key_is_refused() {
    let dir = TempDir::new("azure-key");
    let honest = vm(spec((KERNEL, INITRD)));
    let joinsvc = joinsvc(&policy(dir.path(), &honest.image_pcrs_json()));
    // The report binds claims with the honest VM's key; this vTPM quotes
    // with its own: the paravisor's report vouches for another key.
    let forged = vm(AzureVmSpec {
        claims_key: Some(honest.ak_modulus.clone()),
        ..spec((KERNEL, INITRD))
    });
    let issuer: Arc<dyn Issuer> = forged.issuer().unwrap();
    assert_refused(
        &joinsvc,
        &issuer,
        "the quote's signature does not verify under HCLAkPub",
    );
}

#[test]
fn a_paravisor_launch_the_policy_does_not_pin_is_refused() {
    let dir = TempDir::new("azure-launch");
    let node = vm(AzureVmSpec {
        guest: Guest {
            measurement: [0x66; 48],
            debug: false,
        },
        ..spec((KERNEL, INITRD))
    });
    let joinsvc = joinsvc(&policy(dir.path(), &node.image_pcrs_json()));
    let issuer: Arc<dyn Issuer> = node.issuer().unwrap();
    assert_refused(&joinsvc, &issuer, "measurement 0 differs");
}

#[test]
fn a_replayed_azure_evidence_is_refused() {
    let dir = TempDir::new("azure-replay");
    let node = vm(spec((KERNEL, INITRD)));
    let joinsvc = joinsvc(&policy(dir.path(), &node.image_pcrs_json()));
    let inner = Arc::try_unwrap(node.issuer().unwrap()).ok().unwrap();
    let issuer: Arc<dyn Issuer> = Arc::new(ReplayingIssuer::new(inner));
    join(&joinsvc, &issuer).expect("the recorded handshake itself is admitted");
    assert_refused(&joinsvc, &issuer, "made for another session");
}
