//! Every path of the node's core, without sockets: doubles for the disk
//! (an in-memory LUKS header), mke2fs (a recording runner), the marker
//! (a recording PCR 15), the cluster ([`RecordingBackend`]) and the state
//! file system's mount (a directory, [`DirMount`]); SSH users are created
//! in a directory standing for the node's root.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use confboot_attest::{AttestationError, Detail};
use confboot_cluster::mark::marked_pcr15;
use confboot_cluster::ticket::{JoinTicket, RejoinTicket};
use confboot_cluster::{ClusterError, RecordedCall, RecordingBackend};
use confboot_disk::{DiskBackend, DiskError, DiskState, Mkfs, StateDisk};
use confboot_kms::init_secret::{InitSecretHash, MIN_ITERATIONS, hash};
use confboot_kms::{MasterSecret, MeasurementSalt, SecretBytes};
use confboot_proto::init::InitRequest;
use confboot_proto::recover::RecoverMessage;
use confboot_sys::process::{CommandOutput, CommandRunner, ProcessError, Stream};
use confboot_testkit::TempDir;
use confboot_tpm::CLUSTER_ID_PCR;
use confboot_vtpm::VtpmRefusal;

use super::*;

const UUID: &str = "0b5d2a3c-1111-4222-8333-944455556666";
const OTHER_UUID: &str = "0b5d2a3c-1111-4222-8333-000000000000";
const INIT_SECRET: &[u8] = b"the admin's init secret";

/// Which disk step fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DiskFault {
    Format,
    Open,
    StoreSalt,
}

/// What the in-memory disk holds and what was done to it.
#[derive(Debug, Default)]
struct DiskDouble {
    /// `Some((uuid, key))` once there is a LUKS header.
    luks: Option<(String, Vec<u8>)>,
    unrecognized: bool,
    opened: bool,
    salt: Option<Vec<u8>>,
    fs: Option<String>,
    bootstrapped: bool,
    fault: Option<DiskFault>,
    formats: usize,
    /// Every read of the header (state, key check, salt, records).
    reads: usize,
    /// Reads of the measurement salt.
    salt_reads: usize,
}

/// **Test double** of a disk backend: a LUKS header in memory, with the
/// same refusals as the real one (no format over a header, wrong keys).
#[derive(Clone, Default)]
struct FakeDisk(Arc<Mutex<DiskDouble>>);

impl FakeDisk {
    fn blank() -> FakeDisk {
        FakeDisk::default()
    }
    fn luks(uuid: &str, key: &[u8], salt: Option<&[u8]>) -> FakeDisk {
        let d = FakeDisk::default();
        {
            let mut s = d.state();
            s.luks = Some((uuid.into(), key.to_vec()));
            s.salt = salt.map(<[u8]>::to_vec);
            s.fs = Some("ext4".into());
            s.bootstrapped = true;
        }
        d
    }
    /// A disk whose first boot was killed after formatting (and making its
    /// file system) but before the cluster step.
    fn interrupted(uuid: &str, key: &[u8]) -> FakeDisk {
        let d = FakeDisk::luks(uuid, key, Some(&[5; 32]));
        d.state().bootstrapped = false;
        d
    }
    fn state(&self) -> std::sync::MutexGuard<'_, DiskDouble> {
        self.0.lock().unwrap()
    }
    fn failing(self, fault: DiskFault) -> FakeDisk {
        self.state().fault = Some(fault);
        self
    }
    fn untouched_blank(&self) -> bool {
        let s = self.state();
        s.luks.is_none() && !s.opened && s.salt.is_none() && s.formats == 0
    }
}

fn io_fault(step: &str) -> DiskError {
    DiskError::Io(confboot_util::IoFailure::bare(std::io::Error::other(
        format!("injected {step} fault"),
    )))
}

impl DiskBackend for FakeDisk {
    fn inspect(&self) -> Result<DiskState, DiskError> {
        let mut s = self.state();
        s.reads += 1;
        Ok(match (&s.luks, s.unrecognized) {
            (Some((uuid, _)), _) => DiskState::Luks { uuid: uuid.clone() },
            (None, true) => DiskState::Unrecognized {
                reason: "an ext4 superblock".into(),
            },
            (None, false) => DiskState::Blank,
        })
    }
    fn format(&mut self, uuid: &str, key: &SecretBytes) -> Result<(), DiskError> {
        let mut s = self.state();
        if let Some((existing, _)) = &s.luks {
            return Err(DiskError::AlreadyFormatted {
                uuid: existing.clone(),
            });
        }
        if s.fault == Some(DiskFault::Format) {
            return Err(io_fault("format"));
        }
        s.formats += 1;
        s.luks = Some((uuid.into(), key.expose().to_vec()));
        Ok(())
    }
    fn open(&mut self, key: &SecretBytes) -> Result<(), DiskError> {
        self.check_key(key)?;
        let mut s = self.state();
        if s.fault == Some(DiskFault::Open) {
            return Err(io_fault("open"));
        }
        s.opened = true;
        Ok(())
    }
    fn check_key(&self, key: &SecretBytes) -> Result<(), DiskError> {
        let mut s = self.state();
        s.reads += 1;
        match &s.luks {
            None => Err(DiskError::NotLuks),
            Some((_, k)) if k == key.expose() => Ok(()),
            Some(_) => Err(DiskError::WrongKey),
        }
    }
    fn describe(&self) -> String {
        "the disk double".into()
    }
    fn mapped_device(&self) -> Option<PathBuf> {
        self.state()
            .opened
            .then(|| PathBuf::from("/dev/mapper/double"))
    }
    fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError> {
        let mut s = self.state();
        if s.fault == Some(DiskFault::StoreSalt) {
            return Err(io_fault("token"));
        }
        s.salt = Some(salt.to_vec());
        Ok(())
    }
    fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
        let mut s = self.state();
        s.reads += 1;
        s.salt_reads += 1;
        Ok(s.salt.clone())
    }
    fn record_filesystem(&mut self, fs: &str) -> Result<(), DiskError> {
        self.state().fs = Some(fs.into());
        Ok(())
    }
    fn filesystem(&self) -> Result<Option<String>, DiskError> {
        let mut s = self.state();
        s.reads += 1;
        Ok(s.fs.clone())
    }
    fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
        self.state().bootstrapped = true;
        Ok(())
    }
    fn bootstrapped(&self) -> Result<bool, DiskError> {
        let mut s = self.state();
        s.reads += 1;
        Ok(s.bootstrapped)
    }
}

/// **Test double** of mke2fs: records the devices it was run on.
#[derive(Clone, Default)]
struct MkfsCalls(Arc<Mutex<Vec<String>>>);

impl CommandRunner for MkfsCalls {
    fn run(
        &self,
        _program: &Path,
        args: &[String],
        _stdin: Option<&[u8]>,
        _on_line: &mut dyn FnMut(Stream, &str),
    ) -> Result<CommandOutput, ProcessError> {
        self.0
            .lock()
            .unwrap()
            .push(args.last().cloned().unwrap_or_default());
        Ok(CommandOutput {
            status: Some(0),
            stdout_tail: vec![],
            stderr_tail: vec![],
        })
    }
}

/// **Test double** of PCR 15: records every mark.
#[derive(Clone, Default)]
struct FakeMarker {
    marks: Arc<Mutex<Vec<Vec<u8>>>>,
    fail: bool,
}

impl NodeMarker for FakeMarker {
    fn mark(&self, cluster_id: &[u8]) -> Result<(), AttestationError> {
        if self.fail {
            return Err(AttestationError::Issue(Detail::with(
                &VtpmRefusal::Tpm,
                "injected TPM fault",
            )));
        }
        self.marks.lock().unwrap().push(cluster_id.to_vec());
        Ok(())
    }
}

/// **Test double** of mounting the state file system: "mounting" gives a
/// directory that outlives the rig (the file system a later boot finds),
/// and every mount and unmount is recorded.
#[derive(Clone)]
struct DirMount {
    dir: Arc<TempDir>,
    calls: Arc<Mutex<Vec<String>>>,
}

impl StateFsMount for DirMount {
    fn mount(&self, device: &Path) -> Result<PathBuf, state_fs::StateFsError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("mount {}", device.display()));
        Ok(self.dir.path().to_path_buf())
    }
    fn unmount(&self, dir: &Path) -> Result<(), state_fs::StateFsError> {
        assert_eq!(dir, self.dir.path());
        self.calls.lock().unwrap().push("unmount".into());
        Ok(())
    }
}

