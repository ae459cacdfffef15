//! The host plays TDX and SEV-SNP guests: TDs and SNP guests whose
//! evidence the test issuers make (DCAP quotes of the test Intel,
//! [`crate::tdx`]; reports of the test AMD's chips, [`crate::snp`]) under
//! genuine firmware, each with the parts the host chose, against a real
//! joinsvc process (`--variants tdx --tdx-policy`, `--variants sev-snp
//! --snp-policy`) and the real `confboot init` and `confboot recover`.
//!
//! These nodes run in the test process (a bootstrapper needs configfs-tsm
//! and the TDX RTMR sysfs file, which no machine here has): the host's
//! guest is the production issuer ([`confboot_tdx::TdxIssuer`],
//! [`confboot_snp::SnpIssuer`]) on a test quote or report source, and the
//! host's "node" that the admin's Init or Recover is diverted to is an
//! aTLS server attesting with it, which keeps every byte it decrypts.
//! They have no disk: the judge looks at what the host got (a ticket, the
//! bytes the admin's CLI sent it, joinsvc's log).
//!
//! The moves ([`GuestMove`]): the host's own ACPI tables (TDX RTMR0),
//! kernel (RTMR1), initrd or command line (RTMR2), or for SEV-SNP the same
//! under a measured direct boot (the launch measurement moves); a
//! bootstrapped member (TDX: RTMR3 marked with the cluster's mark; SEV-SNP:
//! a launch that already got its ticket); a join service started with a
//! policy that pins too little (TDX: `mrtd` alone; SEV-SNP: the launch
//! digest of a launch without kernel hashes, under which the host's
//! kernel measures the same); and the honest guest, the control that
//! shows an admission is seen as one.
//!
//! SEV-SNP's launch measurement is modelled ([`snp_launch`]): SHA-384 over
//! the firmware and, under a measured direct boot only, the hashes page of
//! kernel, initrd and command line. It is not AMD's algorithm; it keeps
//! what matters here, that without the hashes the kernel is not measured.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use confboot_atls::AtlsServer;
use confboot_attest::{Issuer, MeasurementPolicy};
use confboot_kms::MasterSecret;
use confboot_proto::join::{IssueJoinTicketRequest, IssueRejoinTicketRequest};
use confboot_snp::SnpIssuer;
use confboot_tdx::{CcelLog, TdxIssuer, synthetic_ccel_log};
use confboot_wire::Transport;

use super::{Outcome, Secrets, Step, short, write_cluster_file, write_master_secret};
use crate::TempDir;
use crate::cluster::{Joinsvc, workspace_binary};
use crate::snp::{Guest, Tcb, TestAmd, TestChip, TestReportSource};
use crate::tdx::{Td, TestIntel, TestPlatform, TestQuoteSource};
use crate::tickets::SealedClient;

/// joinsvc's served-launch filter.
const FILTER: &str = "confboot-issued-filter";
/// `EV_EVENT_TAG` and `EV_EFI_ACTION`.
const EV_EVENT_TAG: u32 = 0x6;
const EV_EFI_ACTION: u32 = 0x8000_0007;
/// The image's MRTD (its TDVF firmware).
const MRTD: [u8; 48] = [0x7d; 48];
/// The disk of the honest TD (joined once at set-up, rejoined after).
const HONEST_DISK: &str = "7d7d7d7d-0000-4000-8000-00000000007d";
/// How long one call of the host's guest or the admin may take.
const CALL_BOUND: Duration = Duration::from_secs(20);

/// What the host's guest is made of. Each part is the text its event (TDX)
/// or hash (SEV-SNP) measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Image {
    acpi: &'static str,
    kernel: &'static str,
    initrd: &'static str,
    cmdline: &'static str,
}

/// The image the cluster runs.
const GENUINE: Image = Image {
    acpi: "ACPI tables of the image",
    kernel: "Linux kernel of the image",
    initrd: "initrd of the image",
    cmdline: "console=ttyS0 confboot.verity=image",
};

/// A TDX or SEV-SNP flow the host plays in the test process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GuestFlow {
    /// A TD asks joinsvc for a join ticket.
    TdxJoin,
    /// A TD asks joinsvc for the rejoin ticket of the honest TD's disk.
    TdxRejoin,
    /// The admin's `confboot init --variants tdx` meets the host's TD.
    TdxInit,
    /// The admin's `confboot recover --variants tdx` meets the host's TD.
    TdxRecover,
    /// An SEV-SNP guest asks joinsvc for a join ticket.
    SnpJoin,
    /// The admin's `confboot init --variants sev-snp` meets the host's guest.
    SnpInit,
    /// The admin's `confboot recover --variants sev-snp` meets the host's guest.
    SnpRecover,
}

