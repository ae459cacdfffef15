//! `nodeagent cluster-step`: the cluster step the bootstrapper handed over
//! ([`confboot_cluster::handoff`]), run once in the node's OS by the unit
//! `confboot-cluster-step.service`.
//!
//! It reads the handoff directory once. For an init it installs the
//! cluster CA made before the handover in kubeadm's PKI directory and the
//! admin's kubeconfig in the Kubernetes directory, then runs `kubeadm
//! init`; for a join it runs `kubeadm join` with the handed-over
//! parameters. A failure is retried with backoff until a deadline: the
//! bootstrap token's end for a join (never more than its whole life from
//! now, whatever the clock says), [`INIT_DEADLINE`] for an init.
//!
//! On success it writes `cluster-step.done` and deletes every secret from
//! the handoff directory (the parameters file stays). On final failure,
//! once the deadline has passed, it deletes the secrets too: a join's
//! token no longer works by then, and nothing should keep keys on a node
//! whose step failed; a manual rerun is possible while the step is still
//! retrying. A step already done does nothing.
//!
//! This runs in the `nodeagent` binary only: the bootstrapper, which runs
//! as the node agent in the initramfs, has no use for it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use confboot_cluster::handoff::{
    self, BOOTSTRAP_TOKEN_TTL, DEFAULT_HANDOFF_DIR, Handoff, HandoffError,
};
use confboot_cluster::kubeadm::{
    DEFAULT_ADMIN_KUBECONFIG, DEFAULT_CONFIG_DIR, DEFAULT_KUBELET_CERT_DIR, DEFAULT_PKI_DIR,
    ImageTag, check_phase,
};
use confboot_cluster::{ClusterBackend, ClusterError, KubeadmBackend};
use confboot_sys::process::{CommandRunner, ProcessRunner};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, exit_usage, parse_or_exit};
use confboot_util::backoff::Backoff;
use confboot_util::stop::Stop;

/// How long a failing init is retried.
pub const INIT_DEADLINE: Duration = Duration::from_secs(15 * 60);
/// The first wait after a failure.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between attempts.
const LONGEST_RETRY: Duration = Duration::from_secs(30);
/// The least time one kubeadm run is given, even past the deadline.
const SHORTEST_RUN: Duration = Duration::from_secs(60);
/// The longest one kubeadm run is given.
const LONGEST_RUN: Duration = Duration::from_secs(15 * 60);

const HANDOFF: Opt = Opt::value(
    "handoff",
    "DIR",
    "The handoff directory the bootstrapper wrote (cluster-step.json and its secrets)",
)
.default(DEFAULT_HANDOFF_DIR);
const KUBEADM: Opt = Opt::value("kubeadm", "PATH", "The kubeadm program").default("kubeadm");
const PKI_DIR: Opt = Opt::value(
    "pki-dir",
    "DIR",
    "kubeadm's PKI directory (an init's cluster CA is installed here)",
)
.default(DEFAULT_PKI_DIR);
const KUBERNETES_DIR: Opt = Opt::value(
    "kubernetes-dir",
    "DIR",
    "Where kubeadm keeps admin.conf (an init's admin kubeconfig is installed here)",
)
.default("/etc/kubernetes");
const KUBEADM_CONFIG_DIR: Opt = Opt::value(
    "kubeadm-config-dir",
    "DIR",
    "Where kubeadm's configuration file is written for the run (0700; removed after)",
)
.default(DEFAULT_CONFIG_DIR);
const KUBELET_CERT_DIR: Opt = Opt::value(
    "kubelet-cert-dir",
    "DIR",
    "Where a join's kubelet serving certificate and key are installed (the kubelet's --cert-dir)",
)
.default(DEFAULT_KUBELET_CERT_DIR);

const INIT_SKIP_PHASES: Opt = Opt::value(
    "init-skip-phases",
    "LIST",
    "kubeadm init phases to skip, comma-separated (an image that carries no CoreDNS or kube-proxy \
     image skips addon/coredns,addon/kube-proxy)",
)
.default("preflight")
.env("CONFBOOT_INIT_SKIP_PHASES");
const INIT_WAIT: Opt = Opt::value(
    "init-wait",
    "SECONDS",
    "How long kubeadm init waits for the kubelet, the control-plane components and each API or \
     etcd call (kubeadm's timeouts; default kubeadm's own, 4 minutes for the components)",
)
.env("CONFBOOT_INIT_WAIT");
const ETCD_IMAGE_TAG: Opt = Opt::value(
    "etcd-image-tag",
    "TAG",
    "The tag of the etcd image an init's static pod runs (the image the OS carries; default \
     kubeadm's)",
)
.env("CONFBOOT_ETCD_IMAGE_TAG");