/// A node's root as the initramfs has it: `etc/passwd` and `etc/group`
/// with root only, no `home`.
fn fresh_root() -> Arc<TempDir> {
    let root = TempDir::new("node-root");
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(
        root.path().join("etc/passwd"),
        "root:x:0:0:root:/:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(root.path().join("etc/group"), "root:x:0:\n").unwrap();
    Arc::new(root)
}

type TestNode = Node<FakeDisk, RecordingBackend, FakeMarker>;

struct Rig {
    node: TestNode,
    disk: FakeDisk,
    mkfs: MkfsCalls,
    marker: FakeMarker,
    state_fs: DirMount,
    root: Arc<TempDir>,
}

impl Rig {
    fn with(disk: FakeDisk, cluster: RecordingBackend, marker: FakeMarker) -> Rig {
        Rig::booting(
            disk,
            cluster,
            marker,
            Arc::new(TempDir::new("state-fs")),
            fresh_root(),
        )
    }
    /// A boot of a node whose state file system is `state_fs` and whose
    /// root is `root`.
    fn booting(
        disk: FakeDisk,
        cluster: RecordingBackend,
        marker: FakeMarker,
        state_fs: Arc<TempDir>,
        root: Arc<TempDir>,
    ) -> Rig {
        let mkfs = MkfsCalls::default();
        let config = NodeConfig {
            init_secret_hash: Some(
                InitSecretHash::parse(&hash(INIT_SECRET, MIN_ITERATIONS)).unwrap(),
            ),
            kubelet_request: None,
            node_ip: "10.0.2.15".into(),
            is_control_plane: false,
            join_service_check: JoinServiceCheck::ClusterMark,
        };
        let state_fs = DirMount {
            dir: state_fs,
            calls: Arc::default(),
        };
        let node = Node::new(
            StateDisk::new(disk.clone()),
            Some(Box::new(Mkfs::with_runner(
                "mke2fs",
                Box::new(mkfs.clone()),
            ))),
            cluster,
            marker.clone(),
            config,
        )
        .with_ssh_users(SshUsersSetup {
            mount: Box::new(state_fs.clone()),
            target_root: root.path().to_path_buf(),
        });
        Rig {
            node,
            disk,
            mkfs,
            marker,
            state_fs,
            root,
        }
    }
    /// The next boot of this node: the same disk and state file system,
    /// `root` as its root (a fresh one: the initramfs forgets everything).
    fn reboot(&self, root: Arc<TempDir>) -> Rig {
        {
            let mut s = self.disk.state();
            s.opened = false;
        }
        Rig::booting(
            self.disk.clone(),
            kubeadm(),
            FakeMarker::default(),
            Arc::clone(&self.state_fs.dir),
            root,
        )
    }
    fn mounts(&self) -> Vec<String> {
        self.state_fs.calls.lock().unwrap().clone()
    }
    fn new(disk: FakeDisk) -> Rig {
        Rig::with(disk, kubeadm(), FakeMarker::default())
    }
    fn marks(&self) -> Vec<Vec<u8>> {
        self.marker.marks.lock().unwrap().clone()
    }
    fn mkfs_runs(&self) -> Vec<String> {
        self.mkfs.0.lock().unwrap().clone()
    }
}

fn kubeadm() -> RecordingBackend {
    RecordingBackend::new(SecretBytes::new(b"kind: Config".to_vec()))
}

fn master() -> MasterSecret {
    MasterSecret::new(vec![7; 32], vec![9; 32]).unwrap()
}

fn init_request() -> InitRequest {
    let mut r = InitRequest::default();
    r.kms_uri = master().to_kms_uri().to_string();
    r.storage_uri = "storage://no-store".into();
    r.measurement_salt = vec![3; 32];
    r.init_secret = INIT_SECRET.to_vec();
    r.cluster_name = "c1".into();
    r
}

fn join_request() -> TicketRequest {
    TicketRequest::Join {
        disk_uuid: UUID.into(),
        is_control_plane: false,
    }
}

fn join_response() -> JoinTicket {
    JoinTicket {
        state_disk_key: SecretBytes::new(vec![0x42; 32]),
        measurement_salt: vec![5; 32],
        measurement_secret: SecretBytes::new(vec![6; 32]),
        api_server_endpoint: "10.0.2.15:6443".into(),
        token: zeroize::Zeroizing::new("abcdef.0123456789abcdef".into()),
        discovery_token_ca_cert_hash: "sha256:00".into(),
        kubernetes_version: "v1.30.4".into(),
        control_plane_key: vec![7; 32],
        ..Default::default()
    }
}

fn join_ticket() -> Ticket {
    Ticket::Join(join_response())
}

fn rejoin_ticket(key: &[u8]) -> Ticket {
    Ticket::Rejoin(RejoinTicket {
        state_disk_key: SecretBytes::new(key.to_vec()),
        measurement_secret: SecretBytes::new(vec![6; 32]),
        measurement_salt: vec![5; 32],
        generation: 0,
        control_plane_key: vec![7; 32],
    })
}

/// The cluster id of `secret` and the salt `salt` (of a valid length).
fn derive_cluster_id(secret: &[u8], salt: &[u8]) -> [u8; 32] {
    confboot_kms::derive_cluster_id(secret, &MeasurementSalt::try_from(salt).unwrap())
}

/// `ticket`, from a member of its cluster, as `rig`'s node checks it for
/// `request` (it passes).
fn checked(rig: &Rig, request: &TicketRequest, ticket: &Ticket) -> CheckedTicket {
    rig.node
        .check_ticket(request, &from_member(ticket))
        .unwrap()
}

/// `ticket` as a member of its cluster issues it: attested, PCR 15 holding
/// the mark of the cluster id of measurement secret [6; 32] and salt
/// [5; 32] (the tickets').
fn from_member(ticket: &Ticket) -> IssuedTicket {
    issued_with_pcr15(
        ticket,
        Some(marked_pcr15(&derive_cluster_id(&[6; 32], &[5; 32])).to_vec()),
    )
}

/// `ticket` from a service that attested with this PCR 15 (`None`: none in
/// its attestation).
fn issued_with_pcr15(ticket: &Ticket, pcr15: Option<Vec<u8>>) -> IssuedTicket {
    let mut measurements = std::collections::BTreeMap::new();
    measurements.insert(4, vec![0x44; 32]);
    if let Some(v) = pcr15 {
        measurements.insert(CLUSTER_ID_PCR, v);
    }
    IssuedTicket {
        ticket: ticket.clone(),
        service: Some(Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: confboot_attest::Variant::QemuVtpm,
            measurements,
        }),
    }
}

/// The admin's Recover: the init secret and the master secret `m`.
fn recover_request(m: &MasterSecret) -> RecoverMessage {
    recover_request_with(m, INIT_SECRET)
}

/// A Recover with the master secret `m` and `init_secret`.
fn recover_request_with(m: &MasterSecret, init_secret: &[u8]) -> RecoverMessage {
    let mut r = RecoverMessage::default();
    r.kms_uri = m.to_kms_uri().to_string();
    r.storage_uri = "storage://no-store".into();
    r.init_secret = init_secret.to_vec();
    r.measurement_salt = vec![5; 32];
    r
}

fn no_log() -> impl FnMut(&str) {
    |_| {}
}

// ---- The plan ----

#[test]
fn a_blank_disk_serves_init_and_asks_for_a_join_ticket() {
    let rig = Rig::new(FakeDisk::blank());
    let plan = rig.node.plan(|| UUID.to_string()).unwrap();
    assert_eq!(plan.admin_api, AdminApi::Init);
    assert_eq!(plan.request, join_request());
}

#[test]
fn a_luks_disk_serves_recover_and_asks_for_a_rejoin_ticket() {
    let rig = Rig::new(FakeDisk::luks(UUID, &[1; 32], Some(&[5; 32])));
    let plan = rig
        .node
        .plan(|| panic!("a LUKS disk needs no new UUID"))
        .unwrap();
    assert_eq!(plan.admin_api, AdminApi::Recover);
    assert_eq!(
        plan.request,
        TicketRequest::Rejoin {
            disk_uuid: UUID.into()
        }
    );
}

#[test]
fn an_unrecognized_disk_gets_no_plan() {
    let disk = FakeDisk::blank();
    disk.state().unrecognized = true;
    let rig = Rig::new(disk);
    let err = rig.node.plan(|| UUID.to_string()).unwrap_err();
    assert!(matches!(err, NodeError::UnrecognizedDisk { .. }), "{err}");
    assert!(err.to_string().contains("left untouched"));
    assert!(rig.disk.state().luks.is_none());
}

// ---- Init ----

#[test]
fn blank_then_init_formats_marks_and_initializes_the_cluster() {
    let rig = Rig::new(FakeDisk::blank());
    let mut lines = Vec::new();
    let ok = rig
        .node
        .init(&init_request(), &mut |l| lines.push(l.to_string()))
        .unwrap();
    assert_eq!(rig.node.lock().holder(), Some(holder::INIT));
    let (uuid, key) = rig.disk.state().luks.clone().expect("formatted");
    assert_eq!(key, master().state_disk_key(&uuid).expose());
    assert!(rig.disk.state().opened);
    assert_eq!(rig.disk.state().salt.as_deref(), Some(&[3u8; 32][..]));
    assert_eq!(rig.mkfs_runs(), ["/dev/mapper/double"]);
    let cluster_id = derive_cluster_id(master().measurement_secret().expose(), &[3; 32]);
    assert_eq!(rig.marks(), [cluster_id.to_vec()]);
    assert_eq!(ok.cluster_id, cluster_id);
    assert_eq!(
        ok.owner_id,
        confboot_kms::owner_id(
            master().measurement_secret().expose(),
            &MeasurementSalt::new(vec![3; 32]).unwrap()
        )
    );
    assert_eq!(ok.kubeconfig, b"kind: Config");
    match &rig.node.cluster().calls()[..] {
        [RecordedCall::Init(p)] => {
            assert_eq!(p.cluster_name, "c1");
            assert_eq!(p.node_ip, "10.0.2.15");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        lines.first().unwrap(),
        &"nodelock taken: this node becomes the first control plane"
    );
    assert_eq!(lines.last().unwrap(), &"cluster initialized");
    assert!(rig.disk.state().bootstrapped, "the first boot is recorded");
    assert!(
        rig.mounts().is_empty(),
        "an Init without SSH users mounts nothing"
    );
}

/// An Init refused before the nodelock leaves the node exactly as it was.
fn assert_refused_untouched(rig: &Rig, err: &NodeError) {
    assert!(!err.is_final(), "{err}");
    assert!(!rig.node.lock().is_locked());
    assert!(rig.disk.untouched_blank());
    assert!(rig.marks().is_empty());
    assert!(rig.node.cluster().calls().is_empty());
    assert!(rig.mounts().is_empty());
    assert_eq!(snapshot(rig.state_fs.dir.path()), []);
    assert_eq!(
        std::fs::read_to_string(rig.root.path().join("etc/passwd")).unwrap(),
        "root:x:0:0:root:/:/bin/sh\n"
    );
}

#[test]
fn a_wrong_init_secret_changes_nothing() {
    let rig = Rig::new(FakeDisk::blank());
    let mut req = init_request();
    req.init_secret = b"guess".to_vec();
    let err = rig.node.init(&req, &mut no_log()).unwrap_err();
    assert_eq!(err, NodeError::WrongInitSecret);
    assert_refused_untouched(&rig, &err);
}

#[test]
fn a_node_without_an_init_secret_hash_takes_no_init() {
    let mut rig = Rig::new(FakeDisk::blank());
    rig.node.config.init_secret_hash = None;
    let err = rig.node.init(&init_request(), &mut no_log()).unwrap_err();
    assert_eq!(err, NodeError::InitNotConfigured);
    assert_refused_untouched(&rig, &err);
}

#[test]
fn malformed_init_fields_are_refused_before_the_nodelock() {
    type Spoil = fn(&mut InitRequest);
    let cases: [(&str, Spoil); 3] = [
        ("kms_uri", |r| {
            r.kms_uri = "kms://cluster-kms?key=short".into()
        }),
        ("storage_uri", |r| r.storage_uri = "s3://bucket".into()),
        ("measurement_salt", |r| r.measurement_salt = vec![1; 8]),
    ];
    for (field, spoil) in cases {
        let rig = Rig::new(FakeDisk::blank());
        let mut req = init_request();
        spoil(&mut req);
        let err = rig.node.init(&req, &mut no_log()).unwrap_err();
        assert!(
            matches!(&err, NodeError::InvalidArgument { field: f, .. } if *f == field),
            "{field}: {err:?}"
        );
        assert_refused_untouched(&rig, &err);
    }
}

#[test]
fn init_after_the_join_client_took_the_lock_is_refused() {
    let rig = Rig::new(FakeDisk::blank());
    let _join = rig.node.take_lock(holder::JOIN).unwrap();
    let err = rig.node.init(&init_request(), &mut no_log()).unwrap_err();
    assert_eq!(err, NodeError::AlreadyBootstrapping { holder: "join" });
    assert!(!err.is_final(), "the join flow goes on");
    assert!(rig.disk.untouched_blank());
    assert!(rig.marks().is_empty());
}

#[test]
fn init_failing_at_the_disk_is_final_and_marks_nothing() {
    let rig = Rig::new(FakeDisk::blank().failing(DiskFault::Format));
    let err = rig.node.init(&init_request(), &mut no_log()).unwrap_err();
    assert!(matches!(err, NodeError::Disk(DiskError::Io(_))), "{err:?}");
    assert!(err.is_final());
    assert!(rig.node.lock().is_locked(), "there is no way back");
    assert!(rig.marks().is_empty());
    assert!(rig.node.cluster().calls().is_empty());
}

#[test]
fn init_failing_to_keep_the_salt_is_final_and_marks_nothing() {
    let rig = Rig::new(FakeDisk::blank().failing(DiskFault::StoreSalt));
    let err = rig.node.init(&init_request(), &mut no_log()).unwrap_err();
    assert!(err.is_final(), "{err}");
    assert!(rig.marks().is_empty());
    assert!(rig.mkfs_runs().is_empty());
}

#[test]
fn init_failing_to_mark_is_final_and_starts_no_cluster() {
    let marker = FakeMarker {
        fail: true,
        ..Default::default()
    };
    let rig = Rig::with(FakeDisk::blank(), kubeadm(), marker);
    let err = rig.node.init(&init_request(), &mut no_log()).unwrap_err();
    assert!(matches!(err, NodeError::Mark(_)), "{err:?}");
    assert!(err.is_final());
    assert!(rig.node.cluster().calls().is_empty());
}

#[test]
fn init_failing_in_the_cluster_is_final() {
    let cluster = RecordingBackend::failing(ClusterError::Stopped);
    let rig = Rig::with(FakeDisk::blank(), cluster, FakeMarker::default());
    let err = rig.node.init(&init_request(), &mut no_log()).unwrap_err();
    assert_eq!(
        err,
        NodeError::Cluster {
            action: "init",
            error: ClusterError::Stopped
        }
    );
    assert!(err.is_final());
    assert_eq!(rig.marks().len(), 1, "marked before the cluster step");
    assert!(
        !rig.disk.state().bootstrapped,
        "an unfinished first boot is not recorded complete"
    );
}

#[test]
fn a_second_init_after_a_successful_one_is_refused() {
    let rig = Rig::new(FakeDisk::blank());
    rig.node.init(&init_request(), &mut no_log()).unwrap();
    let err = rig.node.init(&init_request(), &mut no_log()).unwrap_err();
    assert_eq!(err, NodeError::AlreadyBootstrapping { holder: "init" });
    assert_eq!(rig.disk.state().formats, 1);
    assert_eq!(rig.marks().len(), 1);
}

// ---- Join ----

#[test]
fn blank_then_join_formats_with_the_ticket_key_and_joins() {
    let rig = Rig::new(FakeDisk::blank());
    let (request, ticket) = (join_request(), join_ticket());
    rig.node
        .check_ticket(&request, &from_member(&ticket))
        .unwrap();
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    let outcome = rig
        .node
        .apply_ticket(&token, &checked(&rig, &request, &ticket))
        .unwrap();
    assert_eq!(outcome, Outcome::Joined);
    assert_eq!(
        rig.disk.state().luks,
        Some((UUID.to_string(), vec![0x42; 32]))
    );
    assert_eq!(rig.disk.state().salt.as_deref(), Some(&[5u8; 32][..]));
    assert_eq!(rig.mkfs_runs().len(), 1);
    assert_eq!(
        rig.marks(),
        [derive_cluster_id(&[6; 32], &[5; 32]).to_vec()]
    );
    match &rig.node.cluster().calls()[..] {
        [RecordedCall::Join(p)] => {
            assert_eq!(p.api_server_endpoint, "10.0.2.15:6443");
            assert_eq!(p.token.expose(), b"abcdef.0123456789abcdef");
            assert!(!p.is_control_plane);
        }
        other => panic!("{other:?}"),
    }
    assert!(rig.disk.state().bootstrapped, "the first boot is recorded");
}

#[test]
fn an_interrupted_first_boot_is_finished_not_rejoined() {
    // Killed between formatting and the cluster step: LUKS, no record.
    let rig = Rig::new(FakeDisk::interrupted(UUID, &[0x42; 32]));
    let plan = rig
        .node
        .plan(|| panic!("the header's UUID is used"))
        .unwrap();
    assert_eq!(plan.admin_api, AdminApi::Init);
    assert_eq!(
        plan.request,
        join_request(),
        "a join ticket for the same UUID"
    );
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    let outcome = rig
        .node
        .apply_ticket(&token, &checked(&rig, &plan.request, &join_ticket()))
        .unwrap();
    assert_eq!(outcome, Outcome::Joined);
    let s = rig.disk.state();
    assert_eq!(s.formats, 0, "the same UUID gives the same key: opened");
    assert!(s.opened && s.bootstrapped);
    drop(s);
    assert!(rig.mkfs_runs().is_empty(), "the file system is kept");
    assert_eq!(rig.node.cluster().calls().len(), 1, "kubeadm join runs");
}

#[test]
fn a_recorded_first_boot_rejoins() {
    let rig = Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32])));
    assert_eq!(
        rig.node.plan(|| unreachable!()).unwrap().request,
        TicketRequest::Rejoin {
            disk_uuid: UUID.into()
        }
    );
}