impl GuestFlow {
    /// Every flow.
    pub const ALL: [GuestFlow; 7] = [
        GuestFlow::TdxJoin,
        GuestFlow::TdxRejoin,
        GuestFlow::TdxInit,
        GuestFlow::TdxRecover,
        GuestFlow::SnpJoin,
        GuestFlow::SnpInit,
        GuestFlow::SnpRecover,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            GuestFlow::TdxJoin => "tdx join",
            GuestFlow::TdxRejoin => "tdx rejoin",
            GuestFlow::TdxInit => "tdx init",
            GuestFlow::TdxRecover => "tdx recover",
            GuestFlow::SnpJoin => "snp join",
            GuestFlow::SnpInit => "snp init",
            GuestFlow::SnpRecover => "snp recover",
        }
    }

    fn tdx(self) -> bool {
        matches!(
            self,
            GuestFlow::TdxJoin | GuestFlow::TdxRejoin | GuestFlow::TdxInit | GuestFlow::TdxRecover
        )
    }

    /// Whether the admin's CLI calls the host's guest (else the guest
    /// calls joinsvc).
    fn admin_calls(self) -> bool {
        matches!(
            self,
            GuestFlow::TdxInit | GuestFlow::TdxRecover | GuestFlow::SnpInit | GuestFlow::SnpRecover
        )
    }
}

/// What the host's guest is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestMove {
    /// The honest guest of the image, not yet bootstrapped (the control:
    /// its admission must be seen as one).
    Honest,
    /// Genuine firmware with the host's ACPI tables (TDX: RTMR0).
    OwnAcpi,
    /// The host's kernel (TDX: RTMR1; SEV-SNP: under a measured direct boot).
    OwnKernel,
    /// The host's initrd (TDX: RTMR2; SEV-SNP: under a measured direct boot).
    OwnInitrd,
    /// The host's command line (TDX: RTMR2; SEV-SNP: under a measured
    /// direct boot).
    OwnCmdline,
    /// A bootstrapped member of the cluster (TDX: RTMR3 holds the
    /// cluster's mark; SEV-SNP: a launch that already got its ticket).
    Member,
    /// An SEV-SNP launch that got its ticket asks again after the host
    /// deleted joinsvc's served-launch filter (`confboot-issued-filter`),
    /// on a join service whose one write of the filter was that launch's.
    FilterDeleted,
    /// The same after the host put back the filter as it was before that
    /// launch was served (an etcd restored from an old snapshot).
    FilterRestoredOld,
    /// The join service started with a policy that pins too little (TDX:
    /// `mrtd` alone; SEV-SNP: the launch digest of a launch without the
    /// kernel hashes table), then the host's guest with its own initrd
    /// (TDX) or kernel (SEV-SNP, launched without the hashes table).
    WeakPolicy,
}

impl GuestMove {
    /// Every move.
    pub const ALL: [GuestMove; 9] = [
        GuestMove::Honest,
        GuestMove::OwnAcpi,
        GuestMove::OwnKernel,
        GuestMove::OwnInitrd,
        GuestMove::OwnCmdline,
        GuestMove::Member,
        GuestMove::FilterDeleted,
        GuestMove::FilterRestoredOld,
        GuestMove::WeakPolicy,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            GuestMove::Honest => "honest guest (control)",
            GuestMove::OwnAcpi => "guest: host's ACPI tables",
            GuestMove::OwnKernel => "guest: host's kernel",
            GuestMove::OwnInitrd => "guest: host's initrd",
            GuestMove::OwnCmdline => "guest: host's command line",
            GuestMove::Member => "guest: a bootstrapped member",
            GuestMove::FilterDeleted => "ledger: filter deleted + a served launch",
            GuestMove::FilterRestoredOld => "ledger: old filter restored + a served launch",
            GuestMove::WeakPolicy => "policy pins too little + host's guest",
        }
    }

    /// The image of the host's guest.
    fn image(self, flow: GuestFlow) -> Image {
        match self {
            GuestMove::OwnAcpi => Image {
                acpi: "the host's ACPI tables",
                ..GENUINE
            },
            GuestMove::OwnKernel => Image {
                kernel: "the host's kernel",
                ..GENUINE
            },
            GuestMove::OwnInitrd => Image {
                initrd: "the host's initrd",
                ..GENUINE
            },
            GuestMove::OwnCmdline => Image {
                cmdline: "console=ttyS0 init=/host/shell",
                ..GENUINE
            },
            GuestMove::WeakPolicy if flow.tdx() => Image {
                initrd: "the host's initrd",
                ..GENUINE
            },
            GuestMove::WeakPolicy => Image {
                kernel: "the host's kernel",
                ..GENUINE
            },
            GuestMove::Honest
            | GuestMove::Member
            | GuestMove::FilterDeleted
            | GuestMove::FilterRestoredOld => GENUINE,
        }
    }

    /// Whether the move applies at `step` of `flow`.
    pub fn applies(self, flow: GuestFlow, step: &Step) -> bool {
        match (self, step) {
            // A policy is read when the join service starts.
            (GuestMove::WeakPolicy, Step::Start) => {
                flow == GuestFlow::TdxJoin || flow == GuestFlow::SnpJoin
            }
            (GuestMove::WeakPolicy, _) => false,
            (GuestMove::FilterDeleted | GuestMove::FilterRestoredOld, Step::Exchange) => {
                flow == GuestFlow::SnpJoin
            }
            (GuestMove::FilterDeleted | GuestMove::FilterRestoredOld, _) => false,
            (_, Step::Exchange) => match flow {
                // SEV-SNP has no ACPI register; the CLI refuses SEV-SNP
                // whatever the guest, so one guest shows it.
                GuestFlow::SnpJoin => self != GuestMove::OwnAcpi,
                GuestFlow::SnpInit | GuestFlow::SnpRecover => self == GuestMove::Member,
                _ => true,
            },
            _ => false,
        }
    }
}