/// The longest `--init-wait`: one kubeadm run is given at most
/// [`LONGEST_RUN`].
const MOST_INIT_WAIT: u64 = 14 * 60;

const CONTROL_PLANE_IMAGES: Opt = Opt::value(
    "control-plane-images",
    "DIR",
    "Image tarballs (*.tar) a control plane imports into containerd before kubeadm runs (an \
     init, a control-plane join): kubeadm's static pods, which are never pulled; default none",
)
.env("CONFBOOT_CONTROL_PLANE_IMAGES");
const CTR: Opt = Opt::value(
    "ctr",
    "PATH",
    "containerd's ctr, which imports --control-plane-images",
)
.default("ctr");

/// The longest one image import is given.
const LONGEST_IMPORT: Duration = Duration::from_secs(10 * 60);
/// The most image tarballs `--control-plane-images` may hold.
const MOST_IMAGES: usize = 16;

const WITHOUT_KUBERNETES: Opt = Opt::flag(
    "without-kubernetes",
    "This OS image carries no Kubernetes (a test image): do everything but run kubeadm",
);

/// `nodeagent cluster-step`'s command line.
pub const CMD: Command = Command {
    name: "nodeagent cluster-step",
    about: "nodeagent cluster-step: runs the cluster step the bootstrapper handed over in --handoff,\n\
            once, in the node's OS (the unit confboot-cluster-step.service). An init installs the\n\
            cluster CA and the admin kubeconfig made at Init, then runs `kubeadm init`, which keeps\n\
            them; a join runs `kubeadm join`. Failures are retried with backoff until the bootstrap\n\
            token's end (join) or 15 minutes (init). Afterwards, success or not, the handoff's\n\
            secrets are deleted; success also writes cluster-step.done, and a step already done\n\
            does nothing. With --without-kubernetes (an image without Kubernetes) kubeadm is not\n\
            run: the handoff is read and checked, an init's CA and kubeconfig installed, the secrets\n\
            deleted, and nothing is marked done. Exits 0 when the step is done, 1 when it failed, 2\n\
            on a usage error.",
    usage: "nodeagent cluster-step [OPTIONS]",
    opts: &[
        HANDOFF,
        KUBEADM,
        PKI_DIR,
        KUBERNETES_DIR,
        KUBEADM_CONFIG_DIR,
        KUBELET_CERT_DIR,
        INIT_SKIP_PHASES,
        INIT_WAIT,
        ETCD_IMAGE_TAG,
        CONTROL_PLANE_IMAGES,
        CTR,
        WITHOUT_KUBERNETES,
        VERBOSITY,
    ],
};

/// Everything the cluster step runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepConfig {
    /// The handoff directory.
    pub handoff: PathBuf,
    /// The kubeadm program.
    pub kubeadm: PathBuf,
    /// kubeadm's PKI directory.
    pub pki_dir: PathBuf,
    /// Where kubeadm keeps `admin.conf`.
    pub kubernetes_dir: PathBuf,
    /// Where kubeadm's configuration file is written.
    pub kubeadm_config_dir: PathBuf,
    /// The kubelet's certificate directory.
    pub kubelet_cert_dir: PathBuf,
    /// `kubeadm init`'s skipped phases.
    pub init_skip_phases: Vec<String>,
    /// How long `kubeadm init` waits; `None`: kubeadm's defaults.
    pub init_wait: Option<Duration>,
    /// The etcd image's tag; `None`: kubeadm's.
    pub etcd_image_tag: Option<ImageTag>,
    /// The images a control plane imports before kubeadm runs.
    pub control_plane_images: Option<PathBuf>,
    /// containerd's `ctr`.
    pub ctr: PathBuf,
    /// The image carries no Kubernetes: kubeadm is not run.
    pub without_kubernetes: bool,
}