#[test]
fn a_join_takes_only_the_kubelet_certificate_it_asked_for() {
    use confboot_cluster::kubelet_cert::{
        DEFAULT_KUBELET_CERT_VALIDITY, KubeletCertRequest, KubeletCertSigner,
    };
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let signer = KubeletCertSigner::new(
        &ca.pem(),
        &ca_key.serialize_pem(),
        DEFAULT_KUBELET_CERT_VALIDITY,
    )
    .unwrap();
    let ip = "10.0.2.15".parse().unwrap();
    let request = KubeletCertRequest::new("worker-1", &[ip]).unwrap();
    let (key_pem, csr_der) = (request.key_pem.clone(), request.csr_der.clone());
    let other_csr = KubeletCertRequest::new("worker-1", &[ip]).unwrap().csr_der;
    let now = std::time::SystemTime::now();
    let with_cert = |cert: Vec<u8>| {
        let mut t = join_response();
        t.kubelet_cert = cert;
        Ticket::Join(t)
    };
    let rig = |request: Option<KubeletCertRequest>| {
        let mut rig = Rig::new(FakeDisk::blank());
        rig.node.config.kubelet_request = request;
        rig
    };
    let asked = Some(request);
    // Refused before the nodelock: none when one was asked for, one for
    // another key, one when none was asked for.
    for (request, cert) in [
        (asked.clone(), Vec::new()),
        (asked.clone(), signer.sign(&other_csr, now).unwrap()),
        (None, signer.sign(&csr_der, now).unwrap()),
    ] {
        let rig = rig(request);
        let err = rig
            .node
            .check_ticket(&join_request(), &from_member(&with_cert(cert)))
            .unwrap_err();
        assert!(matches!(err, NodeError::BadTicket(_)), "{err:?}");
        assert!(rig.disk.untouched_blank());
    }
    // The one asked for goes to the cluster step with the node's key.
    let rig = rig(asked);
    assert_eq!(rig.node.kubelet_csr(), csr_der);
    let cert = signer.sign(&csr_der, now).unwrap();
    let ticket = with_cert(cert.clone());
    rig.node
        .check_ticket(&join_request(), &from_member(&ticket))
        .unwrap();
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    rig.node
        .apply_ticket(&token, &checked(&rig, &join_request(), &ticket))
        .unwrap();
    match &rig.node.cluster().calls()[..] {
        [RecordedCall::Join(p)] => {
            assert_eq!(p.node_name, "worker-1");
            let kc = p.kubelet_cert.as_ref().unwrap();
            assert_eq!(kc.cert_der, cert);
            assert_eq!(kc.key_pem.expose(), key_pem.as_bytes());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unusable_tickets_are_thrown_away_before_the_nodelock() {
    let rig = Rig::new(FakeDisk::blank());
    let mut short_key = join_response();
    short_key.state_disk_key = SecretBytes::new(vec![1; 16]);
    let mut short_salt = join_response();
    short_salt.measurement_salt = vec![1; 4];
    let (short_key, short_salt) = (Ticket::Join(short_key), Ticket::Join(short_salt));
    for (request, ticket) in [
        (join_request(), short_key),
        (join_request(), short_salt),
        (join_request(), rejoin_ticket(&[0x42; 32])),
        (
            TicketRequest::Rejoin {
                disk_uuid: UUID.into(),
            },
            join_ticket(),
        ),
        (
            TicketRequest::Rejoin {
                disk_uuid: UUID.into(),
            },
            rejoin_ticket(&[]),
        ),
    ] {
        let err = rig
            .node
            .check_ticket(&request, &from_member(&ticket))
            .unwrap_err();
        assert!(matches!(err, NodeError::BadTicket(_)), "{err:?}");
        assert!(!err.is_final());
    }
    assert!(!rig.node.lock().is_locked());
    assert!(rig.disk.untouched_blank());
}

#[test]
fn a_join_ticket_for_another_disk_opens_nothing() {
    // The disk got a header (another UUID) after the plan was made.
    let rig = Rig::new(FakeDisk::luks(OTHER_UUID, &[0x42; 32], Some(&[5; 32])));
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    let err = rig
        .node
        .apply_ticket(&token, &checked(&rig, &join_request(), &join_ticket()))
        .unwrap_err();
    assert!(
        matches!(err, NodeError::Disk(DiskError::KeyUnavailable(_))),
        "{err:?}"
    );
    assert!(!rig.disk.state().opened);
    assert!(rig.marks().is_empty());
}

// ---- Rejoin ----

/// The header's salt token is the host's to rewrite: a rejoin marks the
/// node with the cluster id of the ticket's salt, which the join service's
/// own mark proves, and never reads the header's.
#[test]
fn luks_then_rejoin_opens_and_marks_with_the_ticket_salt() {
    let rig = Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[9; 32])));
    let request = TicketRequest::Rejoin {
        disk_uuid: UUID.into(),
    };
    let ticket = rejoin_ticket(&[0x42; 32]);
    rig.node
        .check_ticket(&request, &from_member(&ticket))
        .unwrap();
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    assert_eq!(
        rig.node
            .apply_ticket(&token, &checked(&rig, &request, &ticket))
            .unwrap(),
        Outcome::Rejoined
    );
    assert!(rig.disk.state().opened);
    assert_eq!(rig.disk.state().formats, 0);
    assert!(rig.mkfs_runs().is_empty(), "the file system is kept");
    assert_eq!(
        rig.marks(),
        [derive_cluster_id(&[6; 32], &[5; 32]).to_vec()]
    );
    assert_eq!(
        rig.disk.state().salt_reads,
        0,
        "the header's salt is not read"
    );
    assert!(rig.node.cluster().calls().is_empty());
}

/// A host that rewrites the header's salt between the ticket's check and
/// its use does not make the node mark another cluster than the one
/// checked: the mark's salt is the ticket's.
#[test]
fn a_salt_rewritten_between_the_check_and_the_mark_is_not_used() {
    let rig = Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32])));
    let request = TicketRequest::Rejoin {
        disk_uuid: UUID.into(),
    };
    let ticket = rejoin_ticket(&[0x42; 32]);
    rig.node
        .check_ticket(&request, &from_member(&ticket))
        .unwrap();
    rig.disk.state().salt = Some(vec![9; 32]);
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    assert_eq!(
        rig.node
            .apply_ticket(&token, &checked(&rig, &request, &ticket))
            .unwrap(),
        Outcome::Rejoined
    );
    assert_eq!(
        rig.marks(),
        [derive_cluster_id(&[6; 32], &[5; 32]).to_vec()],
        "the mark is the checked cluster's"
    );
}

#[test]
fn a_rejoin_ticket_with_a_wrong_key_never_formats() {
    let rig = Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32])));
    let request = TicketRequest::Rejoin {
        disk_uuid: UUID.into(),
    };
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    let err = rig
        .node
        .apply_ticket(
            &token,
            &checked(&rig, &request, &rejoin_ticket(&[0x13; 32])),
        )
        .unwrap_err();
    assert_eq!(err, NodeError::Disk(DiskError::WrongKey));
    assert!(err.is_final() && err.is_wrong_key());
    let s = rig.disk.state();
    assert_eq!(s.luks, Some((UUID.to_string(), vec![0x42; 32])));
    assert!(!s.opened);
    assert_eq!(s.formats, 0);
    drop(s);
    assert!(rig.marks().is_empty());
}

