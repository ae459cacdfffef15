//! Handing the node over to its operating system.
//!
//! An image is three measured parts: the kernel, this initramfs, and a
//! read-only root file system under dm-verity whose parameters are
//! `confboot.root*` words of the kernel command line (PCR 9 covers them, so
//! attestation covers the root). With such words, PID 1:
//!
//! 1. **before the bootstrapper** ([`prepare_root`]): checks that the hash
//!    tree's top level gives the command line's root hash (a root whose tree
//!    does not match is refused before the node asks for any key), maps the
//!    root with dm-verity (`panic_on_corruption`: a block whose hash does not
//!    match stops the kernel, so tampered bytes are never run), mounts it
//!    read-only on [`SYSROOT`], puts a tmpfs copy of the image's `/etc` over
//!    `/etc` (accounts, host keys and the machine id are per boot) and a tmpfs
//!    on `/home`, and mounts the handoff directory [`HANDOFF`] (tmpfs, 0700).
//!    The bootstrapper then runs with the cluster step handed off
//!    ([`BOOTSTRAPPER_ARGS`]): it creates the Init's SSH users in the OS's
//!    `/etc` and `/home`, and leaves the cluster step's configuration in
//!    [`HANDOFF`] instead of running kubeadm.
//! 2. **after a bootstrap** ([`hand_over`]): mounts the state disk's ext4
//!    (`/dev/mapper/state`, dm-crypt) on the OS's `/var`: everything the OS
//!    keeps per node is there (kubelet `/var/lib/kubelet`, etcd on control
//!    planes `/var/lib/etcd`, kubeadm's `/etc/kubernetes` through a link in
//!    the image, confboot's own `/var/lib/confboot`, logs), encrypted and
//!    kept across reboots; writes the node agent's arguments to
//!    [`HANDOFF`]; moves `/dev`, `/proc`, `/sys` and `/run` into the new
//!    root; empties the initramfs; and executes the OS's init (switch_root,
//!    system calls only).
//!
//! Every failure is returned as a [`HandoverError`] that names the step; the
//! caller prints it and powers off after [`close_state`].

use std::ffi::CString;
use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use confboot_disk::dm::DeviceMapper;
use confboot_disk::dm::verity::{CorruptionMode, open_verity};
use confboot_disk::verity::{VerityParams, check_top_level};
use nix::mount::{MntFlags, MsFlags, mount, umount2};

/// Where the OS's root is mounted before the switch.
pub const SYSROOT: &str = "/sysroot";
/// The handoff directory: what the OS's units need from the bootstrap.
pub const HANDOFF: &str = "/run/confboot";
/// The device-mapper name of the verity root.
pub const ROOT_MAPPING: &str = "root";
/// The device-mapper name of the state disk (the bootstrapper's default
/// `--mapper-name`).
pub const STATE_MAPPING: &str = "state";
/// The OS's init.
pub const OS_INIT: &str = "/sbin/init";
/// The node agent's arguments for its unit (`EnvironmentFile=`).
pub const AGENT_ENV: &str = "nodeagent.env";
/// What the bootstrapper is given on top of `confboot.args` when it hands
/// over to an OS.
pub const BOOTSTRAPPER_ARGS: &[&str] = &[
    "--cluster-step",
    "handoff",
    "--handoff-dir",
    HANDOFF,
    "--ssh-users-root",
    SYSROOT,
];
/// Most entries of the image's `/etc` copied to the tmpfs.
const MAX_ETC_ENTRIES: usize = 20_000;
/// Most bytes of the image's `/etc` copied to the tmpfs.
const MAX_ETC_BYTES: u64 = 64 * 1024 * 1024;

/// A failed step of the handover.
#[derive(Debug)]
pub struct HandoverError {
    step: String,
    reason: String,
}

impl HandoverError {
    fn new(step: impl Into<String>, reason: impl fmt::Display) -> Self {
        HandoverError {
            step: step.into(),
            reason: reason.to_string(),
        }
    }
}

impl fmt::Display for HandoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.step, self.reason)
    }
}

/// The OS root, checked, mapped and mounted on [`SYSROOT`].
#[derive(Debug)]
pub struct PreparedRoot {
    params: VerityParams,
}

impl PreparedRoot {
    /// The root hash, as hex.
    pub fn root_hash_hex(&self) -> String {
        confboot_util::hex::encode(&self.params.root_hash)
    }
}

