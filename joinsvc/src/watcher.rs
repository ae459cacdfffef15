//! Hot reload of the measurement policy: the policy file's directory is
//! watched with inotify, and on any change the file is read again by the
//! loader start-up uses (`MeasurementPolicyFile::read`). A valid new policy
//! that pins the image (`MeasurementPolicy::check_pins_image`, PCRs 4 and
//! 9 enforced, PCR 15 never counting) is handed to `apply` (which swaps the validator, and
//! checks the rule again on what it keeps); a broken or missing file, or
//! one that would admit any image, keeps the previous policy and logs why.
//!
//! Watching the directory rather than the file handles every way a file is
//! replaced: written in place, renamed over, deleted then created, and the
//! symlink swap Kubernetes uses to update a mounted ConfigMap
//! (`..data` → a new timestamped directory).
//!
//! The signed reference-value sets (`--reference-values-dir`) are read
//! again every reload period instead ([`SetsWatcher`]): a set's window
//! ends with no file changing, so time alone must retire it.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use confboot_appraisal::reference::sets::{ReferenceSets, Refresh};
use confboot_attest::{MeasurementPolicy, PolicyError};
use confboot_util::floor::TimeFloor;
use confboot_util::stop::Stop;
use confboot_verifier::config::{ConfigError, MeasurementPolicyFile};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// How often the watcher looks at its stop signal.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Quiet time after an event before the file is read (editors write in bursts).
const SETTLE: Duration = Duration::from_millis(20);

/// A running watcher; [`PolicyWatcher::stop`] ends it.
pub struct PolicyWatcher {
    thread: WatcherThread,
}

impl PolicyWatcher {
    /// Watches `path`. `apply` gets each new valid policy and returns an error
    /// if it cannot be used (the previous one then stays). The first policy
    /// must already be in force; only changes are applied.
    pub fn spawn<F>(path: &Path, apply: F) -> std::io::Result<PolicyWatcher>
    where
        F: Fn(MeasurementPolicy) -> Result<(), PolicyError> + Send + 'static,
    {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(std::io::Error::from)?;
        let mask = AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB;
        inotify
            .add_watch(&dir, mask)
            .map_err(std::io::Error::from)?;
        // What is in force now, read before returning so no change is missed.
        let current = MeasurementPolicyFile::read(path)
            .ok()
            .map(|f| f.text().to_string());
        let stop = Stop::new();
        let thread = {
            let (stop, path) = (stop.clone(), path.to_path_buf());
            std::thread::Builder::new()
                .name("policy-watcher".into())
                .spawn(move || watch(inotify, &path, current, &stop, &apply))?
        };
        log::info!("watching {} for measurement policy changes", path.display());
        Ok(PolicyWatcher {
            thread: WatcherThread {
                stop,
                thread: Some(thread),
            },
        })
    }

    /// Stops watching and waits for the thread.
    pub fn stop(mut self) {
        self.thread.shutdown();
    }
}

/// Logs what a reading of the set directory did: each set added or
/// retired, each file refused.
pub fn log_refresh(refresh: &Refresh) {
    for name in &refresh.added {
        log::info!("reference-value set {name} accepted");
    }
    for (name, reason) in &refresh.retired {
        log::warn!("reference-value set {name} retired: {reason}");
    }
    for (file, why) in &refresh.refused {
        log::error!("reference-value set file {} refused: {why}", file.display());
    }
    if let Some(e) = &refresh.history_error {
        log::error!("{e}; the retirement holds until joinsvc restarts");
    }
}

/// A running reader of the set directory; [`SetsWatcher::stop`] ends it.
pub struct SetsWatcher {
    thread: WatcherThread,
}