#[test]
fn a_rejoin_ticket_without_a_salt_is_thrown_away() {
    // A header without a salt token rejoins: the salt is the ticket's.
    let rig = Rig::new(FakeDisk::luks(UUID, &[0x42; 32], None));
    let request = TicketRequest::Rejoin {
        disk_uuid: UUID.into(),
    };
    let Ticket::Rejoin(mut saltless) = rejoin_ticket(&[0x42; 32]) else {
        unreachable!()
    };
    for salt in [vec![], vec![5; 8], vec![5; 257]] {
        saltless.measurement_salt = salt;
        let err = rig
            .node
            .check_ticket(&request, &from_member(&Ticket::Rejoin(saltless.clone())))
            .unwrap_err();
        assert!(matches!(err, NodeError::BadTicket(_)), "{err:?}");
        assert!(!err.is_final());
    }
    assert!(!rig.node.lock().is_locked());
    assert!(!rig.disk.state().opened);
    let ticket = rejoin_ticket(&[0x42; 32]);
    rig.node
        .check_ticket(&request, &from_member(&ticket))
        .unwrap();
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    rig.node
        .apply_ticket(&token, &checked(&rig, &request, &ticket))
        .unwrap();
    assert!(rig.disk.state().opened);
}

// ---- Recover ----

fn recoverable_rig() -> (Rig, MasterSecret) {
    let m = master();
    let key = m.state_disk_key(UUID);
    (
        // The header keeps a salt the admin never made (the host's).
        Rig::new(FakeDisk::luks(UUID, key.expose(), Some(&[9; 32]))),
        m,
    )
}

#[test]
fn luks_then_recover_opens_and_marks() {
    let (rig, m) = recoverable_rig();
    rig.node.recover(&recover_request(&m)).unwrap();
    assert_eq!(rig.node.lock().holder(), Some(holder::RECOVER));
    assert!(rig.disk.state().opened);
    assert_eq!(
        rig.marks(),
        [derive_cluster_id(m.measurement_secret().expose(), &[5; 32]).to_vec()]
    );
    assert!(rig.node.cluster().calls().is_empty());
}

#[test]
fn recover_with_a_wrong_master_secret_changes_nothing() {
    let (rig, _) = recoverable_rig();
    let wrong = MasterSecret::new(vec![8; 32], vec![9; 32]).unwrap();
    let err = rig.node.recover(&recover_request(&wrong)).unwrap_err();
    assert_eq!(err, NodeError::DiskRead(DiskError::WrongKey));
    assert!(err.is_wrong_key());
    assert!(!err.is_final(), "the admin may try again");
    assert!(!rig.node.lock().is_locked(), "a rejoin may still win");
    assert!(!rig.disk.state().opened);
    assert!(rig.marks().is_empty());
}

#[test]
fn recover_on_a_blank_disk_has_nothing_to_do() {
    let rig = Rig::new(FakeDisk::blank());
    let err = rig.node.recover(&recover_request(&master())).unwrap_err();
    assert_eq!(err, NodeError::NothingToRecover);
    assert!(rig.disk.untouched_blank());
}

#[test]
fn recover_after_a_rejoin_took_the_lock_is_refused() {
    let (rig, m) = recoverable_rig();
    let _rejoin = rig.node.take_lock(holder::JOIN).unwrap();
    let err = rig.node.recover(&recover_request(&m)).unwrap_err();
    assert_eq!(err, NodeError::AlreadyBootstrapping { holder: "join" });
    assert!(!rig.disk.state().opened, "the disk is the rejoin's");
}

#[test]
fn recover_failing_past_the_lock_is_final() {
    let m = master();
    let key = m.state_disk_key(UUID);
    let rig = Rig::new(FakeDisk::luks(UUID, key.expose(), Some(&[5; 32])).failing(DiskFault::Open));
    let err = rig.node.recover(&recover_request(&m)).unwrap_err();
    assert!(matches!(err, NodeError::Disk(DiskError::Io(_))), "{err:?}");
    assert!(err.is_final());
    assert!(rig.marks().is_empty());
}

/// The host's attack on Recover: it formats a disk with a master secret of
/// its own, keeps its own SSH users on it, boots the genuine image (the
/// admin's command line, the admin's init-secret hash) and sends Recover
/// with its master secret, without the admin's init secret. The node reads
/// nothing from that disk: not opened, no user created, nothing mounted,
/// PCR 15 not marked with the host's cluster.
#[test]
fn a_recover_without_the_admins_init_secret_reads_nothing_from_the_hosts_disk() {
    let host = MasterSecret::new(vec![0x66; 32], vec![0x77; 32]).unwrap();
    let hosts_disk = || FakeDisk::luks(UUID, host.state_disk_key(UUID).expose(), Some(&[0x55; 32]));
    let hosts_state_fs = || {
        let dir = TempDir::new("hosts-state-fs");
        let mallory = validate_ssh_users([("mallory", ssh_key(9).as_str())]).unwrap();
        keep_users(dir.path(), host.state_disk_key(UUID).expose(), &mallory);
        Arc::new(dir)
    };
    let boot = || {
        Rig::booting(
            hosts_disk(),
            kubeadm(),
            FakeMarker::default(),
            hosts_state_fs(),
            fresh_root(),
        )
    };
    for init_secret in [&b""[..], b"the host's guess at the init secret"] {
        let rig = boot();
        let err = rig
            .node
            .recover(&recover_request_with(&host, init_secret))
            .unwrap_err();
        assert_eq!(err, NodeError::WrongInitSecret);
        assert_eq!(
            crate::server::status(&err).code,
            confboot_wire::Code::PermissionDenied
        );
        assert!(!err.is_final(), "the admin may still recover the node");
        assert_eq!(rig.disk.state().reads, 0, "nothing read from the disk");
        assert!(!rig.disk.state().opened);
        assert!(!rig.node.lock().is_locked());
        assert!(rig.marks().is_empty(), "PCR 15 not marked");
        assert!(rig.mounts().is_empty());
        assert!(!has_user(rig.root.path(), "mallory", &ssh_key(9)));
        assert_eq!(
            std::fs::read_to_string(rig.root.path().join("etc/passwd")).unwrap(),
            "root:x:0:0:root:/:/bin/sh\n"
        );
    }
    // The same Recover with the admin's init secret goes through: the init
    // secret is what stops the host (the admin would not recover a disk
    // it does not know, and the CLI checks the node's attestation first).
    let rig = boot();
    rig.node
        .recover(&recover_request_with(&host, INIT_SECRET))
        .unwrap();
    assert!(has_user(rig.root.path(), "mallory", &ssh_key(9)));
    // Marked with the admin's salt, never the one the host's header keeps.
    assert_eq!(
        rig.marks(),
        [derive_cluster_id(host.measurement_secret().expose(), &[5; 32]).to_vec()]
    );
}

#[test]
fn a_node_without_an_init_secret_hash_takes_no_recover() {
    let (mut rig, m) = recoverable_rig();
    rig.node.config.init_secret_hash = None;
    let err = rig.node.recover(&recover_request(&m)).unwrap_err();
    assert_eq!(err, NodeError::RecoverNotConfigured);
    assert_eq!(
        crate::server::status(&err).code,
        confboot_wire::Code::FailedPrecondition
    );
    assert_eq!(rig.disk.state().reads, 0);
    assert!(!rig.disk.state().opened);
    assert!(rig.marks().is_empty());
}

#[test]
fn recovers_are_served_one_at_a_time() {
    let (rig, m) = recoverable_rig();
    {
        let _serving = rig.node.recover_guard();
        let err = rig.node.recover(&recover_request(&m)).unwrap_err();
        assert_eq!(err, NodeError::RecoverBusy);
        assert_eq!(
            crate::server::status(&err).code,
            confboot_wire::Code::Unavailable
        );
        assert!(!err.is_final());
        assert_eq!(rig.disk.state().reads, 0, "no hash, no disk read");
        assert!(!rig.node.lock().is_locked());
    }
    rig.node.recover(&recover_request(&m)).unwrap();
    assert!(rig.disk.state().opened);
}

/// The host formats nothing here: it only rewrites the salt token of a
/// member's disk, and then the admin recovers the node. The mark is the
/// cluster id of the admin's salt; the header's is never read.
#[test]
fn recover_marks_with_the_admins_salt_and_never_reads_the_headers() {
    let (rig, m) = recoverable_rig();
    rig.node.recover(&recover_request(&m)).unwrap();
    assert_eq!(rig.disk.state().salt_reads, 0);
    let host_cluster = derive_cluster_id(m.measurement_secret().expose(), &[9; 32]);
    assert_ne!(rig.marks(), [host_cluster.to_vec()]);
}

#[test]
fn a_recover_without_a_salt_is_refused_before_the_disk_is_read() {
    let (rig, m) = recoverable_rig();
    for salt in [vec![], vec![5; 31], vec![5; 257]] {
        let mut req = recover_request(&m);
        req.measurement_salt = salt;
        let err = rig.node.recover(&req).unwrap_err();
        assert!(
            matches!(
                err,
                NodeError::InvalidArgument {
                    field: "measurement_salt",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.is_final());
    }
    assert_eq!(rig.disk.state().reads, 0);
    assert!(!rig.node.lock().is_locked());
    assert!(rig.marks().is_empty());
}

#[test]
fn only_errors_past_the_nodelock_are_final() {
    let refusals = [
        NodeError::InitNotConfigured,
        NodeError::WrongInitSecret,
        NodeError::RecoverNotConfigured,
        NodeError::RecoverBusy,
        NodeError::AlreadyBootstrapping { holder: "join" },
        NodeError::NothingToRecover,
        NodeError::BadTicket("x".into()),
        NodeError::UnrecognizedDisk { reason: "x".into() },
        NodeError::DiskRead(DiskError::WrongKey),
    ];
    assert!(refusals.iter().all(|e| !e.is_final()));
    let finals = [
        NodeError::Disk(DiskError::WrongKey),
        NodeError::Mark(AttestationError::Issue(Detail::with(
            &VtpmRefusal::Tpm,
            "x",
        ))),
        NodeError::Cluster {
            action: "join",
            error: ClusterError::Stopped,
        },
    ];
    assert!(finals.iter().all(NodeError::is_final));
}

#[test]
fn a_ticket_from_a_service_that_is_no_member_of_its_cluster_is_thrown_away() {
    let rig = Rig::new(FakeDisk::blank());
    let ticket = join_ticket();
    let another_cluster = marked_pcr15(&derive_cluster_id(&[6; 32], &[7; 32])).to_vec();
    for issued in [
        // The host's own service on the node's image: never marked.
        issued_with_pcr15(&ticket, Some(vec![0; 32])),
        // A member of another cluster.
        issued_with_pcr15(&ticket, Some(another_cluster)),
        // An attestation without PCR 15 (another variant).
        issued_with_pcr15(&ticket, None),
        // No attestation at all.
        IssuedTicket {
            ticket: ticket.clone(),
            service: None,
        },
    ] {
        let err = rig.node.check_ticket(&join_request(), &issued).unwrap_err();
        assert!(matches!(err, NodeError::JoinServiceNotMember(_)), "{err:?}");
        assert!(!err.is_final());
    }
    assert!(!rig.node.lock().is_locked());
    assert!(rig.disk.untouched_blank());
    assert!(rig.marks().is_empty());
}

#[test]
fn a_rejoin_ticket_is_checked_against_its_own_salt_whatever_the_header_says() {
    let request = TicketRequest::Rejoin {
        disk_uuid: UUID.into(),
    };
    let ticket = rejoin_ticket(&[0x42; 32]);
    // The ticket's salt is [5; 32]: a member of that cluster is taken,
    // whatever salt the header keeps.
    let rig = Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[9; 32])));
    rig.node
        .check_ticket(&request, &from_member(&ticket))
        .unwrap();
    assert_eq!(rig.disk.state().salt_reads, 0);
    // A ticket with another salt than the service's mark proves: refused.
    let Ticket::Rejoin(mut other) = ticket else {
        unreachable!()
    };
    other.measurement_salt = vec![9; 32];
    let err = rig
        .node
        .check_ticket(&request, &from_member(&Ticket::Rejoin(other)))
        .unwrap_err();
    assert!(matches!(err, NodeError::JoinServiceNotMember(_)), "{err:?}");
    assert!(!rig.node.lock().is_locked());
    assert!(!rig.disk.state().opened);
}