/// A TD's CCEL log for `image`: the firmware and its ACPI tables into
/// RTMR0, the kernel into RTMR1, the initrd and command line into RTMR2.
fn ccel(image: &Image) -> CcelLog {
    let tagged = |text: &str| {
        let mut d = 0x8a35_ff10u32.to_le_bytes().to_vec();
        d.extend_from_slice(&(text.len() as u32).to_le_bytes());
        d.extend_from_slice(text.as_bytes());
        d
    };
    let (acpi, kernel, initrd, cmdline) = (
        tagged(image.acpi),
        tagged(image.kernel),
        tagged(image.initrd),
        tagged(image.cmdline),
    );
    let events: Vec<(u32, u32, &[u8])> = vec![
        (1, EV_EFI_ACTION, b"TDVF firmware"),
        (1, EV_EVENT_TAG, &acpi),
        (2, EV_EVENT_TAG, &kernel),
        (3, EV_EVENT_TAG, &initrd),
        (3, EV_EVENT_TAG, &cmdline),
    ];
    CcelLog::parse(&synthetic_ccel_log(&events, 256)).expect("a synthetic CCEL log")
}

/// The modelled SEV-SNP launch measurement of `image` under the image's
/// firmware: with `hashes` (a measured direct boot) the hashes page of
/// kernel, initrd and command line is measured, without it only the
/// firmware is.
pub fn snp_launch(image_parts: (&str, &str, &str), hashes: bool) -> [u8; 48] {
    use ring::digest::{SHA256, SHA384, digest};
    let mut input = b"confboot test SNP launch: OVMF AmdSev firmware".to_vec();
    if hashes {
        input.push(1);
        for part in [image_parts.0, image_parts.1, image_parts.2] {
            input.extend_from_slice(digest(&SHA256, part.as_bytes()).as_ref());
        }
    }
    let mut m = [0u8; 48];
    m.copy_from_slice(digest(&SHA384, &input).as_ref());
    m
}

fn snp_measurement(image: &Image, hashes: bool) -> [u8; 48] {
    snp_launch((image.kernel, image.initrd, image.cmdline), hashes)
}

