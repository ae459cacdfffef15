//! Boots real VMs under software emulation: QEMU (`-accel tcg -cpu max`)
//! with OVMF (q35, measured boot), its own swtpm (a vTPM over a unix
//! socket), an optional virtio disk and restricted user networking that
//! reaches only the host loopback ports it is given. The serial console goes
//! to a file; every process is ended when the [`Vm`] is dropped, and a `Vm`
//! dropped while the test panics prints the console's tail.
//!
//! ```no_run
//! use confboot_tests::qemu::{Vm, VmConfig, Image};
//! use std::time::Duration;
//! let image = Image::build("doc", None, "0").unwrap();
//! let mut vm = Vm::boot(VmConfig::new(&image.kernel, &image.initrd, "confboot.probe=1"));
//! vm.wait_for_line("CONFBOOT-PROBE-END", Duration::from_secs(120));
//! let pcrs = vm.pcrs();
//! vm.wait_exit(Duration::from_secs(30));
//! assert!(pcrs.contains_key(&4));
//! ```

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use confboot_attest::MeasurementPolicy;
use confboot_measure::{DirectBoot, InitrdDigest};
use confboot_tpm::event_log::{EventList, EventLog};
use confboot_tpm::swtpm::Swtpm;
use confboot_vtpm::VtpmIssuer;

use crate::ChildProcess;
use crate::cluster::TempDir;

/// OVMF's code (read-only pflash) from Debian's `ovmf`.
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
/// OVMF's variable store template; each VM gets a private copy.
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// Kernel parameters every boot gets before the caller's.
pub const BASE_CMDLINE: &str = "console=ttyS0 quiet panic=-1";
/// The guest address that `host_ports` forward from.
pub const GUEST_FORWARD_ADDR: &str = "10.0.2.100";
/// The guest port a node VM reaches the host's joinsvc at
/// ([`GUEST_FORWARD_ADDR`]:9090, forwarded to joinsvc's port on the host).
pub const JOIN_PORT: u16 = 9090;
/// The line `/init` prints with the SHA-256 PCR bank.
pub const PCRS_MARKER: &str = "CONFBOOT-PCRS ";
/// The line `/init` prints with the firmware's TCG event log (base64).
pub const EVENT_LOG_MARKER: &str = "CONFBOOT-EVENTLOG ";
/// The line `/init` prints when probe mode is done.
pub const PROBE_END: &str = "CONFBOOT-PROBE-END";
/// How many console lines a failing test shows.
pub const TAIL_LINES: usize = 60;

/// What to boot and with which devices.
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// The kernel (bzImage / EFI stub).
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// Kernel parameters after [`BASE_CMDLINE`].
    pub cmdline: String,
    /// A raw image attached as virtio-blk (`/dev/vda` in the guest).
    pub disk: Option<PathBuf>,
    /// The OS root image (`os/build.sh`), attached read-only as the next
    /// virtio-blk (`/dev/vdb` after a [`disk`](Self::disk)).
    pub root_disk: Option<PathBuf>,
    /// `(guest port, host loopback port)`: the guest reaches
    /// `127.0.0.1:host` at `10.0.2.100:guest`, and nothing else (restrict=on).
    pub host_ports: Vec<(u16, u16)>,
    /// `(host loopback port, guest port)`: the host reaches the guest's
    /// `10.0.2.15:guest` at `127.0.0.1:host` (QEMU `hostfwd`, bound to
    /// 127.0.0.1 only); `restrict=on` still keeps the guest from reaching
    /// anything but its `host_ports`.
    pub host_forwards: Vec<(u16, u16)>,
    /// Boot through OVMF (measures kernel → PCR 4, initrd and command line →
    /// PCR 9); false boots SeaBIOS (faster, unmeasured).
    pub ovmf: bool,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// The swtpm state directory to use and keep (the same TPM across
    /// boots); `None` gives a fresh TPM removed with the VM.
    pub tpm_state: Option<PathBuf>,
    /// A name for messages and the work directory.
    pub name: String,
    /// More QEMU arguments, after the first NIC (e.g. a second NIC on a
    /// [`crate::vm_hub::VmHub`]).
    pub extra_args: Vec<String>,
    /// The host name QEMU's DHCP server gives the guest (option 12; the
    /// node's name when it is a valid one); `None`: none.
    pub dhcp_host_name: Option<String>,
}

impl VmConfig {
    /// OVMF, 1 GiB, no disk, no host ports, a fresh TPM.
    pub fn new(kernel: &Path, initrd: &Path, cmdline: &str) -> VmConfig {
        VmConfig {
            kernel: kernel.to_path_buf(),
            initrd: initrd.to_path_buf(),
            cmdline: cmdline.to_string(),
            disk: None,
            root_disk: None,
            host_ports: Vec::new(),
            host_forwards: Vec::new(),
            ovmf: true,
            memory_mib: 1024,
            tpm_state: None,
            name: "vm".to_string(),
            extra_args: Vec::new(),
            dhcp_host_name: None,
        }
    }
}

/// Peak resident memory (VmHWM) of the VM's processes, in KiB, as last read.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeakRss {
    /// QEMU's VmHWM.
    pub qemu_kib: u64,
    /// swtpm's VmHWM.
    pub swtpm_kib: u64,
}