/// Step 1: with `confboot.root*` words, checks, maps and mounts the OS root
/// and prepares what the bootstrapper writes into; `Ok(None)` without them.
pub fn prepare_root(cmdline: &str) -> Result<Option<PreparedRoot>, HandoverError> {
    let params = match VerityParams::from_cmdline(cmdline) {
        Ok(Some(params)) => params,
        Ok(None) => return Ok(None),
        Err(e) => return Err(HandoverError::new("the confboot.root words", e)),
    };
    check_top_level(&params.hash_device, &params).map_err(|e| {
        HandoverError::new(
            format!(
                "the hash tree of {} against confboot.root.hash",
                params.hash_device.display()
            ),
            e,
        )
    })?;
    let device = open_verity(ROOT_MAPPING, &params, CorruptionMode::Panic)
        .map_err(|e| HandoverError::new("mapping the root with dm-verity", e))?;
    make_dir(Path::new(SYSROOT))?;
    mount(
        Some(device.as_path()),
        SYSROOT,
        Some("squashfs"),
        MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(|e| HandoverError::new(format!("mount {} on {SYSROOT}", device.display()), e))?;
    writable_etc()?;
    let home = format!("{SYSROOT}/home");
    mount_tmpfs(&home, "mode=0755")?;
    make_dir(Path::new(HANDOFF))?;
    mount_tmpfs(HANDOFF, "mode=0700")?;
    Ok(Some(PreparedRoot { params }))
}

/// Step 2: mounts the state disk on the OS's `/var`, leaves the agent's
/// arguments in the handoff, and switches root. Returns only on failure.
pub fn hand_over(root: &PreparedRoot, agent_args: &[std::ffi::OsString]) -> HandoverError {
    match switch(root, agent_args) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn switch(
    _root: &PreparedRoot,
    agent_args: &[std::ffi::OsString],
) -> Result<std::convert::Infallible, HandoverError> {
    let var = format!("{SYSROOT}/var");
    let state = format!("/dev/mapper/{STATE_MAPPING}");
    mount(
        Some(state.as_str()),
        var.as_str(),
        Some("ext4"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| HandoverError::new(format!("mount {state} on {var}"), e))?;
    var_skeleton(Path::new(&var))?;
    write_agent_env(agent_args)?;

    // /tmp is the initramfs's own; the OS makes its own.
    let _ = umount2("/tmp", MntFlags::MNT_DETACH);
    for dir in ["/dev", "/proc", "/sys", "/run"] {
        let target = format!("{SYSROOT}{dir}");
        mount(
            Some(dir),
            target.as_str(),
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|e| HandoverError::new(format!("move {dir} to {target}"), e))?;
    }
    empty_initramfs()?;
    nix::unistd::chdir(SYSROOT).map_err(|e| HandoverError::new("chdir /sysroot", e))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(|e| HandoverError::new("move /sysroot to /", e))?;
    nix::unistd::chroot(".").map_err(|e| HandoverError::new("chroot", e))?;
    nix::unistd::chdir("/").map_err(|e| HandoverError::new("chdir /", e))?;
    println!("CONFBOOT-SWITCH-ROOT {OS_INIT}");
    let init = CString::new(OS_INIT).expect("no NUL in a constant");
    let never = nix::unistd::execv(&init, &[&init])
        .map_err(|e| HandoverError::new(format!("execute {OS_INIT}"), e))?;
    match never {}
}

/// Closes the state disk after a failed handover (unmounts `/var` if it
/// was mounted, removes the dm-crypt mapping), so a node that stops leaves
/// no key in the kernel. Failures are printed.
pub fn close_state() {
    let var = format!("{SYSROOT}/var");
    let _ = umount2(var.as_str(), MntFlags::empty());
    match DeviceMapper::open_default().and_then(|dm| dm.remove(STATE_MAPPING)) {
        Ok(()) => println!("CONFBOOT-STATE-CLOSED {STATE_MAPPING}"),
        Err(e) => println!("CONFBOOT-WARN closing the state disk: {e}"),
    }
}

/// `dir`, created with its parents if missing.
fn make_dir(dir: &Path) -> Result<(), HandoverError> {
    fs::create_dir_all(dir).map_err(|e| HandoverError::new(format!("mkdir {}", dir.display()), e))
}

fn mount_tmpfs(target: &str, data: &str) -> Result<(), HandoverError> {
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data),
    )
    .map_err(|e| HandoverError::new(format!("mount tmpfs on {target}"), e))
}

/// A tmpfs over the OS's `/etc` holding a copy of the image's: the image's
/// `/etc` is bind-mounted aside first, copied, and unmounted again.
fn writable_etc() -> Result<(), HandoverError> {
    let etc = format!("{SYSROOT}/etc");
    let image_etc = "/run/confboot-image-etc";
    make_dir(Path::new(image_etc))?;
    mount(
        Some(etc.as_str()),
        image_etc,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| HandoverError::new(format!("bind {etc} on {image_etc}"), e))?;
    mount_tmpfs(&etc, "mode=0755")?;
    let mut budget = CopyBudget {
        entries: MAX_ETC_ENTRIES,
        bytes: MAX_ETC_BYTES,
    };
    copy_tree(Path::new(image_etc), Path::new(&etc), &mut budget)?;
    umount2(image_etc, MntFlags::empty())
        .map_err(|e| HandoverError::new(format!("umount {image_etc}"), e))?;
    let _ = fs::remove_dir(image_etc);
    Ok(())
}

/// What a [`copy_tree`] may still copy.
struct CopyBudget {
    entries: usize,
    bytes: u64,
}

/// Copies directories, regular files and symbolic links from `from` into
/// the existing directory `to`, with their modes and owners; other file
/// types are skipped. Bounded by `budget`.
fn copy_tree(from: &Path, to: &Path, budget: &mut CopyBudget) -> Result<(), HandoverError> {
    let failed =
        |what: &Path, e: std::io::Error| HandoverError::new(format!("copy {}", what.display()), e);
    let mut entries: Vec<_> = fs::read_dir(from)
        .map_err(|e| failed(from, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| failed(from, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        budget.entries = budget.entries.checked_sub(1).ok_or_else(|| {
            HandoverError::new(
                format!("copy {}", from.display()),
                format!("more than {MAX_ETC_ENTRIES} entries"),
            )
        })?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let meta = fs::symlink_metadata(&src).map_err(|e| failed(&src, e))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = fs::read_link(&src).map_err(|e| failed(&src, e))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(|e| failed(&dst, e))?;
        } else if kind.is_dir() {
            fs::create_dir(&dst).map_err(|e| failed(&dst, e))?;
            copy_tree(&src, &dst, budget)?;
        } else if kind.is_file() {
            budget.bytes = budget.bytes.checked_sub(meta.len()).ok_or_else(|| {
                HandoverError::new(
                    format!("copy {}", src.display()),
                    format!("more than {MAX_ETC_BYTES} bytes in all"),
                )
            })?;
            fs::copy(&src, &dst).map_err(|e| failed(&dst, e))?;
        } else {
            continue;
        }
        std::os::unix::fs::lchown(&dst, Some(meta.uid()), Some(meta.gid()))
            .map_err(|e| failed(&dst, e))?;
        if !kind.is_symlink() {
            fs::set_permissions(&dst, fs::Permissions::from_mode(meta.mode() & 0o7777))
                .map_err(|e| failed(&dst, e))?;
        }
    }
    Ok(())
}

/// What the OS expects under `/var` on a fresh state file system: the
/// links to `/run` and a world-writable `/var/tmp`. Existing entries stay.
fn var_skeleton(var: &Path) -> Result<(), HandoverError> {
    let failed =
        |what: &str, e: std::io::Error| HandoverError::new(format!("{}/{what}", var.display()), e);
    for (name, target) in [("run", "../run"), ("lock", "../run/lock")] {
        let link = var.join(name);
        if fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(target, &link).map_err(|e| failed(name, e))?;
        }
    }
    for dir in ["lib", "log", "cache", "spool"] {
        fs::create_dir_all(var.join(dir)).map_err(|e| failed(dir, e))?;
    }
    let tmp = var.join("tmp");
    fs::create_dir_all(&tmp).map_err(|e| failed("tmp", e))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).map_err(|e| failed("tmp", e))
}