/// The host's aTLS "node": attests with its issuer and keeps every byte
/// the admin's CLI sends it after the handshake.
pub(super) struct HostNode {
    /// Where it listens.
    pub(super) addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HostNode {
    /// Listens on loopback, attesting with `issuer`.
    pub(super) fn start(issuer: Arc<dyn Issuer>) -> HostNode {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the host's node");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let server = AtlsServer::new(Some(issuer)).expect("an aTLS server");
        let thread = {
            let (received, stop) = (Arc::clone(&received), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((sock, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    let _ = sock.set_nonblocking(false);
                    let Ok(mut accepted) = server.accept(sock, Duration::from_secs(10)) else {
                        continue;
                    };
                    let _ = accepted
                        .stream
                        .set_read_deadline(Some(Instant::now() + Duration::from_secs(2)));
                    let mut buf = [0u8; 16 << 10];
                    loop {
                        match accepted.stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                let mut r = received.lock().unwrap();
                                if r.len() < 4 << 20 {
                                    r.extend_from_slice(&buf[..n]);
                                }
                            }
                        }
                    }
                }
            })
        };
        HostNode {
            addr,
            received,
            stop,
            thread: Some(thread),
        }
    }

    /// Every byte it decrypted so far.
    pub(super) fn received(&self) -> Vec<u8> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for HostNode {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The host's TDX and SEV-SNP guests, the cluster's join services for
/// both variants and the admin's files.
pub struct GuestActor {
    dir: TempDir,
    confboot: PathBuf,
    intel: TestIntel,
    platform: Arc<TestPlatform>,
    amd: TestAmd,
    chip: Arc<TestChip>,
    tdx_joinsvc: Joinsvc,
    snp_joinsvc: Joinsvc,
    /// The admin's master secret (its Init and Recover).
    admin_master: MasterSecret,
    init_secret: Vec<u8>,
    cli_serial: usize,
}

impl GuestActor {
    /// Writes the policies, starts one joinsvc per variant and joins the
    /// honest TD's disk once (so that it can rejoin).
    pub fn start() -> GuestActor {
        let dir = TempDir::new("host-actor-guests");
        let intel = TestIntel::new();
        let platform = Arc::new(intel.platform(1));
        let amd = TestAmd::new();
        let chip = Arc::new(amd.chip([0x3c; 64], Tcb::CURRENT));
        write_tdx_policy(dir.path(), &intel, false);
        write_snp_policy(dir.path(), &amd, "snp.json", true);
        write_snp_policy(dir.path(), &amd, "snp-no-hashes.json", false);
        let tdx_joinsvc = joinsvc(dir.path(), "tdx", "--tdx-policy", "tdx.json");
        let snp_joinsvc = joinsvc(dir.path(), "sev-snp", "--snp-policy", "snp.json");
        let init_secret = b"host actor guests: correct horse battery staple".to_vec();
        std::fs::write(dir.path().join("init-secret"), &init_secret).unwrap();
        let admin_master = MasterSecret::generate().unwrap();
        write_master_secret(&dir.path().join("master-secret.json"), &admin_master);
        write_cluster_file(&dir.path().join("cluster.json"), &[0x5a; 32]);
        let actor = GuestActor {
            dir,
            confboot: workspace_binary("confboot"),
            intel,
            platform,
            amd,
            chip,
            tdx_joinsvc,
            snp_joinsvc,
            admin_master,
            init_secret,
            cli_serial: 0,
        };
        let honest = actor.td_issuer(GuestFlow::TdxJoin, GuestMove::Honest);
        join(&actor.tdx_joinsvc, &honest, HONEST_DISK).expect("the honest TD joins once");
        actor
    }

    /// The host's TD for `m`.
    fn td_issuer(&self, flow: GuestFlow, m: GuestMove) -> Arc<dyn Issuer> {
        let log = ccel(&m.image(flow));
        let mut td = Td {
            mr_td: MRTD,
            rtmrs: log.replay(),
            debug: false,
        };
        if m == GuestMove::Member {
            td.rtmrs[3] = confboot_cluster::mark::marked_rtmr3(&self.tdx_cluster_id());
        }
        Arc::new(
            TdxIssuer::new(TestQuoteSource::honest(Arc::clone(&self.platform), td))
                .with_ccel_log(&log),
        )
    }

    /// The host's SEV-SNP guest for `m` (a new launch each time).
    fn snp_source(&self, flow: GuestFlow, m: GuestMove) -> TestReportSource {
        // Measured direct boot, but under the weak policy the launch
        // without kernel hashes (the kernel is not measured).
        let hashes = m != GuestMove::WeakPolicy;
        let guest = Guest {
            measurement: snp_measurement(&m.image(flow), hashes),
            debug: false,
        };
        TestReportSource::honest(&self.amd, Arc::clone(&self.chip), guest)
    }

    fn tdx_cluster_id(&self) -> Vec<u8> {
        let j = &self.tdx_joinsvc;
        confboot_kms::derive_cluster_id(
            j.master_secret.measurement_secret().expose(),
            &confboot_kms::MeasurementSalt::new(j.measurement_salt.clone()).unwrap(),
        )
        .to_vec()
    }

    /// The secrets of `joinsvc`'s cluster and the admin's, and the disk
    /// keys of `disks`.
    fn secrets(&self, joinsvc: &Joinsvc, disks: &[&str]) -> Secrets {
        let mut s = Secrets(Vec::new());
        for (who, m) in [
            ("joinsvc", &joinsvc.master_secret),
            ("the admin", &self.admin_master),
        ] {
            s.add(format!("{who}'s master secret's key"), m.key().expose());
            s.add(format!("{who}'s master secret's salt"), m.salt().expose());
            s.add(
                format!("{who}'s measurement secret"),
                m.measurement_secret().expose(),
            );
            for d in disks {
                s.add(format!("the disk key of {d}"), m.state_disk_key(d).expose());
            }
        }
        s.add("the admin's init secret", &self.init_secret);
        s
    }

    /// Runs `flow` with the host's guest `m` at `step` and judges it.
    pub fn case(&mut self, flow: GuestFlow, step: &Step, m: GuestMove) -> Outcome {
        if flow.admin_calls() {
            self.admin_case(flow, m)
        } else {
            self.join_case(flow, step, m)
        }
    }

    /// The host's guest asks a join service for a ticket.
    fn join_case(&mut self, flow: GuestFlow, step: &Step, m: GuestMove) -> Outcome {
        let uuid = |n: usize| format!("{n:08x}-0000-4000-8000-00000000006a");
        let (first, second) = (uuid(self.next()), uuid(self.next()));
        let weak;
        let joinsvc = match (m, step) {
            (GuestMove::WeakPolicy, Step::Start) => {
                let (file, option, variant) = if flow.tdx() {
                    write_tdx_policy(self.dir.path(), &self.intel, true);
                    ("tdx-mrtd-only.json", "--tdx-policy", "tdx")
                } else {
                    ("snp-no-hashes.json", "--snp-policy", "sev-snp")
                };
                let dir = self.dir.path().to_path_buf();
                let started = std::panic::catch_unwind(|| joinsvc(&dir, variant, option, file));
                match started {
                    Ok(j) => {
                        weak = j;
                        &weak
                    }
                    Err(panic) => {
                        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
                        let why = text
                            .lines()
                            .rev()
                            .find(|l| l.contains("ERROR") || l.contains("error"))
                            .unwrap_or("joinsvc did not start");
                        return Outcome::Refused(format!(
                            "joinsvc refuses to start: {}",
                            short(joinsvc_message(why))
                        ));
                    }
                }
            }
            // A join service whose only write of its filter is the served
            // launch's (as on a new cluster's first SEV-SNP join).
            (GuestMove::FilterDeleted, _) => {
                weak = joinsvc(self.dir.path(), "sev-snp", "--snp-policy", "snp.json");
                &weak
            }
            _ if flow.tdx() => &self.tdx_joinsvc,
            _ => &self.snp_joinsvc,
        };
        let disk = if flow == GuestFlow::TdxRejoin {
            HONEST_DISK.to_string()
        } else {
            first
        };
        let secrets = self.secrets(joinsvc, &[&disk, &second]);
        let mut restore_filter = None;
        let issuer: Arc<dyn Issuer> = if flow.tdx() {
            self.td_issuer(flow, m)
        } else {
            let source = self.snp_source(flow, m);
            let served = matches!(
                m,
                GuestMove::Member | GuestMove::FilterDeleted | GuestMove::FilterRestoredOld
            );
            let kube = joinsvc;
            let old_filter = kube.configmap(FILTER);
            if served {
                // The member's launch got its ticket when it joined.
                let first = Arc::new(SnpIssuer::new(same_launch(&source), 0));
                if let Err(e) = join(joinsvc, &(first as Arc<dyn Issuer>), &disk) {
                    return Outcome::NotMade(format!("the member's own join failed: {e}"));
                }
            }
            let current = kube.configmap(FILTER);
            match (m, &current) {
                (GuestMove::FilterDeleted, Some(_)) => kube.delete_configmap(FILTER),
                (GuestMove::FilterRestoredOld, Some(_)) => match old_filter {
                    Some(old) => kube.restore_configmap(FILTER, old),
                    None => kube.delete_configmap(FILTER),
                },
                (GuestMove::FilterDeleted | GuestMove::FilterRestoredOld, None) => {
                    return Outcome::NotMade("no filter ConfigMap to move".into());
                }
                _ => {}
            }
            restore_filter = current
                .filter(|_| matches!(m, GuestMove::FilterDeleted | GuestMove::FilterRestoredOld));
            Arc::new(SnpIssuer::new(source, 0))
        };
        let log_from = joinsvc.process.log().len();
        let got = if flow == GuestFlow::TdxRejoin {
            rejoin(joinsvc, &issuer, &disk).map(|t| {
                (
                    t.state_disk_key.expose().to_vec(),
                    t.measurement_secret.expose().to_vec(),
                )
            })
        } else {
            // A second ticket for a served launch: another disk of its own.
            let disk = if !flow.tdx()
                && matches!(
                    m,
                    GuestMove::Member | GuestMove::FilterDeleted | GuestMove::FilterRestoredOld
                ) {
                second
            } else {
                disk.clone()
            };
            join(joinsvc, &issuer, &disk).map(|t| {
                (
                    t.state_disk_key.expose().to_vec(),
                    t.measurement_secret.expose().to_vec(),
                )
            })
        };
        // The filter as the move found it, for the next case.
        if let Some(filter) = restore_filter {
            joinsvc.restore_configmap(FILTER, filter);
        }
        // joinsvc's log: the host reads its console too.
        let log = joinsvc.process.log().join("\n");
        if let Some(found) = secrets.found_in_text("joinsvc's log", &log) {
            return Outcome::Failure(found);
        }
        match got {
            Ok((key, measurement_secret)) if m == GuestMove::Honest => {
                if key == joinsvc.master_secret.state_disk_key(&disk).expose()
                    && measurement_secret == joinsvc.master_secret.measurement_secret().expose()
                {
                    Outcome::Converged(format!("the honest guest got its ticket for {disk}"))
                } else {
                    Outcome::Failure("a ticket whose keys the cluster did not derive".into())
                }
            }
            Ok((key, _)) => {
                let found = secrets
                    .found_in("the host's ticket", &key)
                    .unwrap_or_else(|| "a disk key".into());
                Outcome::Failure(format!("the host's guest was admitted: {found}"))
            }
            Err(e) => {
                // joinsvc's own line for this refusal (it may come a
                // moment after the client saw the handshake end).
                let t = Instant::now();
                let line = loop {
                    let found = joinsvc
                        .process
                        .log()
                        .into_iter()
                        .skip(log_from)
                        .find(|l| l.contains("refused"));
                    if found.is_some() || t.elapsed() > Duration::from_secs(2) {
                        break found;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                };
                // Without the caller's address (it differs between runs).
                let line = line.map(|l| {
                    let m = joinsvc_message(&l);
                    short(match m.split_once("): ") {
                        Some((head, rest)) if head.starts_with("refused Some(") => rest,
                        _ => m,
                    })
                });
                Outcome::Refused(line.unwrap_or_else(|| short(&e)))
            }
        }
    }

    /// The admin's Init or Recover meets the host's guest.
    fn admin_case(&mut self, flow: GuestFlow, m: GuestMove) -> Outcome {
        let issuer: Arc<dyn Issuer> = if flow.tdx() {
            self.td_issuer(flow, m)
        } else {
            Arc::new(SnpIssuer::new(self.snp_source(flow, m), 0))
        };
        let node = HostNode::start(issuer);
        let n = self.next();
        let dir = self.dir.path();
        let mut cmd = Command::new(&self.confboot);
        cmd.current_dir(dir);
        let init = matches!(flow, GuestFlow::TdxInit | GuestFlow::SnpInit);
        let addr = node.addr.to_string();
        if init {
            cmd.args(["init", "--node", &addr, "--init-secret-file", "init-secret"]);
            cmd.args(["--master-secret", "master-secret.json"]);
            cmd.args(["--master-secret-out", &format!("g-ms-out-{n}.json")]);
            cmd.args(["--kubeconfig-out", &format!("g-admin-{n}.conf")]);
            cmd.args([
                "--state-out",
                &format!("g-cluster-{n}.json"),
                "--timeout",
                "20",
            ]);
        } else {
            cmd.args([
                "recover",
                "--node",
                &addr,
                "--master-secret",
                "master-secret.json",
            ]);
            cmd.args(["--cluster-file", "cluster.json"]);
            cmd.args(["--generations-file", &format!("g-generations-{n}.json")]);
            if recover_takes_init_secret(&self.confboot) {
                cmd.args(["--init-secret-file", "init-secret"]);
            }
        }
        if flow.tdx() {
            cmd.args(["--variants", "tdx", "--tdx-policy", "tdx.json"]);
        } else {
            cmd.args(["--variants", "sev-snp", "--snp-policy", "snp.json"]);
        }
        let out = dir.join(format!("g-cli-{n}.out"));
        let file = std::fs::File::create(&out).unwrap();
        cmd.stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null());
        let mut child = cmd.spawn().expect("run confboot");
        let t = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                _ if t.elapsed() > CALL_BOUND => break None,
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let _ = child.kill();
        let _ = child.wait();
        // What the host's node decrypted; then what the CLI printed (not
        // the host's to read, but a secret printed there is a leak all the
        // same).
        std::thread::sleep(Duration::from_millis(50));
        let received = node.received();
        drop(node);
        let output = std::fs::read_to_string(&out).unwrap_or_default();
        let secrets = self.secrets(&self.tdx_joinsvc, &[]);
        let leaked = secrets.found_in("what the host's node received", &received);
        let what = if init { "Init" } else { "Recover" };
        if m == GuestMove::Honest {
            // The control: a fresh TD of the image gets the admin's call
            // (SEV-SNP: the CLI refuses the variant whatever the guest).
            return match (flow.tdx(), leaked) {
                (true, Some(_)) => Outcome::Converged(format!(
                    "the admin's {what} reached the fresh TD (its secrets in it)"
                )),
                (true, None) => Outcome::Refused(format!(
                    "the admin's {what} did not reach the fresh TD: {}",
                    short(first_line(&output))
                )),
                (false, None) if status.is_some_and(|s| !s.success()) => {
                    Outcome::Refused(format!("the CLI refuses: {}", short(first_line(&output))))
                }
                (false, _) => {
                    Outcome::Failure(format!("the admin's {what} went to an SEV-SNP guest"))
                }
            };
        }
        if let Some(found) = leaked {
            return Outcome::Failure(found);
        }
        if let Some(found) = secrets.found_in_text("the CLI's output", &output) {
            return Outcome::Failure(found);
        }
        if status.is_some_and(|s| s.success()) {
            return Outcome::Failure(format!("the admin's {what} succeeded on the host's guest"));
        }
        Outcome::Refused(format!(
            "the CLI refuses: {}{}",
            short(first_line(&output)),
            if received.is_empty() {
                ""
            } else {
                " (bytes without a secret reached the host)"
            }
        ))
    }

    fn next(&mut self) -> usize {
        self.cli_serial += 1;
        self.cli_serial
    }
}

/// The same launch as `s` (its `REPORT_ID` kept), for a second issuer.
fn same_launch(s: &TestReportSource) -> TestReportSource {
    TestReportSource {
        reporting: Arc::clone(&s.reporting),
        signing: Arc::clone(&s.signing),
        table_vcek: Arc::clone(&s.table_vcek),
        ask_der: s.ask_der.clone(),
        guest: s.guest,
        report_id: s.report_id,
    }
}

/// A joinsvc log line without its timestamp and level.
fn joinsvc_message(line: &str) -> &str {
    line.split_once("joinsvc")
        .map(|(_, rest)| rest.trim_start_matches([':', ' ']))
        .unwrap_or(line)
}

/// The first line the CLI printed (its error).
fn first_line(output: &str) -> &str {
    output.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// Whether `confboot recover` takes the admin's init secret.
fn recover_takes_init_secret(confboot: &Path) -> bool {
    let out = Command::new(confboot)
        .args(["recover", "--help"])
        .output()
        .expect("run confboot");
    [&out.stdout, &out.stderr]
        .iter()
        .any(|o| String::from_utf8_lossy(o).contains("--init-secret-file"))
}

/// A joinsvc accepting `variant` with the policy file `file` of `dir`.
fn joinsvc(dir: &Path, variant: &str, option: &str, file: &str) -> Joinsvc {
    let policy = dir.join(file).display().to_string();
    Joinsvc::start_with(
        &workspace_binary("joinsvc"),
        &MeasurementPolicy::default(),
        &[],
        &["--variants", variant, option, &policy],
    )
}

/// Asks `joinsvc` for a join ticket of `disk`, attesting with `issuer`.
fn join(
    joinsvc: &Joinsvc,
    issuer: &Arc<dyn Issuer>,
    disk: &str,
) -> Result<confboot_cluster::ticket::JoinTicket, String> {
    let mut client = SealedClient::connect(joinsvc.rpc_addr, CALL_BOUND, &[], Arc::clone(issuer))
        .map_err(|e| e.to_string())?;
    let req = IssueJoinTicketRequest {
        disk_uuid: disk.into(),
        ..Default::default()
    };
    client.join(&req, CALL_BOUND).map_err(|e| e.to_string())
}

/// Asks `joinsvc` for the rejoin ticket of `disk`.
fn rejoin(
    joinsvc: &Joinsvc,
    issuer: &Arc<dyn Issuer>,
    disk: &str,
) -> Result<confboot_cluster::ticket::RejoinTicket, String> {
    let mut client = SealedClient::connect(joinsvc.rpc_addr, CALL_BOUND, &[], Arc::clone(issuer))
        .map_err(|e| e.to_string())?;
    let req = IssueRejoinTicketRequest {
        disk_uuid: disk.into(),
    };
    client.rejoin(&req, CALL_BOUND).map_err(|e| e.to_string())
}

/// The test Intel's root and collateral and the image's TDX policy in
/// `dir` (`tdx.json`: MRTD and RTMRs 0 to 2 pinned; with `mrtd_only`,
/// `tdx-mrtd-only.json`: MRTD alone).
fn write_tdx_policy(dir: &Path, intel: &TestIntel, mrtd_only: bool) {
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    write("test-root.pem", intel.root_pem().as_bytes());
    write("tcb_info.json", intel.tcb_info().as_bytes());
    write("qe_identity.json", intel.qe_identity().as_bytes());
    write("pck_crl.der", &intel.pck_crl(&[]));
    write("root_crl.der", &intel.root_crl());
    write("tcb_chain.pem", intel.tcb_info_issuer_chain().as_bytes());
    let hex = confboot_util::hex::encode;
    let rtmrs = ccel(&GENUINE).replay();
    let pins = if mrtd_only {
        String::new()
    } else {
        format!(
            r#""rtmrs": {{"0": "{}", "1": "{}", "2": "{}"}},"#,
            hex(&rtmrs[0]),
            hex(&rtmrs[1]),
            hex(&rtmrs[2])
        )
    };
    let name = if mrtd_only {
        "tdx-mrtd-only.json"
    } else {
        "tdx.json"
    };
    write(
        name,
        format!(
            r#"{{"mrtd": "{}", {pins}
                "tdAttributes": ["SEPT_VE_DISABLE"],
                "rootCertificates": ["test-root.pem"],
                "collateral": {{"tcbInfo": "tcb_info.json", "qeIdentity": "qe_identity.json",
                    "pckCrl": "pck_crl.der", "rootCrl": "root_crl.der",
                    "tcbInfoIssuerChain": "tcb_chain.pem"}}}}"#,
            hex(&MRTD),
        )
        .as_bytes(),
    );
}