/// A running (or finished) VM with its swtpm. Drop it on the thread that
/// booted it (its processes die with that thread, see `reaped_with_us`).
pub struct Vm {
    name: String,
    qemu: Option<ChildProcess>,
    qemu_pid: u32,
    status: Option<ExitStatus>,
    swtpm: Option<ChildProcess>,
    swtpm_pid: u32,
    serial_path: PathBuf,
    started: Instant,
    peak: PeakRss,
    /// What was booted, for `confboot measure`'s prediction (OVMF boots
    /// only; predicted when a test asks).
    measured_boot: Option<VmConfig>,
    // Dropped last: the work directory (VARS copy, socket, serial log).
    _dir: TempDir,
}

/// VmHWM of a process in KiB, if it is still there.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Whether a child (not yet reaped) has exited: it is a zombie then.
fn is_zombie_or_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X'))
            .unwrap_or(false),
        Err(_) => true,
    }
}

/// `program` run through `setpriv --pdeathsig KILL` (util-linux), which
/// execs it: the process is killed by the kernel if the thread that started
/// it dies without dropping the [`Vm`] (a test process killed with SIGKILL).
/// A `Vm` must therefore be dropped on the thread that booted it.
fn reaped_with_us(program: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--pdeathsig", "KILL", "--", program]);
    c
}