impl SetsWatcher {
    /// Reads `sets`' directory again every `period`; a reading that fails
    /// changes nothing (the last good sets stay) and is logged. A file
    /// refused is logged when the refusals change, not at every reading.
    /// Each reading is as of `floor` (the latest time seen, never the
    /// wall clock alone).
    pub fn spawn(
        sets: Arc<RwLock<ReferenceSets>>,
        period: Duration,
        floor: Arc<TimeFloor>,
    ) -> std::io::Result<SetsWatcher> {
        let stop = Stop::new();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("sets-watcher".into())
                .spawn(move || {
                    let mut last_refused: Vec<String> = Vec::new();
                    let mut last_error: Option<String> = None;
                    while !stop.sleep(period) {
                        let mut copy = sets.read().unwrap_or_else(|e| e.into_inner()).clone();
                        match copy.refresh(floor.now()) {
                            Ok(mut refresh) => {
                                let refused: Vec<String> = refresh
                                    .refused
                                    .iter()
                                    .map(|(f, e)| format!("{}: {e}", f.display()))
                                    .collect();
                                if refused == last_refused {
                                    refresh.refused.clear();
                                }
                                last_refused = refused;
                                last_error = None;
                                log_refresh(&refresh);
                                *sets.write().unwrap_or_else(|e| e.into_inner()) = copy;
                            }
                            Err(e) => {
                                let e = e.to_string();
                                if last_error.as_ref() != Some(&e) {
                                    log::error!("{e}; keeping the previous sets");
                                }
                                last_error = Some(e);
                            }
                        }
                    }
                })?
        };
        Ok(SetsWatcher {
            thread: WatcherThread {
                stop,
                thread: Some(thread),
            },
        })
    }

    /// Stops reading and waits for the thread.
    pub fn stop(mut self) {
        self.thread.shutdown();
    }
}

/// A watcher's thread: stopped and joined on `shutdown` or when dropped.
struct WatcherThread {
    stop: Stop,
    thread: Option<JoinHandle<()>>,
}