/// The node agent's unit reads `NODEAGENT_ARGS` from [`AGENT_ENV`]; systemd
/// splits the value at white space, so an argument with white space, a
/// quote or a backslash is refused.
fn write_agent_env(args: &[std::ffi::OsString]) -> Result<(), HandoverError> {
    let line =
        agent_env_line(args).map_err(|reason| HandoverError::new("confboot.agentargs", reason))?;
    let path = PathBuf::from(HANDOFF).join(AGENT_ENV);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| HandoverError::new(format!("write {}", path.display()), e))
}

/// Why a `confboot.agentargs` argument cannot go into the node agent's
/// environment file.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgentArgError {
    /// The argument is not UTF-8.
    #[error("{0:?} is not UTF-8")]
    NotUtf8(std::ffi::OsString),
    /// The argument is empty or holds a character the file cannot carry.
    #[error(
        "{0:?}: an empty argument, or one with white space, a quote, a backslash or a dollar sign"
    )]
    Unsafe(String),
}

/// `NODEAGENT_ARGS=a b c\n`, or why an argument cannot go there.
pub fn agent_env_line(args: &[std::ffi::OsString]) -> Result<String, AgentArgError> {
    let mut words = Vec::with_capacity(args.len());
    for arg in args {
        let Some(word) = arg.to_str() else {
            return Err(AgentArgError::NotUtf8(arg.clone()));
        };
        if word.is_empty()
            || word.chars().any(|c| {
                c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\' | '$')
            })
        {
            return Err(AgentArgError::Unsafe(word.to_string()));
        }
        words.push(word);
    }
    Ok(format!("NODEAGENT_ARGS={}\n", words.join(" ")))
}