#[test]
fn the_insecure_setting_takes_a_ticket_from_an_unattested_service() {
    let rig = Rig::new(FakeDisk::blank());
    let node = Node::new(
        StateDisk::new(rig.disk.clone()),
        None,
        kubeadm(),
        FakeMarker::default(),
        NodeConfig {
            init_secret_hash: None,
            kubelet_request: None,
            node_ip: "10.0.2.15".into(),
            is_control_plane: false,
            join_service_check: JoinServiceCheck::InsecureNone,
        },
    );
    let issued = IssuedTicket {
        ticket: join_ticket(),
        service: None,
    };
    node.check_ticket(&join_request(), &issued).unwrap();
}

#[test]
fn init_secrets_are_checked_one_at_a_time_and_not_while_bootstrapping() {
    let rig = Rig::new(FakeDisk::blank());
    let mut req = init_request();
    req.init_secret = b"a guess".to_vec();
    // While one slow hash runs, another Init is turned away at once.
    {
        let _checking = rig.node.init_check_guard();
        assert_eq!(
            rig.node.check_init(&req).err().unwrap(),
            NodeError::InitCheckBusy
        );
    }
    assert_eq!(
        rig.node.check_init(&req).err().unwrap(),
        NodeError::WrongInitSecret
    );
    // Once a flow holds the nodelock, no hash is computed at all.
    let _token = rig.node.take_lock(holder::JOIN).unwrap();
    assert!(matches!(
        rig.node.check_init(&req).err().unwrap(),
        NodeError::AlreadyBootstrapping { holder: "join" }
    ));
    assert!(rig.disk.untouched_blank());
}

// ---- Races ----

/// Rounds of [`init_and_join_race_with_exactly_one_winner`]: a few hundred
/// in the normal suite; `CONFBOOT_RACE_ROUNDS=10000` for the campaign
/// (RELIABILITY.md).
fn race_rounds() -> usize {
    std::env::var("CONFBOOT_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// The admin's Init and the join client's ticket race on a blank node, the
/// whole core each (the init-secret check, the ticket checks, the nodelock,
/// format, mark, cluster step), released together with the join side
/// delayed by a seeded amount around the init check's cost, so both orders
/// happen. Every round: exactly one winner, whose steps all ran once; the
/// loser touched nothing (one format, one file system, one mark, one
/// cluster call, all of the winner's kind).
#[test]
fn init_and_join_race_with_exactly_one_winner() {
    use std::sync::Barrier;
    use std::time::Instant;

    // What one init-secret check costs here: the join side's delay is drawn
    // from 0 to twice that.
    let check_cost = {
        let rig = Rig::new(FakeDisk::blank());
        let t = Instant::now();
        rig.node.init(&init_request(), &mut no_log()).unwrap();
        t.elapsed()
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut wins = [0usize; 2];
    let rounds = race_rounds();
    for round in 0..rounds {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = check_cost.mul_f64((seed % 2000) as f64 / 1000.0);
        let rig = Rig::new(FakeDisk::blank());
        let barrier = Barrier::new(2);
        let (request, ticket) = (join_request(), join_ticket());
        let (init, join) = std::thread::scope(|s| {
            let init = s.spawn(|| {
                barrier.wait();
                rig.node.init(&init_request(), &mut no_log())
            });
            let join = s.spawn(|| {
                barrier.wait();
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                rig.node.check_ticket(&request, &from_member(&ticket))?;
                let token = rig.node.take_lock(holder::JOIN)?;
                rig.node
                    .apply_ticket(&token, &checked(&rig, &request, &ticket))
            });
            (init.join().unwrap(), join.join().unwrap())
        });
        let context = format!("round {round} (join delayed {delay:?})");
        let (uuid, key) = rig.disk.state().luks.clone().expect("formatted");
        match (&init, &join) {
            (Ok(_), Err(e)) => {
                wins[0] += 1;
                assert_eq!(
                    *e,
                    NodeError::AlreadyBootstrapping { holder: "init" },
                    "{context}"
                );
                assert_eq!(key, master().state_disk_key(&uuid).expose(), "{context}");
                assert!(
                    matches!(&rig.node.cluster().calls()[..], [RecordedCall::Init(_)]),
                    "{context}"
                );
            }
            (Err(e), Ok(Outcome::Joined)) => {
                wins[1] += 1;
                assert_eq!(
                    *e,
                    NodeError::AlreadyBootstrapping { holder: "join" },
                    "{context}"
                );
                assert_eq!((uuid.as_str(), key), (UUID, vec![0x42; 32]), "{context}");
                assert!(
                    matches!(&rig.node.cluster().calls()[..], [RecordedCall::Join(_)]),
                    "{context}"
                );
            }
            other => panic!("{context}: not exactly one winner: {other:?}"),
        }
        assert_eq!(rig.mkfs_runs().len(), 1, "{context}: one file system");
        assert_eq!(rig.marks().len(), 1, "{context}: one mark");
        assert!(rig.disk.state().bootstrapped, "{context}");
    }
    eprintln!(
        "{rounds} races: Init won {}, the join ticket won {} (init-secret check {:?})",
        wins[0], wins[1], check_cost
    );
    assert!(
        rounds < 50 || (wins[0] > 0 && wins[1] > 0),
        "both orders must happen: {wins:?}"
    );
}

// ---- SSH users ----

/// An OpenSSH ed25519 public key line (its 32 bytes are `seed`).
fn ssh_key(seed: u8) -> String {
    let mut blob = Vec::new();
    for f in [&b"ssh-ed25519"[..], &[seed; 32][..]] {
        blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
        blob.extend_from_slice(f);
    }
    format!(
        "ssh-ed25519 {} admin@laptop",
        confboot_util::base64::encode(&blob)
    )
}

fn with_ssh_users(mut req: InitRequest, users: &[(&str, String)]) -> InitRequest {
    req.ssh_user_keys = users
        .iter()
        .map(|(name, key)| confboot_proto::init::SshUserKey {
            username: name.to_string(),
            public_key: key.clone(),
        })
        .collect();
    req
}

fn alice_and_bob() -> InitRequest {
    with_ssh_users(
        init_request(),
        &[("alice", ssh_key(1)), ("bob", ssh_key(2))],
    )
}

/// One file or directory: path, mode, owner, inode, mtime (s, ns), content.
type FileState = (PathBuf, u32, u32, u64, i64, i64, Vec<u8>);

/// Every file and directory below `dir`: path, mode, owner, inode, mtime
/// and content. Equal snapshots: nothing was written, not even the same
/// bytes again.
fn snapshot(dir: &Path) -> Vec<FileState> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            if meta.is_dir() {
                todo.push(path.clone());
            }
            out.push((
                path.strip_prefix(dir).unwrap().to_path_buf(),
                meta.mode(),
                meta.uid(),
                meta.ino(),
                meta.mtime(),
                meta.mtime_nsec(),
                content,
            ));
        }
    }
    out.sort();
    out
}

/// Whether `root` holds `name` as created, with exactly `key` authorized.
fn has_user(root: &Path, name: &str, key: &str) -> bool {
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    let entry = passwd.lines().any(|l| {
        l.starts_with(&format!("{name}:"))
            && l.ends_with(&format!(":confboot SSH user:/home/{name}:/bin/sh"))
    });
    let keys = std::fs::read_to_string(root.join(format!("home/{name}/.ssh/authorized_keys")));
    entry && keys.is_ok_and(|k| k == format!("{key}\n"))
}

/// The key of `rig`'s disk (formatted by an Init with master()).
fn disk_key(rig: &Rig) -> Vec<u8> {
    let uuid = rig.disk.state().luks.clone().unwrap().0;
    master().state_disk_key(&uuid).expose().to_vec()
}

/// The SSH users the state file system in `dir` keeps, read as the node
/// reads them (their MAC checked) for the disk key `key`.
fn kept_users(dir: &Path, key: &[u8]) -> Option<Vec<SshUser>> {
    trusted::StateFiles::open(dir, key)
        .unwrap()
        .read(STORED_SSH_USERS_FILE)
        .unwrap()
        .map(|body| confboot_sys::ssh_users::parse_ssh_users_config(&body).unwrap())
}

/// Keeps `users` in `dir` as the node does (sealed, the generation stepped).
fn keep_users(dir: &Path, key: &[u8], users: &[SshUser]) {
    trusted::StateFiles::open(dir, key)
        .unwrap()
        .write(
            STORED_SSH_USERS_FILE,
            confboot_sys::ssh_users::ssh_users_config(users).as_bytes(),
        )
        .unwrap();
}

/// Rejoins `rig`'s node (its disk was formatted by an Init with master()).
fn rejoin(rig: &Rig) {
    let uuid = rig.disk.state().luks.clone().unwrap().0;
    let request = TicketRequest::Rejoin {
        disk_uuid: uuid.clone(),
    };
    let ticket = rejoin_ticket(master().state_disk_key(&uuid).expose());
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    assert_eq!(
        rig.node
            .apply_ticket(&token, &checked(rig, &request, &ticket))
            .unwrap(),
        Outcome::Rejoined
    );
}

#[test]
fn init_keeps_its_ssh_users_on_the_state_disk_and_creates_them() {
    let rig = Rig::new(FakeDisk::blank());
    let mut lines = Vec::new();
    rig.node
        .init(&alice_and_bob(), &mut |l| lines.push(l.to_string()))
        .unwrap();
    assert!(has_user(rig.root.path(), "alice", &ssh_key(1)));
    assert!(has_user(rig.root.path(), "bob", &ssh_key(2)));
    // Kept inside the encrypted file system (mounted from the decrypted
    // device, then unmounted), not in the header.
    assert_eq!(rig.mounts(), ["mount /dev/mapper/double", "unmount"]);
    let kept = kept_users(rig.state_fs.dir.path(), &disk_key(&rig)).unwrap();
    let names: Vec<_> = kept.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["alice", "bob"]);
    assert!(
        lines.contains(&"SSH users: created [alice, bob], unchanged []".to_string()),
        "{lines:?}"
    );
    assert!(rig.disk.state().bootstrapped);
}

