#!/usr/bin/env bash
# Builds the node's operating system image from Debian packages,
# reproducibly: a read-only squashfs root with its dm-verity hash tree
# appended, and the kernel command-line words that pin it (PCR 9 covers
# them, so attestation covers the root).
#
#   os/build.sh --nodeagent PATH [--out DIR] [--add SRC:DEST]... [--unit FILE]...
#               [--verity-tool PATH] [--production [--kube-bin DIR] [--pause PATH]]
#
#   --nodeagent PATH   the static node agent, /usr/bin/nodeagent (the cluster
#                      step and the agent's services run it)
#   --out DIR          where root.img and root.cmdline go
#                      (default: .cache/os/out in the repository)
#   --add SRC:DEST     also install file SRC at absolute path DEST (mode 0755
#                      if SRC is executable, else 0644). Tests add their
#                      files and the test image's cluster-step drop-in
#                      this way.
#   --unit FILE        also install and enable the systemd unit FILE
#                      (WantedBy= of its [Install] section); repeatable.
#                      The repository's own units are always installed.
#   --verity-tool PATH the `confboot` CLI that builds the hash tree
#                      (`confboot verity format`; default: the static release
#                      build in target/, else `confboot` on PATH)
#   --production       the production node image: also Kubernetes' node parts,
#                      kubelet and kubeadm, the container runtime (containerd,
#                      its runc shim and ctr from --kube-bin; Debian's runc and
#                      containernetworking-plugins), the pause image (built
#                      here from --pause, imported into containerd at boot),
#                      the control plane's images (etcd, kube-apiserver,
#                      kube-controller-manager, kube-scheduler from
#                      --kube-bin, imported by the cluster step of a
#                      control plane before kubeadm runs),
#                      the units of os/production/ that start containerd
#                      and the kubelet, a CNI configuration (bridge +
#                      host-local) and the kernel modules they load
#                      (overlay, bridge, br_netfilter, veth, from the kernel
#                      package pinned in initramfs/kernel.sh). Without it:
#                      the test image, which has none of these (tests add
#                      their test units).
#   --kube-bin DIR     where kubelet, kubeadm, containerd, containerd-shim-runc-v2,
#                      ctr, etcd, kube-apiserver, kube-controller-manager and
#                      kube-scheduler are (default: `scripts/kubernetes.sh --print`)
#   --pause PATH       the static pause program (default: the static release
#                      build of os/pause in target/)
#
# Inputs: Debian bookworm's packages (mmdebstrap, variant essential, plus
# systemd, systemd-sysv, openssh-server; with --production also runc,
# containernetworking-plugins, mount), this script, the repository's
# units, the node agent and every --add/--unit file. The base system is
# cached as a tarball in .cache/os/ (named by the hash of the package
# selection), and its package versions go to OUT/packages.txt: the same
# inputs give the same bytes, hence the same root hash (mtimes clamped to
# SOURCE_DATE_EPOCH, default 0; mksquashfs -reproducible; a salt derived
# from the root file system's bytes).
#
# Output (OUT):
#   root.img       squashfs | zero padding to 4 KiB | verity superblock + hash tree
#   root.cmdline   the `confboot.root*` words for the kernel command line
#   packages.txt   every Debian package in the image, with its version
set -euo pipefail

die() { echo "os/build.sh: error: $*" >&2; exit 1; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The kernel's pin and its module tree (the production image's modules).
# shellcheck source=initramfs/kernel.sh
. "$REPO/initramfs/kernel.sh"
CACHE="$REPO/.cache/os"
OUT="$CACHE/out"
NODEAGENT=""
VERITY_TOOL=""
ADDS=()
UNITS=()
PRODUCTION=0
KUBE_BIN=""
PAUSE=""
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-0}"