impl StepConfig {
    /// Reads every option; the error names the option.
    pub fn from_matches(m: &Matches) -> Result<StepConfig, String> {
        let path = |opt: &Opt| PathBuf::from(m.value(opt).expect("has a default"));
        let init_skip_phases: Vec<String> = m
            .value(&INIT_SKIP_PHASES)
            .expect("has a default")
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        for phase in &init_skip_phases {
            check_phase(phase).map_err(|e| format!("--{}: {e}", INIT_SKIP_PHASES.long))?;
        }
        let init_wait = match m.parsed::<u64>(&INIT_WAIT) {
            Ok(None) => None,
            Ok(Some(s @ 1..=MOST_INIT_WAIT)) => Some(Duration::from_secs(s)),
            _ => {
                return Err(format!(
                    "--{}: want 1 to {MOST_INIT_WAIT} seconds",
                    INIT_WAIT.long
                ));
            }
        };
        let etcd_image_tag = m
            .value(&ETCD_IMAGE_TAG)
            .map(ImageTag::parse)
            .transpose()
            .map_err(|e| format!("--{}: {e}", ETCD_IMAGE_TAG.long))?;
        Ok(StepConfig {
            handoff: path(&HANDOFF),
            kubeadm: path(&KUBEADM),
            pki_dir: path(&PKI_DIR),
            kubernetes_dir: path(&KUBERNETES_DIR),
            kubeadm_config_dir: path(&KUBEADM_CONFIG_DIR),
            kubelet_cert_dir: path(&KUBELET_CERT_DIR),
            init_skip_phases,
            init_wait,
            etcd_image_tag,
            control_plane_images: m.value(&CONTROL_PLANE_IMAGES).map(PathBuf::from),
            ctr: path(&CTR),
            without_kubernetes: m.flag(&WITHOUT_KUBERNETES),
        })
    }

    /// Where `kubeadm init` leaves the admin kubeconfig.
    fn admin_kubeconfig(&self) -> PathBuf {
        let name = Path::new(DEFAULT_ADMIN_KUBECONFIG)
            .file_name()
            .expect("a file name");
        self.kubernetes_dir.join(name)
    }

    /// The kubeadm backend, each run limited to `run_limit`.
    fn backend(&self, run_limit: Duration) -> KubeadmBackend {
        let mut b = KubeadmBackend::new(Box::new(ProcessRunner::new(Some(run_limit), Stop::new())));
        b.kubeadm = self.kubeadm.clone();
        b.config_dir = self.kubeadm_config_dir.clone();
        b.pki_dir = self.pki_dir.clone();
        b.admin_kubeconfig = self.admin_kubeconfig();
        b.kubelet_cert_dir = self.kubelet_cert_dir.clone();
        b.init_skip_phases = self.init_skip_phases.clone();
        b.init_wait = self.init_wait;
        b.etcd_image_tag = self.etcd_image_tag.clone();
        b
    }
}

/// Why the cluster step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The handoff is unusable: nothing was run.
    #[error("the handoff in {dir} is unusable: {error}")]
    Handoff {
        /// The handoff directory.
        dir: String,
        /// Why.
        error: HandoffError,
    },
    /// The control plane's images did not import: kubeadm was not run.
    #[error("importing the control plane's images: {0}")]
    Images(String),
    /// Every attempt failed until the deadline.
    #[error("kubeadm {kind} failed {attempts} times until its deadline; the last error: {last}")]
    GaveUp {
        /// `init` or `join`.
        kind: &'static str,
        /// How many runs failed.
        attempts: u32,
        /// The last failure.
        last: ClusterError,
    },
}

/// `nodeagent cluster-step ARGS`: parses `args` (those after `cluster-step`),
/// runs the step and returns the exit code.
pub fn main(args: impl IntoIterator<Item = String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    if let Some(extra) = m.positional().first() {
        exit_usage(&CMD, &format!("unexpected argument {extra:?}"));
    }
    let verbosity = m.verbosity().unwrap_or_else(|e| exit_usage(&CMD, &e));
    confboot_util::logging::init("nodeagent", verbosity);
    let config = StepConfig::from_matches(&m).unwrap_or_else(|e| exit_usage(&CMD, &e));
    match run(&config, &mut |line| println!("cluster step: {line}")) {
        Ok(()) => 0,
        Err(e) => {
            println!("cluster step: FAILED: {e}");
            log::error!("cluster step failed: {e}");
            1
        }
    }
}

