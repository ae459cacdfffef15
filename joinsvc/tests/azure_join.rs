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

/// A node's validators of `azure-sev-snp` join services, as the
/// bootstrapper and the node agent build them (`--joinsvc-variants
/// azure-sev-snp --joinsvc-azure-policy FILE`).
fn join_service_validators(policy: &Path) -> Vec<Arc<dyn confboot_attest::Validator>> {
    use confboot_verifier::config::{AttestationSettings, GivenSettings};
    let settings = AttestationSettings::new(
        vec![confboot_attest::Variant::AzureSevSnp],
        GivenSettings {
            azure_policy: Some(policy.to_path_buf()),
            ..GivenSettings::default()
        },
    )
    .unwrap();
    // The node's own vTPM: its image is the default policy of vTPM join
    // services only, unused here.
    let own = confboot_tpm::swtpm::Swtpm::start().unwrap();
    let own = confboot_vtpm::VtpmIssuer::new(own.connect().unwrap()).unwrap();
    confboot_verifier::join_service::join_service_validators(&settings, &own, || {}, &[]).unwrap()
}

/// The test VCEK where an SNP policy's `vcekCacheDir` looks for it (a
/// join service's issuer sends no chain: the node has it cached).
fn cache_vcek(dir: &Path, vm: &AzureVm) {
    let at = confboot_azure::HARDWARE_REPORT_OFFSET;
    let report =
        confboot_snp::SnpReport::from_bytes(&vm.hcl_report[at..at + confboot_snp::REPORT_LEN])
            .unwrap();
    let path = confboot_snp::vcek_cache_path(&dir.join("vcek"), &report);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, &chip().vcek_der).unwrap();
}

/// `policy` with the VCEK cache beside it.
fn policy_with_cache(dir: &Path, pcrs: &str) -> PathBuf {
    let file = policy(dir, pcrs);
    let text = std::fs::read_to_string(&file).unwrap().replace(
        r#""rootBundles": ["test-ark.pem"]"#,
        r#""rootBundles": ["test-ark.pem"], "vcekCacheDir": "vcek""#,
    );
    std::fs::write(&file, text).unwrap();
    file
}

/// A join service that attests as `azure-sev-snp` (`--attest-as`, its
/// vTPM the paravisor's, marked with its cluster id) is checked by a node
/// that accepts `azure-sev-snp` join services: admitted under a policy of
/// its image, its PCR 15 read as the cluster's mark; refused under a
/// policy of another image.
#[test]
fn a_node_checks_an_azure_join_service() {
    let dir = TempDir::new("azure-node-side");
    let cp = vm(spec((KERNEL, INITRD)));
    cache_vcek(dir.path(), &cp);
    {
        let mut tpm = cp.swtpm.connect().unwrap();
        confboot_cluster::mark::mark_node(&mut tpm, b"the cluster").unwrap();
    }
    let tpm = cp.swtpm.addr().to_string();
    let joinsvc = Joinsvc::start_with(
        &joinsvc_bin(),
        &MeasurementPolicy::default(),
        &[],
        &[
            "--variants",
            "azure-sev-snp",
            "--azure-policy",
            &policy(dir.path(), &cp.image_pcrs_json())
                .display()
                .to_string(),
            "--tpm",
            &tpm,
            "--attest-as",
            "azure-sev-snp",
        ],
    );
    joinsvc
        .process
        .wait_for_line("attesting as azure-sev-snp", 100);

    // The node attests too (joinsvc takes no unattested client), as an
    // Azure node of the same image.
    let node = vm(spec((KERNEL, INITRD)));
    let node: Arc<dyn Issuer> = node.issuer().unwrap();
    let good = join_service_validators(&policy_with_cache(dir.path(), &cp.image_pcrs_json()));
    let (_, peer) = confboot_atls::connect(
        joinsvc.rpc_addr,
        Duration::from_secs(20),
        &good,
        Some(Arc::clone(&node)),
    )
    .expect("the node admits the Azure join service");
    let peer = peer.expect("the join service attested");
    assert_eq!(peer.variant, confboot_attest::Variant::AzureSevSnp);
    confboot_cluster::ticket::check_member_mark(b"the cluster", Some(&peer))
        .expect("its PCR 15 holds the cluster's mark");
    assert!(confboot_cluster::ticket::check_member_mark(b"another cluster", Some(&peer)).is_err());

    let other = vm(spec((KERNEL, b"another command line")));
    let other_dir = TempDir::new("azure-node-side-other");
    cache_vcek(other_dir.path(), &cp);
    let wrong = join_service_validators(&policy_with_cache(
        other_dir.path(),
        &other.image_pcrs_json(),
    ));
    let err = confboot_atls::connect(
        joinsvc.rpc_addr,
        Duration::from_secs(20),
        &wrong,
        Some(node),
    )
    .err()
    .expect("a join service of another image is refused");
    assert!(err.to_string().contains("measurement 9 differs"), "{err}");
}

/// joinsvc refuses to start on an `azure-sev-snp` policy that leaves the
/// initrd and command line (PCR 9) unpinned, and names the file and the PCR.
#[test]
fn joinsvc_refuses_an_azure_policy_that_does_not_pin_the_image() {
    let dir = TempDir::new("azure-unpinned");
    let node = vm(spec((KERNEL, INITRD)));
    let pcr4_only = node
        .image_pcrs_json()
        .split(", ")
        .next()
        .unwrap()
        .to_string()
        + "}";
    let policy = policy(dir.path(), &pcr4_only);
    let master = dir.path().join("master-secret.json");
    confboot_kms::MasterSecret::generate()
        .unwrap()
        .write_file(&master)
        .unwrap();
    let out = std::process::Command::new(joinsvc_bin())
        .args(["--master-secret", &master.display().to_string()])
        .args(["--measurement-salt", &"5a".repeat(32)])
        .args(["--variants", "azure-sev-snp"])
        .args(["--azure-policy", &policy.display().to_string()])
        .args(["--api-server-endpoint", "10.0.0.1:6443"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--azure-policy")
            && err.contains("azure-sev-snp policy does not pin the image: PCR 9 not enforced"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
}

/// On an Azure VM the paravisor's RSA attestation key holds the handle
/// where confboot keeps its own AK (0x81000003): the node's vTPM issuer
/// (the cluster mark, its own image) creates its ECC AK beside it, and the
/// Azure issuer still quotes with the paravisor's key.
#[test]
fn the_vtpm_issuer_opens_beside_the_paravisor_key() {
    let dir = TempDir::new("azure-own-ak");
    let node = vm(spec((KERNEL, INITRD)));
    let own = confboot_vtpm::VtpmIssuer::new(node.swtpm.connect().unwrap())
        .expect("an ECC AK beside the paravisor's RSA key");
    assert!(!own.ak_public_key().is_empty());
    drop(own);
    let joinsvc = joinsvc(&policy(dir.path(), &node.image_pcrs_json()));
    let issuer: Arc<dyn Issuer> = node.issuer().unwrap();
    join(&joinsvc, &issuer).expect("the paravisor's key still signs");
}