/// Deletes the initramfs's files (they would stay in memory for good once
/// the root moves): everything on the root file system's device except
/// [`SYSROOT`], never crossing into another mount.
fn empty_initramfs() -> Result<(), HandoverError> {
    let root_dev = fs::symlink_metadata("/")
        .map_err(|e| HandoverError::new("stat /", e))?
        .dev();
    remove_on_device(Path::new("/"), root_dev, Path::new(SYSROOT));
    Ok(())
}

/// Removes what `dir` holds on device `dev`, skipping `keep`; failures are
/// skipped (what stays is only memory).
fn remove_on_device(dir: &Path, dev: u64, keep: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == keep {
            continue;
        }
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.dev() != dev {
            continue;
        }
        if meta.is_dir() {
            remove_on_device(&path, dev, keep);
            let _ = fs::remove_dir(&path);
        } else {
            let _ = fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn agent_arguments_go_to_the_unit_as_words() {
        let args: Vec<OsString> = ["--vpn", "--vpn-interface=wg0"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(
            agent_env_line(&args).unwrap(),
            "NODEAGENT_ARGS=--vpn --vpn-interface=wg0\n"
        );
        assert_eq!(agent_env_line(&[]).unwrap(), "NODEAGENT_ARGS=\n");
        for bad in ["a b", "a\"b", "a'b", "a\\b", "$X", "", "a\nb"] {
            assert_eq!(
                agent_env_line(&[OsString::from(bad)]),
                Err(AgentArgError::Unsafe(bad.to_string())),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn copy_tree_keeps_modes_links_and_bounds() {
        let dir = std::env::temp_dir().join(format!("confboot-copy-tree-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let from = dir.join("from");
        let to = dir.join("to");
        fs::create_dir_all(from.join("ssh")).unwrap();
        fs::create_dir_all(&to).unwrap();
        fs::write(from.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        fs::write(from.join("ssh/key"), "k").unwrap();
        fs::set_permissions(from.join("ssh/key"), fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("../run/x", from.join("link")).unwrap();
        let mut budget = CopyBudget {
            entries: 10,
            bytes: 1024,
        };
        copy_tree(&from, &to, &mut budget).unwrap();
        assert_eq!(
            fs::read_to_string(to.join("passwd")).unwrap(),
            "root:x:0:0::/root:/bin/sh\n"
        );
        assert_eq!(
            fs::metadata(to.join("ssh/key")).unwrap().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::read_link(to.join("link")).unwrap(),
            Path::new("../run/x")
        );
        assert_eq!(budget.entries, 6);

        let to2 = dir.join("to2");
        fs::create_dir_all(&to2).unwrap();
        let mut small = CopyBudget {
            entries: 10,
            bytes: 4,
        };
        assert!(copy_tree(&from, &to2, &mut small).is_err());
        let mut few = CopyBudget {
            entries: 2,
            bytes: 1024,
        };
        let to3 = dir.join("to3");
        fs::create_dir_all(&to3).unwrap();
        assert!(copy_tree(&from, &to3, &mut few).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn var_skeleton_links_run_and_keeps_what_is_there() {
        let var = std::env::temp_dir().join(format!("confboot-var-{}", std::process::id()));
        let _ = fs::remove_dir_all(&var);
        fs::create_dir_all(var.join("lib/kept")).unwrap();
        var_skeleton(&var).unwrap();
        assert_eq!(fs::read_link(var.join("run")).unwrap(), Path::new("../run"));
        assert_eq!(
            fs::read_link(var.join("lock")).unwrap(),
            Path::new("../run/lock")
        );
        assert!(var.join("lib/kept").is_dir());
        assert_eq!(
            fs::metadata(var.join("tmp")).unwrap().mode() & 0o7777,
            0o1777
        );
        var_skeleton(&var).unwrap();
        fs::remove_dir_all(&var).unwrap();
    }
}