fn wait_for_path(path: &Path, bound: Duration, what: &str) {
    let deadline = Instant::now() + bound;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{what}: {} did not appear within {bound:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Vm {
    /// Starts swtpm and QEMU for `config`; panics with a clear message when a
    /// part is missing (Debian packages qemu-system-x86, ovmf, swtpm,
    /// netcat-openbsd).
    pub fn boot(config: VmConfig) -> Vm {
        crate::require_program("swtpm", "swtpm");
        crate::require_program("qemu-system-x86_64", "qemu-system-x86");
        crate::require_program("setpriv", "util-linux");
        let measured_boot = config.ovmf.then(|| config.clone());
        let dir = TempDir::new(&format!("vm-{}", config.name));
        let serial_path = dir.path().join("serial.log");
        let sock = dir.path().join("swtpm.sock");
        let tpm_state = config
            .tpm_state
            .clone()
            .unwrap_or_else(|| dir.path().join("tpm"));
        std::fs::create_dir_all(&tpm_state).expect("swtpm state dir");

        let mut swtpm_cmd = reaped_with_us("swtpm");
        swtpm_cmd
            .arg("socket")
            .arg("--tpm2")
            .arg("--tpmstate")
            .arg(format!("dir={}", tpm_state.display()))
            .arg("--ctrl")
            .arg(format!("type=unixio,path={}", sock.display()))
            .arg("--terminate")
            .stdout(std::process::Stdio::null());
        let swtpm = ChildProcess::spawn("swtpm (install Debian swtpm)", swtpm_cmd);
        let swtpm_pid = swtpm.id();
        wait_for_path(&sock, Duration::from_secs(10), "swtpm's control socket");

        let mut qemu_cmd = reaped_with_us("qemu-system-x86_64");
        qemu_cmd
            .args(["-accel", "tcg", "-cpu", "max", "-smp", "1"])
            .args(["-m", &config.memory_mib.to_string()])
            .args(["-nographic", "-no-reboot", "-monitor", "none"])
            .arg("-serial")
            .arg(format!("file:{}", serial_path.display()))
            .arg("-kernel")
            .arg(&config.kernel)
            .arg("-initrd")
            .arg(&config.initrd)
            .arg("-append")
            .arg(format!("{BASE_CMDLINE} {}", config.cmdline))
            .arg("-chardev")
            .arg(format!("socket,id=chrtpm,path={}", sock.display()))
            .args(["-tpmdev", "emulator,id=tpm0,chardev=chrtpm"])
            .args(["-device", "tpm-tis,tpmdev=tpm0"])
            .stdout(std::process::Stdio::null());
        if config.ovmf {
            let vars = dir.path().join("OVMF_VARS.fd");
            std::fs::copy(OVMF_VARS, &vars)
                .unwrap_or_else(|e| panic!("copy {OVMF_VARS} (install Debian ovmf): {e}"));
            qemu_cmd
                .args(["-machine", "q35"])
                .arg("-drive")
                .arg(format!(
                    "if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"
                ))
                .arg("-drive")
                .arg(format!(
                    "if=pflash,format=raw,unit=1,file={}",
                    vars.display()
                ));
        } else {
            qemu_cmd.args(["-machine", "pc"]);
        }
        if let Some(disk) = &config.disk {
            qemu_cmd
                .arg("-drive")
                .arg(format!(
                    "if=none,id=d0,format=raw,cache=unsafe,file={}",
                    disk.display()
                ))
                .args(["-device", "virtio-blk-pci,drive=d0"]);
        }
        if let Some(root) = &config.root_disk {
            qemu_cmd
                .arg("-drive")
                .arg(format!(
                    "if=none,id=d1,format=raw,readonly=on,file={}",
                    root.display()
                ))
                .args(["-device", "virtio-blk-pci,drive=d1"]);
        }
        let mut netdev = "user,id=n0,restrict=on".to_string();
        if let Some(name) = &config.dhcp_host_name {
            netdev.push_str(&format!(",hostname={name}"));
        }
        for (guest, host) in &config.host_ports {
            netdev.push_str(&format!(
                ",guestfwd=tcp:{GUEST_FORWARD_ADDR}:{guest}-cmd:nc 127.0.0.1 {host}"
            ));
        }
        for (host, guest) in &config.host_forwards {
            netdev.push_str(&format!(",hostfwd=tcp:127.0.0.1:{host}-:{guest}"));
        }
        qemu_cmd
            .arg("-netdev")
            .arg(netdev)
            .args(["-device", "virtio-net-pci,netdev=n0"])
            .args(&config.extra_args);

        let started = Instant::now();
        let qemu = ChildProcess::spawn(
            "qemu-system-x86_64 (install Debian qemu-system-x86)",
            qemu_cmd,
        );
        let qemu_pid = qemu.id();
        eprintln!("[{}] booting: {}", config.name, config.cmdline);
        Vm {
            name: config.name,
            qemu: Some(qemu),
            qemu_pid,
            status: None,
            swtpm: Some(swtpm),
            swtpm_pid,
            serial_path,
            started,
            peak: PeakRss::default(),
            measured_boot,
            _dir: dir,
        }
    }

    /// Boots `config` under SeaBIOS (a probe boot measures nothing, and
    /// SeaBIOS boots in half the time of OVMF), waits up to `boot_bound`
    /// for the probe's end marker ([`PROBE_END`]) and up to `exit_bound`
    /// for QEMU to exit; panics with the console unless QEMU exited
    /// successfully.
    pub fn boot_probe(mut config: VmConfig, boot_bound: Duration, exit_bound: Duration) -> Vm {
        config.ovmf = false;
        let mut vm = Vm::boot(config);
        vm.wait_for_line(PROBE_END, boot_bound);
        let status = vm.wait_exit(exit_bound);
        assert!(
            status.success(),
            "QEMU exited with {status}\n{}",
            vm.failure_report()
        );
        vm
    }

    /// The serial console so far.
    pub fn serial(&self) -> String {
        std::fs::read(&self.serial_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Time since QEMU was started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Peak RSS of QEMU and swtpm as last sampled (sampled while waiting).
    pub fn peak_rss(&self) -> PeakRss {
        self.peak
    }

    fn sample(&mut self) {
        if let Some(k) = vm_hwm_kib(self.qemu_pid) {
            self.peak.qemu_kib = self.peak.qemu_kib.max(k);
        }
        if let Some(k) = vm_hwm_kib(self.swtpm_pid) {
            self.peak.swtpm_kib = self.peak.swtpm_kib.max(k);
        }
    }

    fn qemu_exited(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        if is_zombie_or_gone(self.qemu_pid) {
            let (status, _) = self.qemu.take().expect("qemu").wait();
            self.status = Some(status);
            return true;
        }
        false
    }

    /// Waits (at most `bound`) for a console line containing `pattern` and
    /// returns it; panics with the console's tail when it does not come or
    /// QEMU exits first.
    pub fn wait_for_line(&mut self, pattern: &str, bound: Duration) -> String {
        self.wait_for_nth_line(pattern, 0, bound)
    }

    /// [`Vm::wait_for_line`] for the `nth` (from 0) line containing `pattern`.
    pub fn wait_for_nth_line(&mut self, pattern: &str, nth: usize, bound: Duration) -> String {
        let deadline = Instant::now() + bound;
        loop {
            self.sample();
            let exited = self.qemu_exited();
            if let Some(line) = complete_lines(&self.serial())
                .filter(|l| l.contains(pattern))
                .nth(nth)
            {
                eprintln!(
                    "[{}] {:?} after {:.1} s",
                    self.name,
                    pattern,
                    self.elapsed().as_secs_f64()
                );
                return line.trim_end_matches('\r').to_string();
            }
            if exited {
                panic!(
                    "[{}] QEMU exited ({:?}) before printing {pattern:?}\n{}",
                    self.name,
                    self.status,
                    self.failure_report()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "[{}] no {pattern:?} within {bound:?}\n{}",
                    self.name,
                    self.failure_report()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Powers the VM off as a pulled plug does: QEMU is killed (SIGKILL),
    /// so whatever the guest had not written to its disk is lost; its swtpm
    /// then ends (it loses its volatile state, as a TPM without power; the
    /// permanent state stays in the state directory). Returns the console.
    pub fn power_off(&mut self) -> String {
        if let Some(qemu) = self.qemu.take() {
            qemu.signal(nix::sys::signal::Signal::SIGKILL);
            self.status = Some(qemu.wait().0);
        }
        if let Some(swtpm) = self.swtpm.take() {
            // `--terminate`: it exits once QEMU's socket closed.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !is_zombie_or_gone(self.swtpm_pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(swtpm);
        }
        eprintln!(
            "[{}] powered off after {:.1} s",
            self.name,
            self.elapsed().as_secs_f64()
        );
        self.serial()
    }

    /// Waits (at most `bound`) for QEMU to exit (the guest powered off) and
    /// returns its status; panics with the console's tail otherwise. swtpm
    /// ends by itself (`--terminate`) or is killed with the `Vm`.
    pub fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        let deadline = Instant::now() + bound;
        loop {
            self.sample();
            if self.qemu_exited() {
                eprintln!(
                    "[{}] QEMU exited ({:?}) after {:.1} s; peak RSS qemu {} KiB, swtpm {} KiB",
                    self.name,
                    self.status,
                    self.elapsed().as_secs_f64(),
                    self.peak.qemu_kib,
                    self.peak.swtpm_kib
                );
                return self.status.expect("status");
            }
            if Instant::now() > deadline {
                panic!(
                    "[{}] QEMU still running after {bound:?}\n{}",
                    self.name,
                    self.failure_report()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The PCRs from the console's `CONFBOOT-PCRS` line (index → digest);
    /// panics if there is none or it does not parse.
    pub fn pcrs(&self) -> BTreeMap<u32, Vec<u8>> {
        let serial = self.serial();
        let line = complete_lines(&serial)
            .find(|l| l.starts_with(PCRS_MARKER))
            .unwrap_or_else(|| panic!("no PCR line on the console\n{}", self.failure_report()));
        parse_pcr_line(line).unwrap_or_else(|e| panic!("bad PCR line {line:?}: {e}"))
    }

    /// Checks the PCRs this boot printed against what `confboot measure`
    /// predicts for its kernel, initrd, command line and memory: every
    /// predicted PCR must be the booted one. Panics with both values and
    /// the explanation of the first differing event otherwise.
    pub fn assert_predicted_pcrs(&self) {
        let Some(config) = &self.measured_boot else {
            return;
        };
        let prediction = predicted_events(config);
        let pcrs = self.pcrs();
        for (pcr, predicted) in prediction.replay() {
            if pcrs[&pcr] != predicted.to_vec() {
                let why = prediction
                    .explain(pcr, &self.event_log().to_event_list())
                    .unwrap_or_default();
                panic!(
                    "[{}] PCR {pcr} booted {} but {} was predicted: {why}\n{}",
                    self.name,
                    confboot_util::hex::encode(&pcrs[&pcr]),
                    confboot_util::hex::encode(&predicted),
                    self.failure_report()
                );
            }
        }
    }

    /// The firmware's event log from the console's `CONFBOOT-EVENTLOG`
    /// line; panics if there is none or it does not parse.
    pub fn event_log(&self) -> EventLog {
        let serial = self.serial();
        let line = complete_lines(&serial)
            .find(|l| l.starts_with(EVENT_LOG_MARKER))
            .unwrap_or_else(|| panic!("no event log on the console\n{}", self.failure_report()));
        parse_event_log_line(line).unwrap_or_else(|e| panic!("bad event log line: {e}"))
    }

    /// The console's last [`TAIL_LINES`] lines and QEMU's and swtpm's stderr.
    pub fn failure_report(&self) -> String {
        let serial = self.serial();
        let lines: Vec<&str> = serial.lines().collect();
        let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
        let mut out = format!("--- [{}] serial console (tail) ---\n{tail}\n", self.name);
        if let Some(q) = &self.qemu {
            out.push_str(&format!("--- qemu stderr ---\n{}\n", q.log().join("\n")));
        }
        if let Some(s) = &self.swtpm {
            out.push_str(&format!("--- swtpm stderr ---\n{}\n", s.log().join("\n")));
        }
        out
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.failure_report());
        }
        self.sample();
        // ChildProcess kills and reaps on drop: QEMU first, then swtpm.
        drop(self.qemu.take());
        drop(self.swtpm.take());
    }
}

/// The lines of `text` that end in a newline (a line still being written is
/// left out).
fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    let end = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
    text[..end].lines()
}

/// Parses `CONFBOOT-PCRS {"0":"hex",...}`.
pub fn parse_pcr_line(line: &str) -> Result<BTreeMap<u32, Vec<u8>>, String> {
    let json = line
        .trim()
        .strip_prefix(PCRS_MARKER.trim_end())
        .ok_or("no marker")?
        .trim();
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let obj = value.as_object().ok_or("not an object")?;
    let mut out = BTreeMap::new();
    for (k, v) in obj {
        let index: u32 = k.parse().map_err(|_| format!("index {k:?}"))?;
        let hex = v.as_str().ok_or("value not a string")?;
        out.insert(index, decode_hex(hex)?);
    }
    if out.len() != 24 {
        return Err(format!("{} PCRs, expected 24", out.len()));
    }
    Ok(out)
}

/// Parses `CONFBOOT-EVENTLOG <base64>`.
pub fn parse_event_log_line(line: &str) -> Result<EventLog, String> {
    let b64 = line
        .trim()
        .strip_prefix(EVENT_LOG_MARKER.trim_end())
        .ok_or("no marker")?
        .trim();
    let bytes = confboot_util::base64::decode(b64).map_err(|e| format!("base64: {e}"))?;
    EventLog::parse(&bytes).map_err(|e| e.to_string())
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("not a SHA-256 hex digest: {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// A kernel and initramfs built by `initramfs/build.sh`.
#[derive(Clone, Debug)]
pub struct Image {
    /// The kernel.
    pub kernel: PathBuf,
    /// The initramfs (zstd-compressed newc cpio).
    pub initrd: PathBuf,
    /// build.sh's output (kernel version, file list, sizes, digest).
    pub build_log: String,
    /// The archive's compressed size before padding, as build.sh prints it.
    pub compressed_bytes: u64,
}

impl Image {
    /// Runs `initramfs/build.sh --test-tools` into
    /// `target/initramfs/<label>` with the bootstrapper (by default the
    /// static release build, [`crate::musl_binary`]) and the given stamp: a
    /// TEST image (busybox and `/test/hook`, so `confboot.probe=1` works).
    pub fn build(label: &str, bootstrapper: Option<&Path>, stamp: &str) -> Result<Image, String> {
        Image::build_with(label, bootstrapper, None, stamp, &[])
    }

    /// [`Image::build`] with the node agent (`--nodeagent`, run once the
    /// node is bootstrapped) and extra files: each `(source, destination in
    /// the image)` goes to build.sh as `--add SRC:DEST` (test images only,
    /// e.g. a release key).
    pub fn build_with(
        label: &str,
        bootstrapper: Option<&Path>,
        nodeagent: Option<&Path>,
        stamp: &str,
        add: &[(&Path, &str)],
    ) -> Result<Image, String> {
        Image::build_with_dynamic(label, bootstrapper, nodeagent, stamp, add, &[])
    }

    /// [`Image::build_with`] and dynamically linked programs: each
    /// `(source, destination)` in `add_dynamic` goes to build.sh as
    /// `--add-dynamic SRC:DEST` (the program and its shared libraries; test
    /// images only, e.g. the SSH server).
    pub fn build_with_dynamic(
        label: &str,
        bootstrapper: Option<&Path>,
        nodeagent: Option<&Path>,
        stamp: &str,
        add: &[(&Path, &str)],
        add_dynamic: &[(&Path, &str)],
    ) -> Result<Image, String> {
        Image::run_build(
            label,
            bootstrapper,
            nodeagent,
            stamp,
            true,
            add,
            add_dynamic,
        )
    }

    /// A test image without a bootstrapper or node agent of its own
    /// carrying the static probe `probe` (a [`crate::musl_binary`]) as
    /// `/usr/bin/<probe>`, for `confboot.tasks=` to run; panics when
    /// build.sh fails.
    pub fn with_probe(label: &str, probe: &str) -> Image {
        let binary = crate::musl_binary(probe);
        Image::build_with(
            label,
            None,
            None,
            "0",
            &[(binary.as_path(), &format!("/usr/bin/{probe}"))],
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The PRODUCTION image: build.sh with only `--bootstrapper` and
    /// `--nodeagent builtin` (the node agent is the bootstrapper started
    /// by that name; no busybox, no shell, no `/test`).
    pub fn build_production(label: &str, bootstrapper: &Path) -> Result<Image, String> {
        Image::run_build(
            label,
            Some(bootstrapper),
            Some(Path::new(NODEAGENT_BUILTIN)),
            "0",
            false,
            &[],
            &[],
        )
    }

    fn run_build(
        label: &str,
        bootstrapper: Option<&Path>,
        nodeagent: Option<&Path>,
        stamp: &str,
        test_tools: bool,
        add: &[(&Path, &str)],
        add_dynamic: &[(&Path, &str)],
    ) -> Result<Image, String> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = crate::target_dir().join("initramfs").join(label);
        let bootstrapper = match bootstrapper {
            Some(b) => b.to_path_buf(),
            None => crate::musl_binary("bootstrapper"),
        };
        let mut cmd = Command::new("bash");
        cmd.arg(repo.join("initramfs/build.sh"))
            .arg("--out")
            .arg(&out)
            .arg("--stamp")
            .arg(stamp)
            .arg("--bootstrapper")
            .arg(&bootstrapper);
        if test_tools {
            cmd.arg("--test-tools");
        }
        if let Some(a) = nodeagent {
            cmd.arg("--nodeagent").arg(a);
        }
        for (src, dest) in add {
            cmd.arg("--add").arg(format!("{}:{dest}", src.display()));
        }
        for (src, dest) in add_dynamic {
            cmd.arg("--add-dynamic")
                .arg(format!("{}:{dest}", src.display()));
        }
        let output = cmd
            .output()
            .map_err(|e| format!("cannot run build.sh: {e}"))?;
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if !output.status.success() {
            return Err(format!("build.sh failed ({}):\n{log}", output.status));
        }
        let compressed_bytes = log
            .lines()
            .find_map(|l| {
                l.split_once(" compressed ")
                    .and_then(|(_, rest)| rest.split(' ').next())
                    .and_then(|n| n.parse().ok())
            })
            .ok_or_else(|| format!("build.sh printed no compressed size:\n{log}"))?;
        Ok(Image {
            kernel: out.join("vmlinuz"),
            compressed_bytes,
            initrd: out.join("initramfs.cpio.zst"),
            build_log: log,
        })
    }
}

/// Size of each sparse state-disk image a [`NodeFiles`] makes.
pub const VM_DISK_BYTES: u64 = 64 << 20;

/// Runs `cli measure` (the static `confboot`) for `image` booted with
/// `cmdline` (after [`BASE_CMDLINE`]): writes `measurements.json` and
/// `measurements.events.json` into `dir`, as an admin keeps them, and
/// returns the policy and what the command printed. Panics when it fails.
pub fn measure_image(
    cli: &Path,
    image: &Image,
    cmdline: &str,
    dir: &Path,
) -> (MeasurementPolicy, String) {
    let policy_path = dir.join("measurements.json");
    let out = Command::new(cli)
        .arg("measure")
        .arg("--kernel")
        .arg(&image.kernel)
        .arg("--initrd")
        .arg(&image.initrd)
        .arg("--cmdline")
        .arg(format!("{BASE_CMDLINE} {cmdline}"))
        .arg("--policy-out")
        .arg(&policy_path)
        .arg("--events-out")
        .arg(dir.join("measurements.events.json"))
        .output()
        .expect("run confboot measure");
    assert!(
        out.status.success(),
        "confboot measure: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policy = MeasurementPolicy::from_json(&std::fs::read_to_string(&policy_path).unwrap())
        .expect("confboot measure writes a valid policy");
    (policy, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Percent-encodes one argument for `confboot.args=` (everything but
/// `[A-Za-z0-9._:/-]`).
pub fn pct(arg: &str) -> String {
    arg.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b".-_:/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `confboot.args=` for `/init`: the arguments, each percent-encoded
/// ([`pct`]), comma-separated.
pub fn args_param<S: AsRef<str>>(args: &[S]) -> String {
    let enc: Vec<String> = args.iter().map(|a| pct(a.as_ref())).collect();
    format!("confboot.args={}", enc.join(","))
}

/// What `--nodeagent` takes for the node agent the bootstrapper carries
/// (`/usr/bin/nodeagent` a link to it), as production images have it.
pub const NODEAGENT_BUILTIN: &str = "builtin";

/// The AK public key (SEC1 point) of the TPM kept in `state_dir`: swtpm
/// (TCP) on the directory, the AK from the persistent owner seed, closed
/// again. No PCR is extended.
pub fn tpm_ak(state_dir: &Path) -> Vec<u8> {
    crate::require_program("swtpm", "swtpm");
    let swtpm = Swtpm::start_in(state_dir).expect("swtpm starts");
    let issuer =
        VtpmIssuer::new(swtpm.connect().expect("connect to swtpm")).expect("attestation key");
    let ak = issuer.ak_public_key();
    drop(issuer);
    drop(swtpm);
    ak
}

/// The TPM of the joinsvc a VM test runs on the host, made before any
/// boot: its state directory `joinsvc-tpm` in the test's work directory
/// (the test starts swtpm on it for joinsvc later) and its AK, which the
/// nodes pin ([`JoinsvcTpm::trust`]).
pub struct JoinsvcTpm {
    /// The swtpm state directory.
    pub dir: PathBuf,
    /// The AK's public key (SEC1 point).
    pub ak: Vec<u8>,
}

impl JoinsvcTpm {
    /// Creates `work/joinsvc-tpm` and reads the AK ([`tpm_ak`]).
    pub fn new(work: &Path) -> JoinsvcTpm {
        let dir = work.join("joinsvc-tpm");
        std::fs::create_dir_all(&dir).unwrap();
        let ak = tpm_ak(&dir);
        JoinsvcTpm { dir, ak }
    }

    /// `pinned:<hex AK>`: what `--joinsvc-ak-trust` takes to trust this
    /// joinsvc (and nothing else).
    pub fn trust(&self) -> String {
        format!("pinned:{}", confboot_util::hex::encode(&self.ak))
    }
}

/// The bootstrapper arguments of a node VM that joins through the host's
/// joinsvc, in this order: `--init-secret-hash` when given (a node the
/// admin may init instead), the join service at
/// [`GUEST_FORWARD_ADDR`]:[`JOIN_PORT`], two retries, the state disk
/// `/dev/vda`, the cluster step handed over in `/run/confboot` (the
/// initramfs carries no kubeadm: an OS image's `nodeagent cluster-step`
/// runs it, and PID 1 hands over there anyway when it boots an OS; an
/// image without an OS runs no cluster step), `--joinsvc-ak-trust
/// joinsvc_trust`, then `extra`, then `-v 4`. For [`args_param`].
pub fn node_args(
    init_secret_hash: Option<&str>,
    joinsvc_trust: &str,
    extra: &[&str],
) -> Vec<String> {
    let join_target = format!("{GUEST_FORWARD_ADDR}:{JOIN_PORT}");
    let mut args: Vec<String> = Vec::new();
    if let Some(hash) = init_secret_hash {
        args.extend(["--init-secret-hash".to_string(), hash.to_string()]);
    }
    args.extend(
        [
            "--join-endpoint",
            join_target.as_str(),
            "--retry-max",
            "2",
            "--state-disk",
            "/dev/vda",
            "--cluster-step",
            "handoff",
            "--handoff-dir",
            "/run/confboot",
            "--joinsvc-ak-trust",
            joinsvc_trust,
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|a| a.to_string()));
    args.extend(["-v", "4"].map(String::from));
    args
}

/// A node's files: its TPM state dir (kept across boots) and state disk.
pub struct NodeFiles {
    /// The VM's name, for messages.
    pub name: String,
    /// The swtpm state directory, kept across boots.
    pub tpm: PathBuf,
    /// The state disk image.
    pub disk: PathBuf,
    /// The AK's public key (SEC1 point), read before the first boot.
    pub ak: Vec<u8>,
}

impl NodeFiles {
    /// Creates the TPM state and a blank sparse disk, and reads the AK
    /// ([`tpm_ak`]; no PCR is extended: the VM's firmware measures the
    /// boot).
    pub fn new(dir: &Path, name: &str) -> NodeFiles {
        let tpm = dir.join(format!("{name}-tpm"));
        std::fs::create_dir_all(&tpm).unwrap();
        let disk = dir.join(format!("{name}-disk.img"));
        std::fs::File::create(&disk)
            .unwrap()
            .set_len(VM_DISK_BYTES)
            .unwrap();
        let ak = tpm_ak(&tpm);
        NodeFiles {
            name: name.to_string(),
            tpm,
            disk,
            ak,
        }
    }

    /// A boot of `image` with `cmdline` on this node's TPM and disk.
    pub fn config(&self, image: &Image, cmdline: &str) -> VmConfig {
        let mut c = VmConfig::new(&image.kernel, &image.initrd, cmdline);
        c.name = self.name.clone();
        c.disk = Some(self.disk.clone());
        c.tpm_state = Some(self.tpm.clone());
        c
    }

    /// The disk's LUKS UUID, if it has a LUKS header.
    pub fn luks_uuid(&self) -> Option<String> {
        crate::luks_uuid(&self.disk)
    }

    /// Whether `key` opens the disk's LUKS2 header (host cryptsetup, key on stdin).
    pub fn key_opens_disk(&self, key: &[u8]) -> bool {
        crate::key_opens_disk(&self.disk, key)
    }

    /// Plays the host: deletes the LUKS2 header's token of `token_type`
    /// (the header's JSON is not authenticated).
    pub fn remove_token(&self, token_type: &str) {
        let dump = Command::new("cryptsetup")
            .args(["luksDump", "--dump-json-metadata"])
            .arg(&self.disk)
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap();
        let id = json["tokens"]
            .as_object()
            .and_then(|t| t.iter().find(|(_, t)| t["type"] == token_type))
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("no {token_type} token in the header"));
        let removed = Command::new("cryptsetup")
            .args(["token", "remove", "--token-id", &id])
            .arg(&self.disk)
            .status()
            .unwrap();
        assert!(removed.success(), "cryptsetup token remove");
    }

    /// The disk image's bytes.
    pub fn raw(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        std::fs::File::open(&self.disk)
            .unwrap()
            .read_to_end(&mut buf)
            .unwrap();
        buf
    }
}

/// PCRs a golden-measurement policy enforces, those a predicted one does:
/// the kernel (4), the initrd and command line (9), and 15 (all-zero until
/// the node is bootstrapped).
pub const GOLDEN_ENFORCED: [u32; 3] = confboot_measure::PREDICTED_ENFORCED;
/// PCRs a golden-measurement policy only warns on: firmware and its
/// configuration (they change with the OVMF build and VARS).
pub const GOLDEN_WARN_ONLY: [u32; 7] = [0, 1, 2, 3, 5, 6, 7];

/// Builds a measurement policy from the PCRs a boot printed.
pub fn policy_from_pcrs(pcrs: &BTreeMap<u32, Vec<u8>>) -> MeasurementPolicy {
    let mut policy = MeasurementPolicy::default();
    for i in GOLDEN_ENFORCED {
        policy.set(i, pcrs[&i].clone(), false);
    }
    for i in GOLDEN_WARN_ONLY {
        policy.set(i, pcrs[&i].clone(), true);
    }
    policy
}

/// What `confboot measure` (the library's [`DirectBoot`]) predicts for a
/// VM configuration: its kernel, initrd, [`BASE_CMDLINE`] with the
/// caller's command line, and its memory.
pub fn predicted_events(config: &VmConfig) -> EventList {
    let kernel = std::fs::read(&config.kernel)
        .unwrap_or_else(|e| panic!("read {}: {e}", config.kernel.display()));
    let initrd = std::fs::File::open(&config.initrd)
        .and_then(InitrdDigest::read)
        .unwrap_or_else(|e| panic!("read {}: {e}", config.initrd.display()));
    let cmdline = format!("{BASE_CMDLINE} {}", config.cmdline);
    DirectBoot {
        kernel: &kernel,
        initrd: Some(initrd),
        cmdline: &cmdline,
        memory_mib: u64::from(config.memory_mib),
    }
    .predict()
    .unwrap_or_else(|e| panic!("predicting the boot of {}: {e}", config.kernel.display()))
}

/// What one boot of an image measured: the PCRs `/init` printed and the
/// firmware's event log, checked to replay to those PCRs.
pub struct GoldenBoot {
    /// All 24 SHA-256 PCRs.
    pub pcrs: BTreeMap<u32, Vec<u8>>,
    /// The event log; replaying it gives every PCR it names in `pcrs`.
    pub event_log: EventLog,
}

impl GoldenBoot {
    /// The measurement policy of these PCRs ([`policy_from_pcrs`]).
    pub fn policy(&self) -> MeasurementPolicy {
        policy_from_pcrs(&self.pcrs)
    }

    /// joinsvc on the host, measured as a node of the booted image: a fresh
    /// swtpm in `tpm`'s directory gets this boot's event log replayed (its
    /// PCRs are then the boot's, checked: all but IMA's PCR 10, which the
    /// kernel extends, not the firmware) and PCR 15 gets the cluster's mark,
    /// as a control plane's does after Init. joinsvc runs with that TPM,
    /// `policy` and the predicted events `events`. Keep the swtpm as long
    /// as joinsvc.
    pub fn joinsvc_as_node(
        &self,
        joinsvc: &Path,
        policy: &MeasurementPolicy,
        setup: crate::cluster::JoinsvcSetup,
        tpm: &JoinsvcTpm,
        events: &Path,
    ) -> (crate::cluster::Joinsvc, Swtpm) {
        let swtpm = Swtpm::start_in(&tpm.dir).expect("swtpm starts");
        {
            let mut t = swtpm.connect().expect("connect to swtpm");
            self.event_log
                .extend_into(&mut t)
                .expect("replay the event log into joinsvc's TPM");
            let pcrs = t.pcr_read_all().expect("read PCRs");
            for (i, v) in pcrs
                .into_iter()
                .filter(|(i, _)| *i != confboot_tpm::IMA_PCR)
            {
                assert_eq!(
                    self.pcrs[&i],
                    v.to_vec(),
                    "PCR {i}: joinsvc's TPM after the replay differs from the golden boot"
                );
            }
            confboot_cluster::mark::mark_node(&mut t, &setup.cluster_id())
                .expect("mark joinsvc's TPM");
        }
        let mut extra = vec![
            "--tpm".to_string(),
            swtpm.addr().to_string(),
            "--expected-events".to_string(),
            events.display().to_string(),
        ];
        extra.extend(setup.extra.iter().cloned());
        let joinsvc = crate::cluster::Joinsvc::launch(
            joinsvc,
            policy,
            crate::cluster::JoinsvcSetup { extra, ..setup },
        );
        (joinsvc, swtpm)
    }
}

/// Boots `kernel` + `initrd` with `cmdline` (the production command line:
/// PCR 9 covers it) under OVMF and a fresh swtpm, reads the PCRs and the
/// event log `/init` prints on every boot and ends the VM. Panics when the
/// log does not replay to the printed PCRs.
pub fn golden_boot(kernel: &Path, initrd: &Path, cmdline: &str) -> GoldenBoot {
    let mut config = VmConfig::new(kernel, initrd, cmdline);
    config.name = "golden".to_string();
    let mut vm = Vm::boot(config);
    vm.wait_for_line(EVENT_LOG_MARKER.trim_end(), Duration::from_secs(180));
    vm.assert_predicted_pcrs();
    let (pcrs, event_log) = (vm.pcrs(), vm.event_log());
    for (pcr, replayed) in event_log.replay() {
        assert_eq!(
            pcrs[&pcr],
            replayed.to_vec(),
            "PCR {pcr}: the event log does not replay to the booted value"
        );
    }
    GoldenBoot { pcrs, event_log }
}

/// The policy of [`golden_boot`]'s PCRs.
pub fn golden_measurements(kernel: &Path, initrd: &Path, cmdline: &str) -> MeasurementPolicy {
    golden_boot(kernel, initrd, cmdline).policy()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize, value: &str) -> String {
        let body: Vec<String> = (0..n).map(|i| format!("\"{i}\":\"{value}\"")).collect();
        format!("CONFBOOT-PCRS {{{}}}", body.join(","))
    }

    #[test]
    fn pcr_line_parses_and_bad_lines_are_refused() {
        let ok = parse_pcr_line(&line(24, &"ab".repeat(32))).unwrap();
        assert_eq!(ok.len(), 24);
        assert_eq!(ok[&23], vec![0xab; 32]);
        assert!(parse_pcr_line(&line(23, &"ab".repeat(32))).is_err());
        assert!(parse_pcr_line(&line(24, "ab")).is_err());
        assert!(parse_pcr_line(&line(24, &"zz".repeat(32))).is_err());
        assert!(parse_pcr_line("CONFBOOT-PCRS not json").is_err());
        assert!(parse_pcr_line("something else").is_err());
    }

    #[test]
    fn only_complete_lines_are_seen() {
        let v: Vec<&str> = complete_lines("a\nb\nCONFBOOT-PC").collect();
        assert_eq!(v, ["a", "b"]);
        assert_eq!(complete_lines("partial").count(), 0);
    }

    #[test]
    fn golden_policy_enforces_kernel_initrd_and_pcr15() {
        let pcrs = parse_pcr_line(&line(24, &"01".repeat(32))).unwrap();
        let policy = policy_from_pcrs(&pcrs);
        for i in GOLDEN_ENFORCED {
            assert!(!policy.entries()[&i].warn_only);
        }
        for i in GOLDEN_WARN_ONLY {
            assert!(policy.entries()[&i].warn_only);
        }
        assert!(!policy.entries().contains_key(&8));
    }
}
