//! Fixtures for load under attack ([`crate::hostile`]): what a process uses
//! (file descriptors, memory, CPU, read from `/proc`), sampled while it
//! runs; and the two admin-facing servers of a bootstrapper (Init on a blank
//! node, Recover on an initialized one) with the admin's requests that each
//! must answer.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use confboot_atls as atls;
use confboot_attest::Validator;
use confboot_kms::MasterSecret;
use confboot_kms::init_secret;
use confboot_proto::init::InitRequest;
use confboot_proto::recover::RecoverMessage;
use confboot_vtpm::{AkTrust, VtpmValidator};
use confboot_wire::{Code, Status};

use crate::cluster::{NodeAwaitingInit, NodeDir, NodeTpm};
use crate::{ChildProcess, addr_after};

/// Open file descriptors of process `pid` (entries of `/proc/PID/fd`).
pub fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of the process or thread whose `stat` file is
/// at `path` (e.g. `/proc/PID/stat`).
pub fn cpu_seconds(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds used so far by process `pid`.
pub fn process_cpu_seconds(pid: u32) -> f64 {
    cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// Peaks of a process's open file descriptors and resident memory,
/// sampled every 20 ms from a thread until [`Sampler::stop`]. Listing a
/// busy server's descriptors costs CPU: [`Sampler::start_on`] keeps that
/// off the CPU the server is measured on.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peak_fds: Arc<AtomicU64>,
    peak_rss_kib: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

/// What a [`Sampler`] saw.
#[derive(Clone, Copy, Debug)]
pub struct Peaks {
    /// Most open file descriptors in one sample.
    pub fds: u64,
    /// Most resident memory in one sample (VmRSS), KiB.
    pub rss_kib: u64,
    /// Samples taken.
    pub samples: u64,
}

impl Sampler {
    /// Starts sampling process `pid`.
    pub fn start(pid: u32) -> Sampler {
        Self::sample(pid, None)
    }

    /// Starts sampling process `pid` from a thread pinned to CPU `cpu`.
    pub fn start_on(pid: u32, cpu: usize) -> Sampler {
        Self::sample(pid, Some(cpu))
    }

    fn sample(pid: u32, cpu: Option<usize>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak_fds = Arc::new(AtomicU64::new(0));
        let peak_rss_kib = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, fds, rss, n) = (
                Arc::clone(&stop),
                Arc::clone(&peak_fds),
                Arc::clone(&peak_rss_kib),
                Arc::clone(&samples),
            );
            std::thread::spawn(move || {
                if let Some(cpu) = cpu {
                    crate::hostile::pin_thread(nix::unistd::gettid().as_raw() as u32, cpu);
                }
                while !stop.load(Ordering::Relaxed) {
                    fds.fetch_max(open_fds(pid), Ordering::Relaxed);
                    rss.fetch_max(status_kib(pid, "VmRSS"), Ordering::Relaxed);
                    n.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Sampler {
            stop,
            peak_fds,
            peak_rss_kib,
            samples,
            thread: Some(thread),
        }
    }

    /// Stops sampling; returns the peaks.
    pub fn stop(mut self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Peaks {
            fds: self.peak_fds.load(Ordering::Relaxed),
            rss_kib: self.peak_rss_kib.load(Ordering::Relaxed),
            samples: self.samples.load(Ordering::Relaxed),
        }
    }
}

/// The "image" measured into the bootstrapper nodes' PCR 4.
const IMAGE: &[u8] = b"hostile-load node image";
/// The init secret the Init node is configured with.
const INIT_SECRET: &[u8] = b"correct horse battery staple";

/// One bootstrapper node and what the admin trusts it with.
struct AdminNode {
    process: ChildProcess,
    addr: SocketAddr,
    validator: Arc<dyn Validator>,
    _tpm: NodeTpm,
    _dir: NodeDir,
}

/// Two bootstrappers on loopback, each with its swtpm and disk image: one
/// blank, serving Init (port 9000's role), one whose disk was initialized
/// before and that finds no join service, serving Recover (9999's role).
pub struct AdminNodes {
    init: AdminNode,
    recover: AdminNode,
}

/// How long the admin's call may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

fn validator_for(tpm: &NodeTpm) -> Arc<dyn Validator> {
    Arc::new(VtpmValidator::new(
        AkTrust::Pinned(vec![tpm.ak_public.clone()]),
        tpm.policy(),
    ))
}

fn init_request(init_secret: &[u8], master: &MasterSecret) -> InitRequest {
    // InitRequest zeroizes its secrets when dropped: filled in place.
    let mut r = InitRequest::default();
    r.kms_uri = master.to_kms_uri().to_string();
    r.storage_uri = "storage://no-store".into();
    r.measurement_salt = vec![0x5a; 32];
    r.kubernetes_version = "v1.31.1".into();
    r.init_secret = init_secret.to_vec();
    r.cluster_name = "hostile-load".into();
    r
}

impl AdminNodes {
    /// Starts both nodes with `bootstrapper` (the Recover one is inited
    /// first, which formats its disk's LUKS2 header: a second or two).
    pub fn start(bootstrapper: &Path) -> AdminNodes {
        let hash = init_secret::hash(INIT_SECRET, init_secret::MIN_ITERATIONS);

        // The node to recover: inited, then booted again with no join
        // service to reach.
        let NodeAwaitingInit {
            dir,
            tpm,
            process: first,
            init_addr: addr,
        } = NodeAwaitingInit::start(bootstrapper, "hostile-recover", IMAGE, &hash);
        let (mut client, _) = atls::connect(addr, ADMIN_TIMEOUT, &[validator_for(&tpm)], None)
            .expect("connect to the node to init");
        let master = MasterSecret::generate().expect("a master secret");
        client
            .server_streaming(
                confboot_proto::INIT,
                &init_request(INIT_SECRET, &master),
                ADMIN_TIMEOUT,
                |_| Ok(()),
            )
            .expect("the node is inited");
        let (status, log) = first.wait();
        assert!(status.success(), "{}", log.join("\n"));
        drop(tpm);
        let tpm = dir.boot_tpm(IMAGE);
        let process = dir.bootstrapper(
            &tpm,
            &[
                "--join-endpoint",
                "127.0.0.1:1",
                "--init-secret-hash",
                &hash,
            ],
        );
        let addr = addr_after(
            &process.wait_for_line("recovery API listening on ", 3000),
            "listening on ",
        );
        let recover = AdminNode {
            process,
            addr,
            validator: validator_for(&tpm),
            _tpm: tpm,
            _dir: dir,
        };

        // The blank node, waiting for Init.
        let blank = NodeAwaitingInit::start(bootstrapper, "hostile-init", IMAGE, &hash);
        let init = AdminNode {
            validator: validator_for(&blank.tpm),
            process: blank.process,
            addr: blank.init_addr,
            _tpm: blank.tpm,
            _dir: blank.dir,
        };
        AdminNodes { init, recover }
    }

    /// The Init server's address.
    pub fn init_addr(&self) -> SocketAddr {
        self.init.addr
    }

    /// The recovery server's address.
    pub fn recover_addr(&self) -> SocketAddr {
        self.recover.addr
    }

    /// The bootstrapper processes (Init, Recover), for their pids and logs.
    pub fn processes(&self) -> [&ChildProcess; 2] {
        [&self.init.process, &self.recover.process]
    }

    /// The admin (at 127.0.0.1, verifying the node's attestation) sends an
    /// Init with a wrong init secret; `Ok` with the time it took when the
    /// node answered as it must (PERMISSION_DENIED, wrong init secret), and
    /// the node stays blank.
    pub fn ask_init(&self) -> Result<Duration, Status> {
        let t = Instant::now();
        let (mut client, _) = atls::connect(
            self.init.addr,
            ADMIN_TIMEOUT,
            &[Arc::clone(&self.init.validator)],
            None,
        )
        .map_err(|e| Status::unavailable(e.to_string()))?;
        let master = MasterSecret::generate().expect("a master secret");
        let answer = client.server_streaming(
            confboot_proto::INIT,
            &init_request(b"a wrong guess", &master),
            ADMIN_TIMEOUT,
            |_| Ok(()),
        );
        match answer {
            Err(s) if s.code == Code::PermissionDenied && s.message.contains("init secret") => {
                Ok(t.elapsed())
            }
            Err(s) => Err(s),
            Ok(()) => Err(Status::internal("a wrong init secret was taken")),
        }
    }

    /// The admin sends Recover with the init secret and a master secret
    /// that does not open the node's disk; `Ok` with the time it took when the node answered as it
    /// must (PERMISSION_DENIED: the key does not open the disk).
    pub fn ask_recover(&self) -> Result<Duration, Status> {
        let t = Instant::now();
        let (mut client, _) = atls::connect(
            self.recover.addr,
            ADMIN_TIMEOUT,
            &[Arc::clone(&self.recover.validator)],
            None,
        )
        .map_err(|e| Status::unavailable(e.to_string()))?;
        let wrong = MasterSecret::generate().expect("a master secret");
        let req = RecoverMessage {
            kms_uri: wrong.to_kms_uri().to_string(),
            storage_uri: "storage://no-store".into(),
            init_secret: INIT_SECRET.to_vec(),
            measurement_salt: vec![5; 32],
            min_generations: Default::default(),
        };
        match client.unary(confboot_proto::RECOVER, &req, ADMIN_TIMEOUT) {
            Err(s) if s.code == Code::PermissionDenied && s.message.contains("does not open") => {
                Ok(t.elapsed())
            }
            Err(s) => Err(s),
            Ok(_) => Err(Status::internal("a wrong master secret recovered the node")),
        }
    }
}