#[test]
fn an_init_without_users_clears_what_an_unfinished_init_kept() {
    let state_fs = Arc::new(TempDir::new("state-fs"));
    let disk = FakeDisk::blank();
    // First boot: Init with two users, cut short in the cluster step.
    let first = Rig::booting(
        disk.clone(),
        RecordingBackend::failing(ClusterError::Stopped),
        FakeMarker::default(),
        Arc::clone(&state_fs),
        fresh_root(),
    );
    first
        .node
        .init(&alice_and_bob(), &mut no_log())
        .unwrap_err();
    let key = disk_key(&first);
    let kept = |dir: &Path| kept_users(dir, &key);
    assert_eq!(kept(state_fs.path()).unwrap().len(), 2);
    // Next boot: the admin's Init (the same master secret) has no users.
    let second = Rig::booting(
        disk.clone(),
        kubeadm(),
        FakeMarker::default(),
        Arc::clone(&state_fs),
        fresh_root(),
    );
    let mut lines = Vec::new();
    second
        .node
        .init(&init_request(), &mut |l| lines.push(l.to_string()))
        .unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("earlier, unfinished Init kept (2) is cleared")),
        "{lines:?}"
    );
    assert_eq!(kept(state_fs.path()), Some(Vec::new()));
    assert!(!has_user(second.root.path(), "alice", &ssh_key(1)));
    // A later boot creates nobody.
    let third = Rig::booting(
        disk,
        kubeadm(),
        FakeMarker::default(),
        Arc::clone(&state_fs),
        fresh_root(),
    );
    rejoin(&third);
    assert!(!has_user(third.root.path(), "alice", &ssh_key(1)));
    assert!(!third.root.path().join("home/alice").exists());
}

#[test]
fn invalid_ssh_users_are_refused_before_anything_is_written() {
    let many: Vec<(&str, String)> = (0..=confboot_sys::ssh_users::MAX_SSH_USERS)
        .map(|i| (&*Box::leak(format!("u{i}").into_boxed_str()), ssh_key(1)))
        .collect();
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (vec![("root", ssh_key(1))], "system account"),
        (vec![("Alice", ssh_key(1))], "must begin with a-z"),
        (vec![("al:ice", ssh_key(1))], "only a-z"),
        (
            vec![("alice", "ssh-ed25519 AAAA".into())],
            "invalid public key for alice",
        ),
        (
            vec![("alice", format!("{}\nssh-rsa AAAA", ssh_key(1)))],
            "invalid public key for alice",
        ),
        (
            vec![("alice", ssh_key(1)), ("alice", ssh_key(2))],
            "configured twice",
        ),
        (many, "more than 32"),
    ];
    for (users, reason) in cases {
        let rig = Rig::new(FakeDisk::blank());
        let err = rig
            .node
            .init(&with_ssh_users(init_request(), &users), &mut no_log())
            .unwrap_err();
        match &err {
            NodeError::InvalidArgument {
                field: "ssh_user_keys",
                reason: r,
            } => assert!(r.contains(reason), "{r}"),
            other => panic!("{reason}: {other:?}"),
        }
        assert_eq!(
            crate::server::status(&err).code,
            confboot_wire::Code::InvalidArgument
        );
        assert_refused_untouched(&rig, &err);
    }
}

#[test]
fn a_node_with_no_state_file_system_refuses_ssh_users_up_front() {
    let mut rig = Rig::new(FakeDisk::blank());
    rig.node.mkfs = None;
    let err = rig.node.init(&alice_and_bob(), &mut no_log()).unwrap_err();
    assert!(err.to_string().contains("no state file system"), "{err}");
    assert_refused_untouched(&rig, &err);
}

#[test]
fn every_later_boot_creates_the_kept_users_again() {
    let first = Rig::new(FakeDisk::blank());
    first.node.init(&alice_and_bob(), &mut no_log()).unwrap();

    // A reboot: a fresh root (the initramfs), the same state disk.
    let second = first.reboot(fresh_root());
    rejoin(&second);
    assert!(has_user(second.root.path(), "alice", &ssh_key(1)));
    assert!(has_user(second.root.path(), "bob", &ssh_key(2)));
    assert_eq!(second.mounts(), ["mount /dev/mapper/double", "unmount"]);

    // Recover opens the disk too, and creates them as well.
    let third = first.reboot(fresh_root());
    third.node.recover(&recover_request(&master())).unwrap();
    assert!(has_user(third.root.path(), "alice", &ssh_key(1)));
    assert_eq!(third.mounts(), ["mount /dev/mapper/double", "unmount"]);
}

#[test]
fn an_unmodified_second_boot_changes_nothing() {
    let first = Rig::new(FakeDisk::blank());
    first.node.init(&alice_and_bob(), &mut no_log()).unwrap();
    let root = Arc::clone(&first.root);
    let (before_root, before_state) = (snapshot(root.path()), snapshot(first.state_fs.dir.path()));
    // A boot that finds the users in place (a root that survived, as on
    // a node that runs from a disk) leaves every byte and inode alone.
    let second = first.reboot(Arc::clone(&root));
    rejoin(&second);
    assert_eq!(snapshot(root.path()), before_root);
    assert_eq!(snapshot(second.state_fs.dir.path()), before_state);
    let third = first.reboot(Arc::clone(&root));
    let token = third.node.take_lock(holder::JOIN).unwrap();
    third.disk.state().opened = true;
    let report = third
        .node
        .apply_kept_ssh_users(&token, &disk_key(&third))
        .unwrap()
        .unwrap();
    assert!(
        report.created.is_empty() && report.conflicts.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.unchanged.len(), 2);
    assert_eq!(snapshot(root.path()), before_root);
    assert_eq!(snapshot(second.state_fs.dir.path()), before_state);
}

#[test]
fn a_user_that_exists_otherwise_is_reported_not_overwritten() {
    let rig = Rig::new(FakeDisk::blank());
    let passwd = "root:x:0:0:root:/:/bin/sh\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\n";
    std::fs::write(rig.root.path().join("etc/passwd"), passwd).unwrap();
    let mut lines = Vec::new();
    rig.node
        .init(&alice_and_bob(), &mut |l| lines.push(l.to_string()))
        .unwrap();
    assert!(
        std::fs::read_to_string(rig.root.path().join("etc/passwd"))
            .unwrap()
            .starts_with(passwd),
        "alice's entry is kept as it was"
    );
    assert!(has_user(rig.root.path(), "bob", &ssh_key(2)));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("SSH users: warning: user alice exists with other settings")),
        "{lines:?}"
    );
}

#[test]
fn a_corrupt_kept_file_is_refused_and_the_node_stops() {
    let first = Rig::new(FakeDisk::blank());
    first.node.init(&alice_and_bob(), &mut no_log()).unwrap();
    let kept = first.state_fs.dir.path().join(STORED_SSH_USERS_FILE);
    let sealed = std::fs::read(&kept).unwrap();
    let mut flipped = sealed.clone();
    flipped[3] ^= 1;
    for corrupt in [
        b"{\"sshUsers\": [{\"username\": \"alice\"".to_vec(),
        flipped,
        vec![b' '; confboot_sys::ssh_users::MAX_SSH_USERS_CONFIG_BYTES + 200],
    ] {
        std::fs::write(&kept, corrupt).unwrap();
        let next = first.reboot(fresh_root());
        let uuid = next.disk.state().luks.clone().unwrap().0;
        let request = TicketRequest::Rejoin {
            disk_uuid: uuid.clone(),
        };
        let ticket = rejoin_ticket(master().state_disk_key(&uuid).expose());
        let token = next.node.take_lock(holder::JOIN).unwrap();
        let err = next
            .node
            .apply_ticket(&token, &checked(&next, &request, &ticket))
            .unwrap_err();
        assert!(
            matches!(
                &err,
                NodeError::SshUsers(SshUsersError::StateFile(
                    trusted::StateFileError::Refused {
                        file: STORED_SSH_USERS_FILE,
                        ..
                    } | trusted::StateFileError::Io {
                        file: STORED_SSH_USERS_FILE,
                        ..
                    }
                ))
            ),
            "{err}"
        );
        assert!(err.is_final());
        assert_eq!(
            std::fs::read_to_string(next.root.path().join("etc/passwd")).unwrap(),
            "root:x:0:0:root:/:/bin/sh\n"
        );
        assert_eq!(next.mounts(), ["mount /dev/mapper/double", "unmount"]);
        assert!(next.marks().is_empty(), "the node is not marked");
    }
}

impl Rig {
    /// This boot of the node joins the VPN, its agent's file at `file`;
    /// the boot's candidate key.
    fn with_vpn(self, file: &Path) -> (Rig, confboot_vpn::VpnPrivateKey) {
        let candidate = confboot_vpn::VpnPrivateKey::generate().unwrap();
        let setup = vpn::NodeVpnSetup {
            mount: Box::new(self.state_fs.clone()),
            name: "worker-1".into(),
            public_endpoint: "192.0.2.1:51820".parse().unwrap(),
            listen_port: 51820,
            control_planes: vec!["10.0.2.100:9090".into()],
            file: file.to_path_buf(),
            candidate: confboot_vpn::VpnPrivateKey::from_bytes(candidate.expose()).unwrap(),
        };
        let rig = Rig {
            node: self.node.with_vpn(setup),
            ..self
        };
        (rig, candidate)
    }
}

#[test]
fn the_vpn_key_is_made_at_the_first_boot_kept_later_and_made_again_when_lost() {
    let run = TempDir::new("run");
    let file = run.path().join("confboot/vpn.json");
    let (rig, first) = Rig::new(FakeDisk::blank()).with_vpn(&file);
    // The join request carries the candidate's public half.
    let fields = rig.node.vpn_join_fields().unwrap();
    assert_eq!(
        (fields.node_name.as_str(), fields.public_endpoint.as_str()),
        ("worker-1", "192.0.2.1:51820")
    );
    assert_eq!(fields.public_key, first.public_key().as_bytes().to_vec());
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    rig.node
        .apply_ticket(&token, &checked(&rig, &join_request(), &join_ticket()))
        .unwrap();
    let kept = rig.state_fs.dir.path().join(vpn::STORED_VPN_KEY_FILE);
    let agent = confboot_vpn::NodeVpnFile::read(&file).unwrap();
    assert_eq!(agent.private_key.expose(), first.expose());
    assert_eq!(agent.disk_uuid, UUID.to_ascii_lowercase());
    assert_eq!(
        agent.cluster_id,
        derive_cluster_id(&[6; 32], &[5; 32]).to_vec()
    );
    assert_eq!(
        agent.own_record_key.expose(),
        confboot_vpn::OwnRecordKey::from_disk_key(&[0x42; 32]).expose()
    );
    assert_eq!(agent.control_planes, ["10.0.2.100:9090"]);
    assert!(kept.exists());
    // The mount was undone.
    assert_eq!(rig.mounts().last().map(String::as_str), Some("unmount"));

    // A reboot (a rejoin): the kept key wins over this boot's candidate.
    std::fs::remove_file(&file).unwrap();
    let (rig, second) = rig.reboot(fresh_root()).with_vpn(&file);
    let rejoin = TicketRequest::Rejoin {
        disk_uuid: UUID.into(),
    };
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    rig.node
        .apply_ticket(&token, &checked(&rig, &rejoin, &rejoin_ticket(&[0x42; 32])))
        .unwrap();
    let agent = confboot_vpn::NodeVpnFile::read(&file).unwrap();
    assert_eq!(agent.private_key.expose(), first.expose());
    assert_ne!(agent.private_key.expose(), second.expose());

    // A first boot interrupted before the key was kept: the next boot
    // keeps its own candidate (the agent's own record re-keys the name).
    std::fs::remove_file(&kept).unwrap();
    let (rig, third) = rig.reboot(fresh_root()).with_vpn(&file);
    let token = rig.node.take_lock(holder::JOIN).unwrap();
    rig.node
        .apply_ticket(&token, &checked(&rig, &rejoin, &rejoin_ticket(&[0x42; 32])))
        .unwrap();
    let agent = confboot_vpn::NodeVpnFile::read(&file).unwrap();
    assert_eq!(agent.private_key.expose(), third.expose());
    let body = trusted::StateFiles::open(rig.state_fs.dir.path(), &[0x42; 32])
        .unwrap()
        .read(vpn::STORED_VPN_KEY_FILE)
        .unwrap()
        .unwrap();
    assert_eq!(
        confboot_vpn::VpnPrivateKey::from_base64(std::str::from_utf8(&body).unwrap())
            .unwrap()
            .expose(),
        third.expose()
    );
}