impl WatcherThread {
    fn shutdown(&mut self) {
        self.stop.raise();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for WatcherThread {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn wait_readable(inotify: &Inotify, timeout: Duration) -> bool {
    let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
}

fn drain(inotify: &Inotify) {
    while inotify.read_events().is_ok_and(|e| !e.is_empty()) {}
}

/// Why a changed policy file was refused (the previous policy stays).
#[derive(Debug, thiserror::Error)]
enum Refused {
    /// The policy is refused (by its reader or by the validator's builder).
    #[error("{0}")]
    Policy(PolicyError),
    /// The file is not a policy file.
    #[error("{0}")]
    File(ConfigError),
}

fn watch(
    inotify: Inotify,
    path: &Path,
    mut current: Option<String>,
    stop: &Stop,
    apply: &dyn Fn(MeasurementPolicy) -> Result<(), PolicyError>,
) {
    while !stop.is_raised() {
        if !wait_readable(&inotify, STOP_POLL) {
            continue;
        }
        // Let a burst of events settle, then look at the file once.
        loop {
            drain(&inotify);
            if !wait_readable(&inotify, SETTLE) {
                break;
            }
        }
        let file = match MeasurementPolicyFile::read(path) {
            Ok(file) => Ok(file),
            Err(ConfigError::MeasurementsFile(e)) => {
                log::warn!("measurement policy unreadable ({e}); keeping the previous policy");
                continue;
            }
            Err(ConfigError::Measurements { error, .. }) => Err(Refused::Policy(error)),
            Err(e) => Err(Refused::File(e)),
        };
        if let Ok(file) = &file
            && current.as_deref() == Some(file.text())
        {
            continue;
        }
        let text = file.as_ref().map(|f| f.text().to_string()).ok();
        let parsed = file.map(MeasurementPolicyFile::into_policy);
        match parsed.and_then(|policy| apply(policy).map_err(Refused::Policy)) {
            Ok(()) => {
                log::info!("measurement policy reloaded from {}", path.display());
                current = text;
            }
            Err(e) => log::error!(
                "measurement policy {} refused ({e}); keeping the previous policy",
                path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{Receiver, unbounded};
    use std::sync::Mutex;
    use std::time::Instant;

    /// The watcher's log lines, for tests that look for why a policy was refused.
    static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

    struct CaptureLog;

    impl log::Log for CaptureLog {
        fn enabled(&self, metadata: &log::Metadata) -> bool {
            metadata.target() == module_path!().trim_end_matches("::tests")
        }

        fn log(&self, record: &log::Record) {
            if self.enabled(record.metadata()) {
                LINES.lock().unwrap().push(record.args().to_string());
            }
        }

        fn flush(&self) {}
    }

    static CAPTURE: CaptureLog = CaptureLog;

    fn capture_log() {
        // The first test to ask installs it; the others find it in place.
        let _ = log::set_logger(&CAPTURE);
        log::set_max_level(log::LevelFilter::Info);
    }

    /// The first captured line that contains every one of `parts` (a generous bound).
    fn wait_for_line(parts: &[&str]) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let found = LINES
                .lock()
                .unwrap()
                .iter()
                .find(|l| parts.iter().all(|p| l.contains(p)))
                .cloned();
            if found.is_some() {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
    use std::path::PathBuf;

    /// A policy that pins the image: PCR 4 = `byte` × 32, PCR 9 = `99` × 32.
    fn policy_json(byte: &str) -> String {
        format!(
            r#"{{"4": {{"expected": "{}", "warnOnly": false}}, "9": {{"expected": "{}", "warnOnly": false}}}}"#,
            byte.repeat(32),
            "99".repeat(32)
        )
    }

    fn expected_byte(p: &MeasurementPolicy) -> u8 {
        p.entries()[&4].value[0]
    }

    struct Fixture {
        dir: PathBuf,
        _watcher: PolicyWatcher,
        applied: Receiver<u8>,
    }

    /// A watcher over `<dir>/<file>` whose apply callback reports the policy's first byte.
    fn fixture(name: &str, file: &str) -> Fixture {
        let dir =
            std::env::temp_dir().join(format!("confboot-watch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), policy_json("aa")).unwrap();
        let (tx, rx) = unbounded();
        let watcher = PolicyWatcher::spawn(&dir.join(file), move |p| {
            tx.send(expected_byte(&p)).unwrap();
            Ok(())
        })
        .unwrap();
        Fixture {
            dir,
            _watcher: watcher,
            applied: rx,
        }
    }

    /// The next applied policy (a generous bound: a missing reload is a failure, not a timing check).
    fn next(f: &Fixture) -> Option<u8> {
        f.applied.recv_timeout(Duration::from_secs(20)).ok()
    }

    #[test]
    fn write_in_place_and_rename_over_are_applied() {
        let f = fixture("rename", "policy.json");
        std::fs::write(f.dir.join("policy.json"), policy_json("bb")).unwrap();
        assert_eq!(next(&f), Some(0xbb));
        std::fs::write(f.dir.join("policy.json.tmp"), policy_json("cc")).unwrap();
        std::fs::rename(f.dir.join("policy.json.tmp"), f.dir.join("policy.json")).unwrap();
        assert_eq!(next(&f), Some(0xcc));
        std::fs::remove_dir_all(&f.dir).unwrap();
    }

    #[test]
    fn delete_then_create_is_applied_and_broken_files_keep_the_previous_policy() {
        let f = fixture("recreate", "policy.json");
        std::fs::remove_file(f.dir.join("policy.json")).unwrap();
        std::fs::write(f.dir.join("policy.json"), "{ broken").unwrap();
        std::fs::write(f.dir.join("policy.json"), r#"{"4": {"expected": "zz"}}"#).unwrap();
        std::fs::write(f.dir.join("policy.json"), policy_json("dd")).unwrap();
        // Only the valid policy is applied; the broken ones in between are not.
        assert_eq!(next(&f), Some(0xdd));
        assert!(f.applied.try_recv().is_err());
        std::fs::remove_dir_all(&f.dir).unwrap();
    }

    #[test]
    fn reloads_that_would_admit_any_image_keep_the_previous_policy() {
        capture_log();
        let f = fixture("permissive", "policy.json");
        let file = f.dir.join("policy.json");
        let shown = file.display().to_string();
        // An empty policy: refused, the previous one stays, and the log says why.
        std::fs::write(&file, "{}").unwrap();
        let line = wait_for_line(&[&shown, "is empty"]).expect("the empty policy is refused");
        assert!(line.contains("keeping the previous policy"), "{line}");
        // Every entry warnOnly: refused too.
        let all_warn = format!(
            r#"{{"4": {{"expected": "{}", "warnOnly": true}}, "9": {{"expected": "{}", "warnOnly": true}}}}"#,
            "bb".repeat(32),
            "cc".repeat(32)
        );
        std::fs::write(&file, all_warn).unwrap();
        let line = wait_for_line(&[&shown, "enforces nothing"])
            .expect("the all-warnOnly policy is refused");
        assert!(line.contains("keeping the previous policy"), "{line}");
        assert!(f.applied.try_recv().is_err(), "neither was applied");
        // The watcher goes on: the next real policy is applied, and only it.
        std::fs::write(&file, policy_json("dd")).unwrap();
        assert_eq!(next(&f), Some(0xdd));
        assert!(f.applied.try_recv().is_err());
        std::fs::remove_dir_all(&f.dir).unwrap();
    }

    #[test]
    fn reloads_that_do_not_pin_the_image_keep_the_previous_policy() {
        capture_log();
        let (zeros, bb, cc) = ("00".repeat(32), "bb".repeat(32), "cc".repeat(32));
        let cases = [
            // The cluster mark alone (joinsvc's validator drops it).
            (
                "mark-only",
                format!(r#"{{"15": {{"expected": "{zeros}"}}}}"#),
                "[4, 9]",
            ),
            // The mark with the boot chain and command line warnOnly, as
            // during an upgrade.
            (
                "mark-and-warn-only-image",
                format!(
                    r#"{{"15": {{"expected": "{zeros}"}}, "4": {{"expected": "{bb}", "warnOnly": true}}, "9": {{"expected": "{cc}", "warnOnly": true}}}}"#
                ),
                "[4, 9]",
            ),
            // The boot chain alone: any command line.
            (
                "kernel-only",
                format!(r#"{{"4": {{"expected": "{bb}"}}}}"#),
                "[9]",
            ),
        ];
        for (name, unpinned, missing) in cases {
            let f = fixture(&format!("unpinned-{name}"), "policy.json");
            let file = f.dir.join("policy.json");
            let shown = file.display().to_string();
            std::fs::write(&file, unpinned).unwrap();
            let line = wait_for_line(&[&shown, "does not pin the image", missing])
                .unwrap_or_else(|| panic!("{name}: not refused"));
            assert!(line.contains("keeping the previous policy"), "{line}");
            assert!(f.applied.try_recv().is_err(), "{name} was applied");
            // The next policy that pins the image is applied, and only it.
            std::fs::write(&file, policy_json("dd")).unwrap();
            assert_eq!(next(&f), Some(0xdd), "{name}");
            assert!(f.applied.try_recv().is_err());
            std::fs::remove_dir_all(&f.dir).unwrap();
        }
    }

    #[test]
    fn configmap_symlink_swap_is_applied() {
        // The layout kubelet makes: file -> ..data/file, ..data -> ..<timestamp>/.
        let dir = std::env::temp_dir().join(format!("confboot-watch-cm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("..v1")).unwrap();
        std::fs::write(dir.join("..v1/policy.json"), policy_json("aa")).unwrap();
        std::os::unix::fs::symlink("..v1", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/policy.json", dir.join("policy.json")).unwrap();
        let (tx, rx) = unbounded();
        let _w = PolicyWatcher::spawn(&dir.join("policy.json"), move |p| {
            tx.send(expected_byte(&p)).unwrap();
            Ok(())
        })
        .unwrap();
        std::fs::create_dir_all(dir.join("..v2")).unwrap();
        std::fs::write(dir.join("..v2/policy.json"), policy_json("ee")).unwrap();
        std::os::unix::fs::symlink("..v2", dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)).ok(), Some(0xee));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refused_by_apply_keeps_watching() {
        let dir =
            std::env::temp_dir().join(format!("confboot-watch-refuse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("policy.json");
        std::fs::write(&file, policy_json("aa")).unwrap();
        let (tx, rx) = unbounded();
        let _w = PolicyWatcher::spawn(&file, move |p| {
            let b = expected_byte(&p);
            tx.send(b).unwrap();
            if b == 0x11 {
                Err(PolicyError::Empty)
            } else {
                Ok(())
            }
        })
        .unwrap();
        std::fs::write(&file, policy_json("11")).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)).ok(), Some(0x11));
        std::fs::write(&file, policy_json("22")).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)).ok(), Some(0x22));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
