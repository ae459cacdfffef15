//! Helpers for confboot's end-to-end tests: running the project's binaries
//! as child processes that are always ended, and reading their
//! logs; a real Kubernetes control plane as processes ([`kube`]) and a
//! fault proxy in front of it ([`kube_proxy`]).
//!
//! The small helpers every test crate of the workspace needs, with no
//! confboot type in them ([`TempDir`], [`XorShift`], [`wait_for_count`],
//! [`free_port`], [`ChildProcess`], the deadline bounds, the AMD and Intel
//! test chains as bytes and keys) live in `confboot-testkit`, which the
//! library crates take as a dev-dependency; this crate re-exports them, and
//! keeps what needs confboot types: report and quote sources, issuers, the
//! project's processes, VMs.
//!
//! A test that needs something a fresh checkout lacks (the static release
//! binaries, a tool `scripts/setup.sh` installs) ends the whole test
//! process with one line naming what to run first
//! ([`stop_for_missing_setup`]), instead of every test panicking alike.

pub mod admin;
pub mod azure;
pub mod cluster;
pub mod elf;
pub mod host_actor;
pub mod hostile;
pub mod kube;
pub mod kube_proxy;
pub mod load;
pub mod os;
pub mod qemu;
pub mod relay;
pub mod snp;
pub mod storm;
pub mod tdx;
pub mod tickets;
pub use confboot_testkit::tls;
pub mod usage;
pub mod vm_hub;
pub mod wireguard_probe;

use std::path::{Path, PathBuf};

pub use confboot_testkit::{
    ChildProcess, INSTALL_PACKAGES, TempDir, XorShift, addr_after, free_port, installed_program,
    key_opens_disk, luks_uuid, require_program, stop_for_missing_setup, wait_for_count,
    write_image_policy,
};

/// The workspace's `target/` directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Where `scripts/test.sh` puts the static release binaries, under
/// [`target_dir`].
pub const MUSL_RELEASE_DIR: &str = "x86_64-unknown-linux-musl/release";

/// What to run before `cargo test --workspace` on a fresh checkout:
/// `scripts/test.sh` runs `scripts/setup.sh` (swtpm, protoc, cryptsetup,
/// QEMU, the musl target, ...) and then this build.
pub const BUILD_STATIC_BINARIES: &str = "run `bash scripts/test.sh` first (it runs scripts/setup.sh, \
     then `cargo build --release --target x86_64-unknown-linux-musl -p bootstrapper -p joinsvc \
     -p nodeagent -p confboot-cli -p confboot-pause -p confboot-tests --bins`)";

/// A static musl release binary of the workspace, as `scripts/test.sh`
/// builds them. When it is missing (a fresh checkout), the test process
/// stops with one line saying what to run first
/// ([`stop_for_missing_setup`]).
pub fn musl_binary(name: &str) -> PathBuf {
    let path = target_dir().join(MUSL_RELEASE_DIR).join(name);
    if !path.exists() {
        stop_for_missing_setup(&format!(
            "the static release binaries are missing (no {}): {BUILD_STATIC_BINARIES}",
            path.display()
        ));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    /// Set in the copy of this test binary that plays a fresh checkout: a
    /// file for it to write to.
    const PLAY_FRESH_CHECKOUT: &str = "CONFBOOT_TESTS_PLAY_FRESH_CHECKOUT";

    /// Runs the test `name` of this binary again in a child process that
    /// plays a fresh checkout (with backtraces on, so none may show), with
    /// `file` for it to write to; returns its exit code and stderr.
    fn as_a_fresh_checkout(name: &str, file: &Path) -> (Option<i32>, String) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name])
            .env(PLAY_FRESH_CHECKOUT, file)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn a_missing_static_binary_stops_the_test_process_with_one_line() {
        if let Some(pid_file) = std::env::var_os(PLAY_FRESH_CHECKOUT) {
            // Another test's process, in a process group of its own (as a
            // bootstrapper runs), which nothing else would end.
            let mut sleeper = Command::new("sleep");
            sleeper
                .arg("600")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            std::os::unix::process::CommandExt::process_group(&mut sleeper, 0);
            let mut sleeper = sleeper.spawn().unwrap();
            std::fs::write(pid_file, sleeper.id().to_string()).unwrap();
            // Two tests of a fresh checkout asking at once.
            let other = std::thread::spawn(|| musl_binary("confboot-no-such-binary"));
            musl_binary("confboot-no-such-binary");
            let _ = other.join();
            // Not reached when the stop works.
            let _ = sleeper.kill();
            let _ = sleeper.wait();
            unreachable!("musl_binary returned a missing binary");
        }
        let dir = TempDir::new("fresh-checkout");
        let pid_file = dir.path().join("sleeper.pid");
        let (code, stderr) = as_a_fresh_checkout(
            "tests::a_missing_static_binary_stops_the_test_process_with_one_line",
            &pid_file,
        );
        assert_eq!(code, Some(1), "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(
            lines[0].starts_with("the static release binaries are missing (no ")
                && lines[0].contains("confboot-no-such-binary")
                && lines[0].contains("run `bash scripts/test.sh` first"),
            "{stderr}"
        );
        // The other test's process was ended with the test process (gone,
        // or a zombie until whoever inherited it reaps it).
        let sleeper = std::fs::read_to_string(&pid_file).unwrap();
        let ended = (0..200).any(|_| {
            let state = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).map(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('Z'))
            });
            if matches!(state, Err(_) | Ok(Some(true))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
            false
        });
        if !ended {
            let pid = nix::unistd::Pid::from_raw(sleeper.parse().unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        assert!(ended, "sleep {sleeper} outlived the stopped test process");
    }

    #[test]
    fn a_missing_program_stops_the_test_process_naming_its_package_and_setup() {
        if std::env::var_os(PLAY_FRESH_CHECKOUT).is_some() {
            require_program("sh", "dash");
            require_program("confboot-no-such-program", "confboot-no-such-package");
            unreachable!("require_program passed a missing program");
        }
        let dir = TempDir::new("fresh-checkout");
        let (code, stderr) = as_a_fresh_checkout(
            "tests::a_missing_program_stops_the_test_process_naming_its_package_and_setup",
            dir.path(),
        );
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(
            stderr,
            "confboot-no-such-program is missing (Debian package confboot-no-such-package): \
             run `bash scripts/setup.sh` first (it installs every package the tests need)\n"
        );
    }
}