/// An SNP policy `name` in `dir` pinning the genuine image's launch
/// measurement (with `hashes`, of a measured direct boot), rooted in the
/// test ARK.
///
/// The policy declares the launch it was measured of, as an honest admin
/// writes it: a measured direct boot with the genuine image's kernel hashes
/// table, or (without `hashes`) `firmwareOnly`, which every binary refuses.
fn write_snp_policy(dir: &Path, amd: &TestAmd, name: &str, hashes: bool) {
    use ring::digest::{SHA256, digest};
    let sha = |b: &[u8]| confboot_util::hex::encode(digest(&SHA256, b).as_ref());
    let launch = if hashes {
        format!(
            r#""launch": "measuredDirectBoot", "kernelHash": "{}", "initrdHash": "{}", "cmdlineHash": "{}""#,
            sha(GENUINE.kernel.as_bytes()),
            sha(GENUINE.initrd.as_bytes()),
            sha(format!("{}\0", GENUINE.cmdline).as_bytes()),
        )
    } else {
        r#""launch": "firmwareOnly""#.to_string()
    };
    std::fs::write(dir.join("test-ark.pem"), amd.root_bundle_pem()).unwrap();
    std::fs::write(
        dir.join(name),
        format!(
            r#"{{"measurement": {{"expected": "{}"}}, {launch}, "rootBundles": ["test-ark.pem"]}}"#,
            confboot_util::hex::encode(&snp_measurement(&GENUINE, hashes)),
        ),
    )
    .unwrap();
}