while [ $# -gt 0 ]; do
    case "$1" in
        --nodeagent) NODEAGENT="${2:?}"; shift 2 ;;
        --out) OUT="${2:?}"; shift 2 ;;
        --add) ADDS+=("${2:?}"); shift 2 ;;
        --unit) UNITS+=("${2:?}"); shift 2 ;;
        --verity-tool) VERITY_TOOL="${2:?}"; shift 2 ;;
        --production) PRODUCTION=1; shift ;;
        --kube-bin) KUBE_BIN="${2:?}"; shift 2 ;;
        --pause) PAUSE="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ -n "$NODEAGENT" ] || die "--nodeagent PATH is required"
[ -f "$NODEAGENT" ] || die "no node agent at $NODEAGENT"
file -L "$NODEAGENT" | grep -q 'static' || die "$NODEAGENT is not statically linked"
if [ -z "$VERITY_TOOL" ]; then
    VERITY_TOOL="$REPO/target/x86_64-unknown-linux-musl/release/confboot"
    [ -x "$VERITY_TOOL" ] || VERITY_TOOL="$(command -v confboot || true)"
fi
[ -x "$VERITY_TOOL" ] || die "no confboot CLI for the hash tree (build it or pass --verity-tool)"
for tool in mmdebstrap mksquashfs depmod; do
    command -v "$tool" >/dev/null || die "$tool is missing (scripts/setup.sh installs it)"
done
[ "$(id -u)" -eq 0 ] || die "run as root (mmdebstrap --mode=root keeps the image's owners)"
KUBE_COMMANDS=(kubelet kubeadm containerd containerd-shim-runc-v2 ctr)
# kubeadm's static pods on a control plane, each an image of its program.
CONTROL_PLANE_COMMANDS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
# containerd's overlayfs snapshotter, the CNI bridge plugin's bridge and
# veth pairs, and bridged traffic through netfilter (net.bridge.*).
KUBE_MODULES=(overlay bridge br_netfilter veth)
if [ "$PRODUCTION" -eq 1 ]; then
    if [ -z "$KUBE_BIN" ]; then
        KUBE_BIN="$(bash "$REPO/scripts/kubernetes.sh" --print)" ||
            die "no Kubernetes parts built (run scripts/kubernetes.sh or pass --kube-bin)"
    fi
    for c in "${KUBE_COMMANDS[@]}" "${CONTROL_PLANE_COMMANDS[@]}"; do
        [ -f "$KUBE_BIN/$c" ] || die "no $c in $KUBE_BIN (--kube-bin)"
        file -L "$KUBE_BIN/$c" | grep -q 'static' || die "$KUBE_BIN/$c is not statically linked"
    done
    [ -n "$PAUSE" ] || PAUSE="$REPO/target/x86_64-unknown-linux-musl/release/pause"
    [ -f "$PAUSE" ] || die "no pause program at $PAUSE (cargo build --release --target x86_64-unknown-linux-musl -p confboot-pause, or --pause)"
    # The production image's kubeadm is the real one, never a double.
    for add in "${ADDS[@]}"; do
        case "${add#*:}" in
            /usr/bin/kubeadm|/usr/bin/kubelet) die "--production installs the real ${add#*:}; do not --add one" ;;
        esac
    done
elif [ -n "$KUBE_BIN$PAUSE" ]; then
    die "--kube-bin and --pause go with --production"
fi

# --- the Debian base system (cached) ---
SUITE=bookworm
INCLUDE=systemd,systemd-sysv,openssh-server
# runc and the CNI plugins are Debian's; kubeadm's preflight wants mount and losetup.
[ "$PRODUCTION" -eq 1 ] && INCLUDE+=,runc,containernetworking-plugins,mount
MMDEBSTRAP=(mmdebstrap --mode=root --format=tar --variant=essential --include="$INCLUDE"
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
    "$SUITE")