/// Runs the step in `config.handoff`, reporting what it does to `say`
/// (never a secret).
pub fn run(config: &StepConfig, say: &mut dyn FnMut(&str)) -> Result<(), StepError> {
    let dir = &config.handoff;
    if handoff::is_done(dir) {
        say(&format!("already done ({}): nothing to do", dir.display()));
        return Ok(());
    }
    let unusable = |error| StepError::Handoff {
        dir: dir.display().to_string(),
        error,
    };
    let handoff = Handoff::read(dir).map_err(unusable)?;
    let started = Instant::now();
    let (kind, deadline) = match &handoff {
        Handoff::Init(init) => {
            init.install(&config.pki_dir, &config.admin_kubeconfig())
                .map_err(unusable)?;
            say(&format!(
                "cluster CA installed in {}, admin kubeconfig at {}",
                config.pki_dir.display(),
                config.admin_kubeconfig().display()
            ));
            ("init", started + INIT_DEADLINE)
        }
        Handoff::Join(join) => (
            "join",
            started + token_time_left(join.token_valid_until, SystemTime::now()),
        ),
    };
    if config.without_kubernetes {
        say(&format!(
            "this image carries no Kubernetes: kubeadm {kind} not run"
        ));
        remove_secrets(dir, say);
        return Ok(());
    }
    let control_plane = match &handoff {
        Handoff::Init(_) => true,
        Handoff::Join(join) => join.params.is_control_plane,
    };
    if let (true, Some(images)) = (control_plane, &config.control_plane_images)
        && let Err(e) = import_images(&config.ctr, images, say)
    {
        remove_secrets(dir, say);
        return Err(e);
    }
    let mut backoff = Backoff::new(FIRST_RETRY, LONGEST_RETRY);
    let mut attempts = 0;
    let mut log = |line: &str| log::info!("kubeadm: {line}");
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let backend = config.backend(left.clamp(SHORTEST_RUN, LONGEST_RUN));
        let result = match &handoff {
            Handoff::Init(init) => backend.init_cluster(&init.params, &mut log).map(|out| {
                if out.kubeconfig == init.admin_kubeconfig {
                    say("kubeadm kept the admin kubeconfig Init returned");
                } else {
                    say("WARNING: kubeadm replaced admin.conf: the kubeconfig Init returned may not work");
                }
            }),
            Handoff::Join(join) => backend.join_cluster(&join.params, &mut log),
        };
        let error = match result {
            Ok(()) => break,
            Err(e) => e,
        };
        let delay = backoff.next_delay();
        if Instant::now() + delay >= deadline {
            remove_secrets(dir, say);
            return Err(StepError::GaveUp {
                kind,
                attempts,
                last: error,
            });
        }
        say(&format!(
            "kubeadm {kind} attempt {attempts} failed: {error}; retrying in {:.1} s",
            delay.as_secs_f64()
        ));
        std::thread::sleep(delay);
    }
    let summary = format!(
        "kubeadm {kind} succeeded after {attempts} attempt(s) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = handoff::mark_done(dir, &summary) {
        log::error!("cannot mark the cluster step done: {e}");
    }
    say(&summary);
    remove_secrets(dir, say);
    Ok(())
}