/// Every (flow, step, move) of the guests.
pub fn guest_cases() -> Vec<(GuestFlow, Step, GuestMove)> {
    let mut all = Vec::new();
    for flow in GuestFlow::ALL {
        for m in GuestMove::ALL {
            for s in [Step::Start, Step::Exchange] {
                if m.applies(flow, &s) {
                    all.push((flow, s, m));
                }
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_parts_move_the_register_that_measures_them() {
        let genuine = ccel(&GENUINE).replay();
        for (m, register) in [
            (GuestMove::OwnAcpi, 0),
            (GuestMove::OwnKernel, 1),
            (GuestMove::OwnInitrd, 2),
            (GuestMove::OwnCmdline, 2),
        ] {
            let rtmrs = ccel(&m.image(GuestFlow::TdxJoin)).replay();
            for i in 0..4 {
                assert_eq!(rtmrs[i] != genuine[i], i == register, "{m:?} RTMR{i}");
            }
            // Under a measured direct boot the launch measurement moves
            // with every part but ACPI; without the hashes with none.
            let image = m.image(GuestFlow::SnpJoin);
            assert_eq!(
                snp_measurement(&image, true) != snp_measurement(&GENUINE, true),
                m != GuestMove::OwnAcpi
            );
            assert_eq!(
                snp_measurement(&image, false),
                snp_measurement(&GENUINE, false)
            );
        }
    }
}