mkdir -p "$CACHE" "$OUT"
BASE_KEY="$(printf '%s\n' "${MMDEBSTRAP[@]}" "$SOURCE_DATE_EPOCH" | sha256sum | cut -c1-16)"
BASE="$CACHE/base-$BASE_KEY.tar"
exec 9>"$CACHE/.lock"
flock 9
if [ ! -s "$BASE" ]; then
    echo "os/build.sh: building the Debian base system ($SUITE, $INCLUDE)"
    start=$(date +%s)
    "${MMDEBSTRAP[@]}" "$BASE.tmp" >"$CACHE/mmdebstrap.log" 2>&1 ||
        { tail -20 "$CACHE/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $CACHE/mmdebstrap.log)"; }
    mv "$BASE.tmp" "$BASE"
    echo "os/build.sh: base system built in $(( $(date +%s) - start )) s"
fi

WORK="$(mktemp -d "$CACHE/work.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/root"
mkdir "$ROOT"
tar --numeric-owner -xpf "$BASE" -C "$ROOT"

# --- what confboot adds ---
install_file() { # SRC DEST
    local src="$1" dest="$ROOT$2" mode=0644
    [ -f "$src" ] || die "no file $src"
    [ -x "$src" ] && mode=0755
    install -D -m "$mode" -o 0 -g 0 "$src" "$dest"
}
enable_unit() { # FILE
    local unit="$1" name wanted
    name="$(basename "$unit")"
    install -D -m 0644 "$unit" "$ROOT/etc/systemd/system/$name"
    for wanted in $(sed -n 's/^WantedBy=//p' "$unit"); do
        mkdir -p "$ROOT/etc/systemd/system/$wanted.wants"
        ln -sf "../$name" "$ROOT/etc/systemd/system/$wanted.wants/$name"
    done
}
install_file "$NODEAGENT" /usr/bin/nodeagent
for unit in "$REPO"/os/units/*.service "$REPO"/nodeagent/*.service "${UNITS[@]}"; do
    [ -f "$unit" ] && enable_unit "$unit"
done
for add in "${ADDS[@]}"; do
    install_file "${add%%:*}" "${add#*:}"
done

# --- the production image: Kubernetes' node parts ---
if [ "$PRODUCTION" -eq 1 ]; then
    for c in "${KUBE_COMMANDS[@]}"; do
        install_file "$KUBE_BIN/$c" "/usr/bin/$c"
    done
    # The pause image under the name kubeadm expects for its release.
    kube_version="$("$KUBE_BIN/kubeadm" version -o short)"
    pause_image="$("$KUBE_BIN/kubeadm" config images list --kubernetes-version "$kube_version" 2>/dev/null |
        grep -m1 '/pause:')" || die "kubeadm $kube_version names no pause image"
    bash "$REPO/os/binary-image.sh" --binary "$PAUSE" --at /pause --entrypoint --user 65535:65535 \
        --name "$pause_image" --out "$ROOT/usr/lib/confboot/images/pause.tar"
    chmod 0644 "$ROOT/usr/lib/confboot/images/pause.tar"
    # The control plane's images, under the names kubeadm gives their
    # static pods; etcd is the release built here (its own tag, which the
    # cluster step hands kubeadm). Only a control plane imports them.
    images_listed="$("$KUBE_BIN/kubeadm" config images list --kubernetes-version "$kube_version" 2>/dev/null)"
    etcd_version="$("$KUBE_BIN/etcd" --version | sed -n 's/^etcd Version: //p')"
    [[ "$etcd_version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "etcd --version names no version"
    etcd_tag="$etcd_version-confboot"
    for c in "${CONTROL_PLANE_COMMANDS[@]}"; do
        if [ "$c" = etcd ]; then
            ref="$(grep -m1 '/etcd:' <<<"$images_listed")" || die "kubeadm names no etcd image"
            ref="${ref%:*}:$etcd_tag"
        else
            ref="$(grep -m1 "/$c:" <<<"$images_listed")" || die "kubeadm names no $c image"
        fi
        bash "$REPO/os/binary-image.sh" --binary "$KUBE_BIN/$c" --name "$ref" \
            --out "$ROOT/usr/lib/confboot/images/control-plane/$c.tar"
        chmod 0644 "$ROOT/usr/lib/confboot/images/control-plane/$c.tar"
    done
    # kubeadm mounts the controller manager's FlexVolume directory
    # (DirectoryOrCreate): the read-only root carries it.
    install -d -m 0755 "$ROOT/usr/libexec/kubernetes/kubelet-plugins/volume/exec"
    install -d -m 0755 "$ROOT/etc/containerd" "$ROOT/etc/cni/net.d"
    sed "s|@PAUSE_IMAGE@|$pause_image|" "$REPO/os/production/containerd/config.toml" \
        >"$ROOT/etc/containerd/config.toml"
    grep -q "sandbox = '$pause_image'" "$ROOT/etc/containerd/config.toml" || die "containerd's config names no pause image"
    for unit in "$REPO"/os/production/units/*.service; do
        enable_unit "$unit"
    done
    sed "s|@ETCD_IMAGE_TAG@|$etcd_tag|" "$REPO/os/production/cluster-step.d/10-kubernetes.conf" |
        install -D -m 0644 /dev/stdin "$ROOT/etc/systemd/system/confboot-cluster-step.service.d/10-kubernetes.conf"
    grep -q "CONFBOOT_ETCD_IMAGE_TAG=$etcd_tag" \
        "$ROOT/etc/systemd/system/confboot-cluster-step.service.d/10-kubernetes.conf" ||
        die "the cluster step's drop-in names no etcd image tag"
    install -D -m 0644 "$REPO/os/production/sysctl.d/kubernetes.conf" "$ROOT/etc/sysctl.d/90-kubernetes.conf"
    # The pod network: Debian's bridge and host-local plugins (the kubelet
    # reports the node Ready once containerd has a network configuration).
    install -D -m 0644 "$REPO/os/production/cni/10-confboot.conflist" "$ROOT/etc/cni/net.d/10-confboot.conflist"
    # The kernel modules the node parts need, from the kernel the node boots
    # (the pin of initramfs/kernel.sh), with their dependencies; systemd
    # loads them early (modules-load.d), before containerd and the sysctls.
    kernel_tree "$REPO/.cache/initramfs"
    module_order "${KUBE_MODULES[@]}"
    for f in "${ORDER[@]}"; do
        install -D -m 0644 "$MODDIR/$f" "$ROOT/usr/lib/modules/$KERNEL_RELEASE/$f"
    done
    for f in modules.order modules.builtin modules.builtin.modinfo; do
        [ -f "$MODDIR/$f" ] && install -m 0644 "$MODDIR/$f" "$ROOT/usr/lib/modules/$KERNEL_RELEASE/$f"
    done
    depmod -b "$ROOT" "$KERNEL_RELEASE"
    install -d -m 0755 "$ROOT/etc/modules-load.d"
    printf '%s\n' "# Kubernetes' node parts (os/build.sh --production)" "${KUBE_MODULES[@]}" \
        >"$ROOT/etc/modules-load.d/kubernetes.conf"
    [ -x "$ROOT/usr/sbin/runc" ] || die "Debian's runc is not at /usr/sbin/runc"
    [ -x "$ROOT/usr/lib/cni/bridge" ] || die "Debian's CNI plugins are not in /usr/lib/cni"
    echo "os/build.sh: production: kubelet, kubeadm $kube_version, $("$KUBE_BIN/containerd" --version | cut -d' ' -f1,3), runc $(chroot "$ROOT" dpkg-query -W -f '${Version}' runc), $pause_image, control plane images: ${CONTROL_PLANE_COMMANDS[*]} (etcd $etcd_tag)"
fi

# The node agent's TPM group, and the device's mode without udev.
chroot "$ROOT" groupadd --system tss
install -D -m 0644 "$REPO/os/tmpfiles.d/confboot.conf" "$ROOT/usr/lib/tmpfiles.d/confboot.conf"

# Host keys are made at every boot (os/units/confboot-ssh-host-keys.service):
# an image is public, its keys would be everyone's.
rm -f "$ROOT"/etc/ssh/ssh_host_*
install -D -m 0644 "$REPO/os/sshd-confboot.conf" "$ROOT/etc/ssh/sshd_config.d/confboot.conf"
# The host name comes from DHCP (PID 1 sets it); the build machine's must not leak in.
rm -f "$ROOT/etc/hostname"
printf '# confboot: the root is read-only; PID 1 mounts the rest.\n' >"$ROOT/etc/fstab"
# No console logins, no first-boot prompts, no services that need D-Bus or udev.
for masked in getty.target systemd-firstboot.service systemd-logind.service \
    dpkg-db-backup.timer fstrim.timer systemd-pstore.service; do
    ln -sf /dev/null "$ROOT/etc/systemd/system/$masked"
done
# Mount points PID 1 uses: /var (the state disk), /etc and /home (tmpfs).
mkdir -p "$ROOT/var" "$ROOT/home" "$ROOT/run"
# kubeadm's files are node state: on the state disk, as kubelet's and etcd's.
rm -rf "$ROOT/etc/kubernetes"
ln -s /var/lib/kubernetes "$ROOT/etc/kubernetes"
# Leftovers that differ between builds.
rm -rf "$ROOT"/var/log/* "$ROOT"/var/cache/ldconfig/aux-cache "$ROOT"/tmp/* "$ROOT"/run/*
: >"$ROOT/etc/machine-id"

chroot "$ROOT" dpkg-query -W -f '${Package} ${Version}\n' | sort >"$OUT/packages.txt"

# --- squashfs + dm-verity ---
rm -f "$OUT/root.img" "$OUT/root.cmdline"
env -u SOURCE_DATE_EPOCH mksquashfs "$ROOT" "$WORK/root.squashfs" -quiet -no-progress -noappend -comp zstd \
    -all-time "$SOURCE_DATE_EPOCH" -mkfs-time "$SOURCE_DATE_EPOCH" -reproducible -processors 1 >/dev/null
fs_size=$(stat -c %s "$WORK/root.squashfs")
data_size=$(( (fs_size + 4095) / 4096 * 4096 ))
truncate -s "$data_size" "$WORK/root.squashfs"
# The salt and the superblock's UUID come from the file system's bytes: the
# same root gives the same hash tree.
digest=$(sha256sum "$WORK/root.squashfs" | cut -d' ' -f1)
salt="$digest"
uuid="${digest:0:8}-${digest:8:4}-4${digest:13:3}-8${digest:17:3}-${digest:20:12}"
mv "$WORK/root.squashfs" "$OUT/root.img"
"$VERITY_TOOL" verity format "$OUT/root.img" "$OUT/root.img" --hash-offset "$data_size" \
    --salt "$salt" --uuid "$uuid" --root-device /dev/vdb >"$WORK/verity.txt"
sed -n 's/^Kernel command line: //p' "$WORK/verity.txt" >"$OUT/root.cmdline"
[ -s "$OUT/root.cmdline" ] || { cat "$WORK/verity.txt" >&2; die "confboot verity format printed no command line"; }
touch -d "@$SOURCE_DATE_EPOCH" "$OUT/root.img" "$OUT/root.cmdline" "$OUT/packages.txt"

echo "os/build.sh: $(wc -l <"$OUT/packages.txt") Debian packages ($SUITE), squashfs $fs_size bytes, image $(stat -c %s "$OUT/root.img") bytes"
echo "os/build.sh: root hash $(sed -n 's/^Root hash:[[:space:]]*//p' "$WORK/verity.txt")"
echo "os/build.sh: command line: $(cat "$OUT/root.cmdline")"
echo "os/build.sh: sha256 $(sha256sum "$OUT/root.img" | cut -d' ' -f1)"