#[test]
fn the_first_control_plane_makes_and_keeps_its_vpn_key_at_init() {
    let run = TempDir::new("run");
    let file = run.path().join("vpn.json");
    let (rig, candidate) = Rig::new(FakeDisk::blank()).with_vpn(&file);
    rig.node.init(&init_request(), &mut no_log()).unwrap();
    let agent = confboot_vpn::NodeVpnFile::read(&file).unwrap();
    assert_eq!(agent.private_key.expose(), candidate.expose());
    let uuid = rig.disk.state().luks.clone().unwrap().0;
    assert_eq!(
        agent.own_record_key.expose(),
        confboot_vpn::OwnRecordKey::from_disk_key(master().state_disk_key(&uuid).expose()).expose()
    );
    assert_eq!(
        agent.cluster_id,
        derive_cluster_id(master().measurement_secret().expose(), &[3; 32]).to_vec()
    );
}

// ---- Rollback: the state disk's generation ----

use confboot_sys::ssh_users::STORED_SSH_USERS_FILE;
use generation::GENERATION_FILE;

/// **Test double** of the cluster's side of the generation: the join
/// service's rule (an older generation is refused, a newer one recorded,
/// only with the disk key's proof), and a switch that makes it
/// unreachable.
#[derive(Clone, Default)]
struct ClusterGenerations {
    last: Arc<Mutex<u64>>,
    reports: Arc<Mutex<Vec<(u64, u64)>>>,
    unreachable: Arc<Mutex<bool>>,
}

impl ClusterGenerations {
    fn last(&self) -> u64 {
        *self.last.lock().unwrap()
    }
    fn set_unreachable(&self, unreachable: bool) {
        *self.unreachable.lock().unwrap() = unreachable;
    }
    fn reports(&self) -> Vec<(u64, u64)> {
        self.reports.lock().unwrap().clone()
    }
}

impl generation::GenerationConfirmer for ClusterGenerations {
    fn confirm(
        &self,
        r: &confboot_proto::join::ConfirmGenerationRequest,
        cluster_id: &[u8],
        control_plane_key: &confboot_cluster::role::ControlPlanePublicKey,
    ) -> Result<(), generation::ConfirmError> {
        assert_eq!(cluster_id, derive_cluster_id(&[6; 32], &[5; 32]));
        assert_eq!(control_plane_key.as_bytes(), &[7; 32]);
        if *self.unreachable.lock().unwrap() {
            return Err(generation::ConfirmError::NoJoinService);
        }
        let (found, written) = (r.found_generation, r.written_generation);
        assert!(confboot_cluster::generation::verify_generation_proof(
            &[0x42; 32],
            UUID,
            found,
            written,
            &r.proof
        ));
        self.reports.lock().unwrap().push((found, written));
        let mut last = self.last.lock().unwrap();
        confboot_cluster::generation::check_generation(found, *last).map_err(|e| {
            generation::ConfirmError::Refused {
                endpoint: "the cluster".into(),
                reason: e.to_string(),
            }
        })?;
        *last = (*last).max(written);
        Ok(())
    }
}

/// A boot of `rig`'s node that keeps its generation and confirms it to
/// `cluster`.
fn with_generations(rig: Rig, cluster: &ClusterGenerations) -> Rig {
    let mount = rig.state_fs.clone();
    Rig {
        node: rig.node.with_generation(GenerationSetup {
            mount: Box::new(mount),
            confirmer: Box::new(cluster.clone()),
        }),
        ..rig
    }
}

/// A rejoin of `rig` with the ticket a join service of `cluster` gives.
fn rejoin_with(rig: &Rig, cluster: &ClusterGenerations) -> Result<Outcome, NodeError> {
    let request = TicketRequest::Rejoin {
        disk_uuid: UUID.into(),
    };
    let ticket = Ticket::Rejoin(RejoinTicket {
        state_disk_key: SecretBytes::new(vec![0x42; 32]),
        measurement_secret: SecretBytes::new(vec![6; 32]),
        measurement_salt: vec![5; 32],
        generation: cluster.last(),
        control_plane_key: vec![7; 32],
    });
    rig.node.check_ticket(&request, &from_member(&ticket))?;
    let token = rig.node.take_lock(holder::JOIN)?;
    rig.node
        .apply_ticket(&token, &checked(rig, &request, &ticket))
}

fn kept_generation(rig: &Rig) -> u64 {
    generation::read_generation(rig.state_fs.dir.path()).unwrap()
}

#[test]
fn a_disk_restored_from_an_old_copy_is_refused_at_rejoin() {
    let cluster = ClusterGenerations::default();
    let first = with_generations(
        Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32]))),
        &cluster,
    );
    // The first rejoin: the disk keeps generation 1, confirmed.
    assert_eq!(rejoin_with(&first, &cluster), Ok(Outcome::Rejoined));
    assert_eq!((kept_generation(&first), cluster.last()), (1, 1));
    // A user the admin later removes is kept on the disk now ...
    let users = validate_ssh_users([("mallory", ssh_key(3).as_str())]).unwrap();
    let dir = first.state_fs.dir.path().to_path_buf();
    keep_users(&dir, &[0x42; 32], &users);
    // ... and the host copies the disk (here: its file system's files).
    let kept = [GENERATION_FILE, STORED_SSH_USERS_FILE];
    let copy: Vec<Vec<u8>> = kept
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    keep_users(&dir, &[0x42; 32], &[]);
    // The node reboots and rejoins: generation 4 (each write of the users
    // stepped it).
    let second = with_generations(first.reboot(fresh_root()), &cluster);
    assert_eq!(rejoin_with(&second, &cluster), Ok(Outcome::Rejoined));
    assert_eq!((kept_generation(&second), cluster.last()), (4, 4));
    // The host restores its copy and reboots the node.
    for (f, bytes) in kept.iter().zip(&copy) {
        std::fs::write(dir.join(f), bytes).unwrap();
    }
    let third = with_generations(second.reboot(fresh_root()), &cluster);
    let err = rejoin_with(&third, &cluster).unwrap_err();
    assert_eq!(
        err.to_string(),
        "state disk rolled back: generation 2, the cluster last issued 4"
    );
    assert!(err.is_final(), "the node stops");
    // Nothing from the old disk was used: no mark, no users, nothing
    // written; the cluster was told what was found.
    assert!(third.marks().is_empty());
    assert!(!has_user(third.root.path(), "mallory", &ssh_key(3)));
    assert_eq!(kept_generation(&third), 2);
    assert_eq!(cluster.reports().last(), Some(&(2, 0)));
    assert_eq!(cluster.last(), 4);
}

#[test]
fn a_crash_between_the_write_and_its_confirmation_loses_no_node() {
    let cluster = ClusterGenerations::default();
    let first = with_generations(
        Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32]))),
        &cluster,
    );
    assert_eq!(rejoin_with(&first, &cluster), Ok(Outcome::Rejoined));
    let before = std::fs::read(first.state_fs.dir.path().join(GENERATION_FILE)).unwrap();
    // The next boot writes 2 and cannot confirm it (the host cut the
    // network, or killed the node there): the boot ends unmarked.
    cluster.set_unreachable(true);
    let second = with_generations(first.reboot(fresh_root()), &cluster);
    let err = rejoin_with(&second, &cluster).unwrap_err();
    assert!(
        matches!(
            err,
            NodeError::Generation(generation::GenerationError::NotConfirmed {
                next: 2,
                error: generation::ConfirmError::NoJoinService
            })
        ),
        "{err}"
    );
    assert!(err.is_final());
    assert!(second.marks().is_empty());
    assert_eq!((kept_generation(&second), cluster.last()), (2, 1));
    // The boot after it finds 2, newer than the cluster's 1: taken.
    cluster.set_unreachable(false);
    let third = with_generations(second.reboot(fresh_root()), &cluster);
    assert_eq!(rejoin_with(&third, &cluster), Ok(Outcome::Rejoined));
    assert_eq!((kept_generation(&third), cluster.last()), (3, 3));
    // The copy the host could keep from that crash (the disk as the
    // crashed boot found it) is older than the cluster's now.
    std::fs::write(third.state_fs.dir.path().join(GENERATION_FILE), &before).unwrap();
    let fourth = with_generations(third.reboot(fresh_root()), &cluster);
    assert!(matches!(
        rejoin_with(&fourth, &cluster),
        Err(NodeError::RolledBack(_))
    ));
}

#[test]
fn a_generation_file_the_host_spoilt_is_refused_and_nothing_is_confirmed() {
    let cluster = ClusterGenerations::default();
    let rig = with_generations(
        Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32]))),
        &cluster,
    );
    std::fs::write(rig.state_fs.dir.path().join(GENERATION_FILE), "\x1b[2J9\n").unwrap();
    let err = rejoin_with(&rig, &cluster).unwrap_err();
    assert_eq!(
        err,
        NodeError::Generation(generation::GenerationError::StateFile(
            trusted::StateFileError::NotAGeneration
        )),
        "{err}"
    );
    assert!(rig.marks().is_empty());
    assert!(cluster.reports().is_empty());
}

/// The cluster step's output quotes others (the API server's answers,
/// kubeadm's peers): each line reaches the Init's log (and the admin's
/// terminal) as one bounded line of plain characters.
#[test]
fn the_cluster_steps_output_is_logged_printable_and_bounded() {
    let cluster =
        kubeadm().with_log_lines(["ok\u{1b}[2K\rforged\nline".to_string(), "x".repeat(1 << 16)]);
    let rig = Rig::with(FakeDisk::blank(), cluster, FakeMarker::default());
    let mut lines = Vec::new();
    rig.node
        .init(&init_request(), &mut |l| lines.push(l.to_string()))
        .unwrap();
    assert!(
        lines.contains(&"ok\\x1b[2K\\x0dforged\\x0aline".to_string()),
        "{lines:?}"
    );
    let long = lines.iter().find(|l| l.starts_with("xxx")).unwrap();
    assert!(long.len() <= MAX_LOGGED_LINE + 16, "{}", long.len());
    assert!(long.ends_with("…(65536 bytes)"), "{long}");
    assert!(
        lines
            .iter()
            .all(|l| l.bytes().all(|b| (0x20..0x7f).contains(&b) || b >= 0x80)),
        "{lines:?}"
    );
}

#[test]
fn markers_mark_in_turn_and_the_first_failure_ends_it() {
    let (rtmr3, pcr15) = (FakeMarker::default(), FakeMarker::default());
    Markers(vec![Arc::new(rtmr3.clone()), Arc::new(pcr15.clone())])
        .mark(b"cluster")
        .unwrap();
    for m in [&rtmr3, &pcr15] {
        assert_eq!(*m.marks.lock().unwrap(), vec![b"cluster".to_vec()]);
    }
    // A TD that cannot extend RTMR3 is not marked half: PCR 15 is left.
    let failing = FakeMarker {
        fail: true,
        ..FakeMarker::default()
    };
    let after = FakeMarker::default();
    let err = Markers(vec![Arc::new(failing), Arc::new(after.clone())])
        .mark(b"cluster")
        .unwrap_err();
    assert_eq!(
        err,
        AttestationError::Issue(Detail::with(&VtpmRefusal::Tpm, "injected TPM fault"))
    );
    assert!(after.marks.lock().unwrap().is_empty());
}