/// Imports every `*.tar` in `dir` (in name order, at most [`MOST_IMAGES`])
/// into containerd's `k8s.io` namespace, the kubelet's, with `ctr`.
fn import_images(ctr: &Path, dir: &Path, say: &mut dyn FnMut(&str)) -> Result<(), StepError> {
    let fail = |e: String| StepError::Images(e);
    let entries = std::fs::read_dir(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    let mut tars = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| fail(format!("{}: {e}", dir.display())))?
            .path();
        if path.extension().is_some_and(|x| x == "tar") {
            tars.push(path);
            if tars.len() > MOST_IMAGES {
                return Err(fail(format!(
                    "{} holds more than {MOST_IMAGES} images",
                    dir.display()
                )));
            }
        }
    }
    if tars.is_empty() {
        return Err(fail(format!("{} holds no image (*.tar)", dir.display())));
    }
    tars.sort();
    let started = Instant::now();
    let runner = ProcessRunner::new(Some(LONGEST_IMPORT), Stop::new());
    for tar in &tars {
        let args: Vec<String> = [
            "--namespace",
            "k8s.io",
            "images",
            "import",
            "--platform",
            "linux/amd64",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([tar.to_string_lossy().into_owned()])
        .collect();
        let mut log = |_: confboot_sys::process::Stream, line: &str| log::info!("ctr: {line}");
        let out = runner
            .run(ctr, &args, None, &mut log)
            .map_err(|e| fail(format!("{}: {e}", ctr.display())))?;
        if !out.success() {
            return Err(fail(format!(
                "{} {}: exit {:?}: {}",
                ctr.display(),
                tar.display(),
                out.status,
                out.stderr_tail.join("\n")
            )));
        }
    }
    say(&format!(
        "control-plane images imported ({}) in {:.1} s",
        tars.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Deletes the handoff's secrets, saying which; a failure is logged (the
/// step's outcome stands).
fn remove_secrets(dir: &Path, say: &mut dyn FnMut(&str)) {
    match handoff::remove_secrets(dir) {
        Ok(removed) => say(&format!(
            "secrets deleted from {}: [{}]",
            dir.display(),
            removed.join(", ")
        )),
        Err(e) => log::error!("cannot delete the handoff's secrets: {e}"),
    }
}

/// How long a token valid until `valid_until` (seconds since the epoch)
/// still works at `now`: never more than its whole life, whatever the
/// clock says.
fn token_time_left(valid_until: u64, now: SystemTime) -> Duration {
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    Duration::from_secs(valid_until.saturating_sub(now)).min(BOOTSTRAP_TOKEN_TTL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_s_time_left_is_bounded_by_its_life() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(token_time_left(1_000_600, now), Duration::from_secs(600));
        assert_eq!(token_time_left(999_000, now), Duration::ZERO);
        assert_eq!(token_time_left(u64::MAX, now), BOOTSTRAP_TOKEN_TTL);
    }

    #[test]
    fn every_option_is_declared_and_read() {
        let m = CMD.parse(Vec::<String>::new()).unwrap();
        let c = StepConfig::from_matches(&m).unwrap();
        assert_eq!(c.handoff, PathBuf::from("/run/confboot"));
        assert_eq!(
            c.admin_kubeconfig(),
            PathBuf::from("/etc/kubernetes/admin.conf")
        );
        assert_eq!(c.pki_dir, PathBuf::from("/etc/kubernetes/pki"));
        assert!(CMD.help().contains("--kubeadm PATH"));
        assert!(!c.without_kubernetes);
        assert_eq!(c.init_skip_phases, ["preflight"]);
        assert_eq!((c.init_wait, c.etcd_image_tag), (None, None));
    }

    #[test]
    fn the_init_options_are_read_and_bad_ones_named() {
        let parse = |args: &[&str]| {
            let m = CMD
                .parse(args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
                .unwrap();
            StepConfig::from_matches(&m)
        };
        let c = parse(&[
            "--init-skip-phases",
            "preflight,addon/coredns,addon/kube-proxy",
            "--init-wait",
            "600",
            "--etcd-image-tag",
            "v3.7.3",
        ])
        .unwrap();
        assert_eq!(
            c.init_skip_phases,
            ["preflight", "addon/coredns", "addon/kube-proxy"]
        );
        assert_eq!(c.init_wait, Some(Duration::from_secs(600)));
        assert_eq!(c.etcd_image_tag.unwrap().as_str(), "v3.7.3");
        let backend = parse(&["--init-wait", "600"])
            .unwrap()
            .backend(Duration::from_secs(60));
        assert_eq!(backend.init_wait, Some(Duration::from_secs(600)));
        for (args, named) in [
            (["--init-wait", "0"], "--init-wait"),
            (["--init-wait", "900"], "--init-wait"),
            (["--init-skip-phases", "Preflight"], "--init-skip-phases"),
            (["--init-skip-phases", "addon//x"], "--init-skip-phases"),
            (["--etcd-image-tag", "-x"], "--etcd-image-tag"),
            (["--etcd-image-tag", "a:b"], "--etcd-image-tag"),
        ] {
            let e = parse(&args).unwrap_err();
            assert!(e.starts_with(named), "{args:?}: {e}");
        }
    }
}