/// G4 on Recover: the admin's Recover names the lowest generation it
/// accepts for the disk (the last it saw); a disk restored from an older
/// copy is refused before anything on it is used, and a node that keeps
/// no generation is refused when the admin names one.
#[test]
fn a_recovered_disk_older_than_the_admin_last_saw_is_refused() {
    let cluster = ClusterGenerations::default();
    let (rig, m) = recoverable_rig();
    let first = with_generations(rig, &cluster);
    let recovered = first.node.recover(&recover_request(&m)).unwrap();
    assert_eq!(
        recovered,
        RecoveredDisk {
            disk_uuid: UUID.into(),
            found: 0,
            written: 1
        }
    );
    // The host copies the disk now (generation 2: keeping a user steps it) ...
    let dir = first.state_fs.dir.path().to_path_buf();
    let users = validate_ssh_users([("mallory", ssh_key(3).as_str())]).unwrap();
    keep_users(&dir, m.state_disk_key(UUID).expose(), &users);
    let kept = [GENERATION_FILE, STORED_SSH_USERS_FILE];
    let copy: Vec<Vec<u8>> = kept
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    keep_users(&dir, m.state_disk_key(UUID).expose(), &[]);
    // ... the admin recovers again, naming what it saw (any case).
    let second = with_generations(first.reboot(fresh_root()), &cluster);
    let mut req = recover_request(&m);
    req.min_generations.insert(UUID.to_ascii_uppercase(), 1);
    let recovered = second.node.recover(&req).unwrap();
    assert_eq!((recovered.found, recovered.written), (3, 4));
    // The host restores its copy; the admin's next Recover names 4.
    for (f, bytes) in kept.iter().zip(&copy) {
        std::fs::write(dir.join(f), bytes).unwrap();
    }
    let third = with_generations(second.reboot(fresh_root()), &cluster);
    let mut req = recover_request(&m);
    req.min_generations.insert(UUID.into(), 4);
    req.min_generations.insert("another-disk".into(), 90);
    let err = third.node.recover(&req).unwrap_err();
    assert_eq!(
        err,
        NodeError::RolledBack(confboot_cluster::generation::RolledBack { found: 2, last: 4 })
    );
    assert!(err.is_final(), "the node stops");
    assert!(third.marks().is_empty());
    assert!(!has_user(third.root.path(), "mallory", &ssh_key(3)));
    assert_eq!(kept_generation(&third), 2, "nothing written");
    assert!(cluster.reports().is_empty(), "a Recover confirms nothing");
    // A node that keeps no generation cannot show one: refused.
    let (rig, m) = recoverable_rig();
    let mut req = recover_request(&m);
    req.min_generations.insert(UUID.into(), 1);
    assert_eq!(
        rig.node.recover(&req).unwrap_err(),
        NodeError::RolledBack(confboot_cluster::generation::RolledBack { found: 0, last: 1 })
    );
    // More minimums than a node reads: refused before the disk is read.
    let (rig, m) = recoverable_rig();
    let mut req = recover_request(&m);
    for i in 0..=generation::MAX_MIN_GENERATIONS {
        req.min_generations.insert(format!("disk-{i}"), 1);
    }
    assert!(matches!(
        rig.node.recover(&req).unwrap_err(),
        NodeError::InvalidArgument {
            field: "min_generations",
            ..
        }
    ));
    assert_eq!(rig.disk.state().reads, 0);
}

// ---- Item 6: what the node trusts on its disk is bound to its generation ----

/// A node with SSH users and the VPN that keeps its generation, rejoined
/// once (generation 1 on disk, 1 confirmed).
fn trusted_rig(cluster: &ClusterGenerations, run: &Path) -> (Rig, PathBuf) {
    let (rig, _) =
        Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32]))).with_vpn(&run.join("vpn.json"));
    let rig = with_generations(rig, cluster);
    assert_eq!(rejoin_with(&rig, cluster), Ok(Outcome::Rejoined));
    let dir = rig.state_fs.dir.path().to_path_buf();
    (rig, dir)
}

/// The next boot of `rig` with the VPN, keeping its generation.
fn next_boot(rig: Rig, cluster: &ClusterGenerations, run: &Path) -> Rig {
    with_generations(
        rig.reboot(fresh_root()).with_vpn(&run.join("vpn.json")).0,
        cluster,
    )
}

#[test]
fn an_old_copy_of_the_ssh_users_put_back_alone_is_refused() {
    let cluster = ClusterGenerations::default();
    let run = TempDir::new("run");
    let (first, dir) = trusted_rig(&cluster, run.path());
    // A user the admin later removes is kept; the host copies that file.
    let mallory = validate_ssh_users([("mallory", ssh_key(3).as_str())]).unwrap();
    keep_users(&dir, &[0x42; 32], &mallory);
    let old = std::fs::read(dir.join(STORED_SSH_USERS_FILE)).unwrap();
    keep_users(&dir, &[0x42; 32], &[]);
    let second = next_boot(first, &cluster, run.path());
    assert_eq!(rejoin_with(&second, &cluster), Ok(Outcome::Rejoined));
    let generation = kept_generation(&second);
    let sealed_at = confboot_kms::state_mac::split(&old).unwrap().1;
    // The host puts back the old users only: the generation file is the
    // current one, so the generation check alone passes.
    std::fs::write(dir.join(STORED_SSH_USERS_FILE), &old).unwrap();
    let third = next_boot(second, &cluster, run.path());
    let err = rejoin_with(&third, &cluster).unwrap_err();
    assert_eq!(
        err,
        NodeError::Generation(generation::GenerationError::StateFile(
            trusted::StateFileError::Refused {
                file: STORED_SSH_USERS_FILE,
                reason: confboot_kms::state_mac::StateMacError::OtherGeneration {
                    found: sealed_at,
                    current: generation
                }
            }
        ))
    );
    assert_eq!(
        err.to_string(),
        format!(
            "state disk generation: ssh-users.json refused: its MAC is for generation {sealed_at}, \
             the disk is at generation {generation}"
        )
    );
    assert!(err.is_final(), "the node stops");
    assert!(third.marks().is_empty());
    assert!(!has_user(third.root.path(), "mallory", &ssh_key(3)));
    assert_eq!(kept_generation(&third), generation, "nothing written");
}

#[test]
fn the_vpn_key_swapped_for_an_older_one_is_refused() {
    let cluster = ClusterGenerations::default();
    let run = TempDir::new("run");
    let (first, dir) = trusted_rig(&cluster, run.path());
    let old = std::fs::read(dir.join(vpn::STORED_VPN_KEY_FILE)).unwrap();
    // The key is lost and replaced (a new one kept at a later generation).
    std::fs::remove_file(dir.join(vpn::STORED_VPN_KEY_FILE)).unwrap();
    let second = next_boot(first, &cluster, run.path());
    assert_eq!(rejoin_with(&second, &cluster), Ok(Outcome::Rejoined));
    assert_ne!(
        std::fs::read(dir.join(vpn::STORED_VPN_KEY_FILE)).unwrap(),
        old
    );
    std::fs::write(dir.join(vpn::STORED_VPN_KEY_FILE), &old).unwrap();
    let third = next_boot(second, &cluster, run.path());
    let err = rejoin_with(&third, &cluster).unwrap_err();
    assert!(
        matches!(
            &err,
            NodeError::Generation(generation::GenerationError::StateFile(
                trusted::StateFileError::Refused {
                    file: vpn::STORED_VPN_KEY_FILE,
                    reason: confboot_kms::state_mac::StateMacError::OtherGeneration { .. }
                }
            ))
        ),
        "{err}"
    );
    assert!(err.is_final());
    assert!(third.marks().is_empty());
}

#[test]
fn a_mac_for_another_generation_or_of_another_disk_is_refused() {
    use confboot_kms::state_mac::{StateMacError, StateMacKey};
    let cluster = ClusterGenerations::default();
    let run = TempDir::new("run");
    let (first, dir) = trusted_rig(&cluster, run.path());
    let generation = kept_generation(&first);
    let body = ssh_users_config(&[]);
    for (key, at, reason) in [
        (
            [0x42; 32],
            generation + 2,
            StateMacError::OtherGeneration {
                found: generation + 2,
                current: generation,
            },
        ),
        (
            [0x42; 32],
            generation - 1,
            StateMacError::OtherGeneration {
                found: generation - 1,
                current: generation,
            },
        ),
        ([0x43; 32], generation, StateMacError::Mismatch),
    ] {
        let sealed = StateMacKey::derive(&key).seal(STORED_SSH_USERS_FILE, at, body.as_bytes());
        std::fs::write(dir.join(STORED_SSH_USERS_FILE), sealed).unwrap();
        let next = with_generations(first.reboot(fresh_root()), &cluster);
        assert_eq!(
            rejoin_with(&next, &cluster),
            Err(NodeError::Generation(
                generation::GenerationError::StateFile(trusted::StateFileError::Refused {
                    file: STORED_SSH_USERS_FILE,
                    reason
                })
            ))
        );
        assert!(next.marks().is_empty());
    }
}

/// A disk written before the MACs: its generation file and users carry
/// none. The first rejoin whose generation is exactly the cluster's seals
/// them; any other is refused, and once sealed an unsealed file is refused.
#[test]
fn a_disk_without_macs_is_sealed_only_at_a_generation_the_cluster_confirmed() {
    let cluster = ClusterGenerations::default();
    let rig = with_generations(
        Rig::new(FakeDisk::luks(UUID, &[0x42; 32], Some(&[5; 32]))),
        &cluster,
    );
    let dir = rig.state_fs.dir.path().to_path_buf();
    let alice = validate_ssh_users([("alice", ssh_key(1).as_str())]).unwrap();
    let legacy = ssh_users_config(&alice);
    std::fs::write(dir.join(GENERATION_FILE), "3\n").unwrap();
    std::fs::write(dir.join(STORED_SSH_USERS_FILE), &legacy).unwrap();
    // The cluster last confirmed 2: the disk's 3 is not known fresh.
    *cluster.last.lock().unwrap() = 2;
    let unsealed = Err(NodeError::Generation(
        generation::GenerationError::StateFile(trusted::StateFileError::Refused {
            file: STORED_SSH_USERS_FILE,
            reason: confboot_kms::state_mac::StateMacError::Unsealed,
        }),
    ));
    assert_eq!(rejoin_with(&rig, &cluster), unsealed);
    assert!(rig.marks().is_empty());
    // Confirmed 3: sealed at 4, the users created.
    *cluster.last.lock().unwrap() = 3;
    let next = with_generations(rig.reboot(fresh_root()), &cluster);
    assert_eq!(rejoin_with(&next, &cluster), Ok(Outcome::Rejoined));
    assert!(has_user(next.root.path(), "alice", &ssh_key(1)));
    assert_eq!((kept_generation(&next), cluster.last()), (4, 4));
    assert_eq!(kept_users(&dir, &[0x42; 32]), Some(alice));
    // Sealed now: the unsealed copy put back is refused even at a fresh
    // generation.
    std::fs::write(dir.join(STORED_SSH_USERS_FILE), &legacy).unwrap();
    let last = with_generations(next.reboot(fresh_root()), &cluster);
    assert_eq!(rejoin_with(&last, &cluster), unsealed);
}
