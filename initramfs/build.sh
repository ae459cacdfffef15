#!/usr/bin/env bash
# Builds confboot's node initramfs (and copies the matching kernel) from
# Debian packages, reproducibly: the same inputs give the same bytes.
#
#   initramfs/build.sh --bootstrapper PATH [--nodeagent PATH|builtin] [--out DIR] [--stamp TEXT]
#                      [--test-tools] [--add SRC:DEST]... [--add-dynamic SRC:DEST]...
#                      [--cmdline TEXT [--confboot PATH]]
#
#   --bootstrapper PATH  a static bootstrapper binary, installed as
#                        /usr/bin/bootstrapper; /init is a link to it (the
#                        bootstrapper runs as PID 1: no shell in the image)
#   --nodeagent PATH|builtin
#                        the node agent, /usr/bin/nodeagent: /init runs it
#                        once the bootstrapper has bootstrapped the node (the
#                        verify service on port 8080, the VPN) until the node
#                        is powered off. builtin (what production images
#                        use): a link to the bootstrapper, which carries the
#                        node agent and runs it when started by that name;
#                        PATH: a separate static binary
#   --out DIR            where vmlinuz and initramfs.cpio.zst go
#                        (default: .cache/initramfs/out in the repository)
#   --stamp TEXT         written to /etc/confboot-stamp (default "0"); tests
#                        use it to make two images that differ by one byte
#   --test-tools         a TEST image: also busybox-static (every applet as a
#                        link) and initramfs/test/hook as /test/hook (the
#                        probe tasks and the confboot.after steps, which /init
#                        runs only if that file exists). The production image
#                        is built without it: no busybox, no shell, no /test.
#   --add SRC:DEST       also install file SRC at absolute path DEST in the
#                        image (repeatable; mode 0755 if SRC is executable,
#                        else 0644). For test images only (e.g. the kubeadm
#                        double); needs --test-tools, the production image
#                        uses neither.
#   --add-dynamic SRC:DEST  like --add for a dynamically linked program,
#                        which also brings its shared-library closure (as
#                        ldd resolves it). Needs --test-tools (the SSH server
#                        of the VM tests); the production image uses none.
#   --cmdline TEXT       the whole kernel command line the image boots with
#                        (QEMU -append; PCR 9 covers it): prints the image's
#                        measurement policy and writes it and the predicted
#                        event log next to the image (measurements.json,
#                        measurements.events.json), by `confboot measure`
#   --confboot PATH      the confboot CLI that measures (default: the static
#                        release build in target/, else `confboot` on PATH)
#
# Inputs: the pinned kernel package below (downloaded once into
# .cache/initramfs/), and for test images only the build machine's
# cryptsetup-bin (with its shared libraries) and busybox-static. It prints
# every file of the image with its size. Output files get fixed mtimes
# (SOURCE_DATE_EPOCH, default 0), owner 0:0, a sorted newc cpio
# (`cpio --reproducible`) and `zstd -19 -T1` (8.9 % smaller than -12 for the
# production image; zstd decompresses about as fast whatever the level).
set -euo pipefail

# Modules to load, roots only: dependencies come from modules.dep.
MODULES=(
    virtio_pci virtio_net virtio_blk
    dm-mod dm-crypt dm-verity squashfs
    cryptd crypto_simd aesni-intel ecb xts
    crc32c_generic crc32c-intel ext4
    wireguard
)
# No af_alg/algif_skcipher/algif_hash (the kernel's crypto API for user
# space): the bootstrapper's LUKS2 does its crypto in Rust, dm-crypt calls
# the kernel's crypto API directly, and the test images' cryptsetup works
# without them (tests/tests/vm_native_disk.rs, boot.rs).

die() { echo "build.sh: error: $*" >&2; exit 1; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=initramfs/kernel.sh
. "$REPO/initramfs/kernel.sh"
CACHE="$REPO/.cache/initramfs"
OUT="$CACHE/out"
BOOTSTRAPPER=""
NODEAGENT=""
STAMP="0"
ADDS=()
DYN_ADDS=()
CMDLINE=""
MEASURE_WITH=""
HAVE_CMDLINE=0
TEST_TOOLS=0
while [ $# -gt 0 ]; do
    case "$1" in
        --bootstrapper) [ $# -ge 2 ] || die "--bootstrapper needs a path"; BOOTSTRAPPER="$2"; shift 2 ;;
        --nodeagent) [ $# -ge 2 ] || die "--nodeagent needs a path"; NODEAGENT="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || die "--out needs a directory"; OUT="$2"; shift 2 ;;
        --stamp) [ $# -ge 2 ] || die "--stamp needs a text"; STAMP="$2"; shift 2 ;;
        --test-tools) TEST_TOOLS=1; shift ;;
        --add) [ $# -ge 2 ] || die "--add needs SRC:DEST"; ADDS+=("$2"); shift 2 ;;
        --add-dynamic) [ $# -ge 2 ] || die "--add-dynamic needs SRC:DEST"; ADDS+=("$2"); DYN_ADDS+=("$2"); shift 2 ;;
        --cmdline) [ $# -ge 2 ] || die "--cmdline needs a text"; CMDLINE="$2"; HAVE_CMDLINE=1; shift 2 ;;
        --confboot) [ $# -ge 2 ] || die "--confboot needs a path"; MEASURE_WITH="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-0}"
export LC_ALL=C TZ=UTC

for tool in apt-get dpkg-deb depmod cpio zstd ldd find sort; do
    command -v "$tool" >/dev/null || die "'$tool' not found (Debian packages: apt, dpkg, kmod, cpio, zstd, libc-bin, findutils, coreutils)"
done
BUSYBOX=/bin/busybox
if [ "$TEST_TOOLS" = 1 ]; then
    [ -x "$BUSYBOX" ] && "$BUSYBOX" --list | grep -x nc >/dev/null || die "$BUSYBOX missing or not busybox (install Debian busybox-static)"
    file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || [ ! -x "$(command -v file)" ] || die "$BUSYBOX is not static (install busybox-static, not busybox)"
fi
CRYPTSETUP=/usr/sbin/cryptsetup
if [ "$TEST_TOOLS" = 1 ]; then
    [ -x "$CRYPTSETUP" ] || die "$CRYPTSETUP missing (install Debian cryptsetup-bin)"
fi
[ -n "$BOOTSTRAPPER" ] || die "--bootstrapper is needed: it is the image's /init"
[ "${#ADDS[@]}" = 0 ] || [ "$TEST_TOOLS" = 1 ] || die "--add is for test images: give --test-tools too"
NODEAGENT_FILE="$NODEAGENT"
[ "$NODEAGENT" != builtin ] || NODEAGENT_FILE=""
for bin in ${BOOTSTRAPPER:+"bootstrapper:$BOOTSTRAPPER"} ${NODEAGENT_FILE:+"nodeagent:$NODEAGENT_FILE"}; do
    name="${bin%%:*}"; path="${bin#*:}"
    [ -f "$path" ] || die "$name '$path' is not a file"
    if ldd "$path" >/dev/null 2>&1 && ! ldd "$path" 2>&1 | grep -q 'statically linked'; then
        die "$name '$path' is dynamically linked; build it for x86_64-unknown-linux-musl"
    fi
done

for add in ${ADDS[@]+"${ADDS[@]}"}; do
    src="${add%%:*}"; dest="${add#*:}"
    [ "$src" != "$add" ] || die "--add '$add': expected SRC:DEST"
    [ -f "$src" ] || die "--add: '$src' is not a file"
    case "$dest" in
        /*) ;;
        *) die "--add: destination '$dest' must be an absolute path" ;;
    esac
    case "/$dest/" in
        */../*|*/./*) die "--add: destination '$dest' must not contain . or .." ;;
    esac
done

# --- kernel package (cached) ---
mkdir -p "$CACHE"
# One build at a time may fill the cache.
exec 9>"$CACHE/.lock"
flock 9 || die "cannot lock $CACHE/.lock"
# The kernel, pinned in initramfs/kernel.sh (os/build.sh reads the same pin).
kernel_tree "$CACHE"

# --- module order: dependencies first, each once ---
module_order "${MODULES[@]}"

# --- the tree ---
WORK="$(mktemp -d "${TMPDIR:-/tmp}/confboot-initramfs.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/root"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,dev,proc,sys,run,tmp,mnt,lib/modules,var}
ln -s ../run "$ROOT/var/run"

# Test images only: busybox (the hook's shell and tools) and the hook.
if [ "$TEST_TOOLS" = 1 ]; then
    install -m 0755 "$BUSYBOX" "$ROOT/bin/busybox"
    for applet in $("$BUSYBOX" --list); do
        [ "$applet" = busybox ] && continue
        [ -e "$ROOT/bin/$applet" ] || ln -s busybox "$ROOT/bin/$applet"
    done
    install -D -m 0755 "$REPO/initramfs/test/hook" "$ROOT/test/hook"
fi

: >"$ROOT/lib/modules/load-order"
for f in "${ORDER[@]}"; do
    base="$(basename "$f")"
    case "$base" in
        *.ko) install -m 0644 "$MODDIR/$f" "$ROOT/lib/modules/$base" ;;
        *.ko.xz) xz -dc "$MODDIR/$f" >"$ROOT/lib/modules/${base%.xz}"; base="${base%.xz}" ;;
        *) die "unsupported module file $f" ;;
    esac
    echo "$base" >>"$ROOT/lib/modules/load-order"
done

# Test images only: cryptsetup (the oracle of the LUKS2 interop probes;
# the bootstrapper maps its disk with its own LUKS2 and device-mapper
# code) and the --add-dynamic programs, with exactly their shared-library
# closure (as ldd resolves it). The production image holds no C program
# and no shared library: the bootstrapper makes the state disk's ext4
# itself (no mke2fs).
copy_lib() {
    local src="$1" real dest
    real="$(readlink -f "$src")"
    dest="$ROOT$src"
    mkdir -p "$(dirname "$dest")"
    [ -e "$dest" ] || install -m 0755 "$real" "$dest"
}
if [ "$TEST_TOOLS" = 1 ]; then
    install -m 0755 "$CRYPTSETUP" "$ROOT/usr/sbin/cryptsetup"
    LIBS="$(ldd "$CRYPTSETUP" | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | sort -u)"
    [ -n "$LIBS" ] || die "ldd found no libraries for $CRYPTSETUP"
    for lib in $LIBS; do copy_lib "$lib"; done
    # glibc dlopens libgcc_s for thread cancellation.
    for extra in /lib/x86_64-linux-gnu/libgcc_s.so.1; do [ -e "$extra" ] && copy_lib "$extra"; done
    # The dynamic loader at its canonical path.
    [ -e "$ROOT/lib64/ld-linux-x86-64.so.2" ] || die "no /lib64/ld-linux-x86-64.so.2 in the closure"
fi
# --add-dynamic (test images only): the programs' shared libraries too.
# The programs themselves are installed with the --add files below.
for add in ${DYN_ADDS[@]+"${DYN_ADDS[@]}"}; do
    src="${add%%:*}"
    DYN_LIBS="$(ldd "$src" | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | sort -u)"
    [ -n "$DYN_LIBS" ] || die "--add-dynamic: ldd found no libraries for '$src' (a static program: use --add)"
    for lib in $DYN_LIBS; do copy_lib "$lib"; done
done

install -m 0755 "$BOOTSTRAPPER" "$ROOT/usr/bin/bootstrapper"
if [ "$NODEAGENT" = builtin ]; then
    ln -s bootstrapper "$ROOT/usr/bin/nodeagent"
elif [ -n "$NODEAGENT" ]; then
    install -m 0755 "$NODEAGENT" "$ROOT/usr/bin/nodeagent"
fi

# PID 1 is the bootstrapper (it runs its init when its PID is 1).
ln -s usr/bin/bootstrapper "$ROOT/init"
for add in ${ADDS[@]+"${ADDS[@]}"}; do
    src="${add%%:*}"; dest="${add#*:}"
    mode=0644
    [ -x "$src" ] && mode=0755
    install -D -m "$mode" "$src" "$ROOT$dest"
    echo "added: $dest ($mode, $(stat -c %s "$src") bytes)"
done
printf '%s\n' "$STAMP" >"$ROOT/etc/confboot-stamp"
printf 'root:x:0:0:root:/:/sbin/nologin\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\n' >"$ROOT/etc/group"
printf '%s %s\n' "$KERNEL_PKG" "$KERNEL_PKG_VERSION" >"$ROOT/etc/confboot-kernel"

# --- archive ---
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$OUT"
RAW="$WORK/initramfs.cpio"
(cd "$ROOT" && find . -mindepth 1 -printf '%P\n' | sort | cpio --quiet --reproducible -o -H newc -R 0:0 >"$RAW")
zstd -q -19 -T1 -f "$RAW" -o "$OUT/initramfs.cpio.zst"
zst_size="$(stat -c %s "$OUT/initramfs.cpio.zst")"
# Zero-pad to a multiple of 64 KiB (the kernel skips zeros after an
# archive). QEMU's -kernel loader writes the initrd's size into the kernel's
# setup header, so OVMF's PCR 4 depends on it: padding keeps PCR 4 the same
# for images whose content (PCR 9) differs slightly.
truncate -s %65536 "$OUT/initramfs.cpio.zst"
install -m 0644 "$KTREE/boot/vmlinuz-$KERNEL_RELEASE" "$OUT/vmlinuz"
touch -d "@$SOURCE_DATE_EPOCH" "$OUT/initramfs.cpio.zst" "$OUT/vmlinuz"

raw_size="$(stat -c %s "$RAW")"
padded_size="$(stat -c %s "$OUT/initramfs.cpio.zst")"
echo "kernel: $KERNEL_PKG $KERNEL_PKG_VERSION ($KERNEL_RELEASE)"
echo "modules: $(tr '\n' ' ' <"$ROOT/lib/modules/load-order")"
echo "image: $([ "$TEST_TOOLS" = 1 ] && echo "TEST (busybox, /test/hook)" || echo "production (no shell)")"
echo "files (bytes, path):"
(cd "$ROOT" && find . -mindepth 1 \( -type f -o -type l \) -printf '%P\t%y\t%s\t%l\n' | sort |
    awk -F '\t' '{ if ($2 == "l") printf "  %10s %s -> %s\n", "link", $1, $4; else printf "  %10d %s\n", $3, $1 }')
echo "bootstrapper: $BOOTSTRAPPER"
echo "nodeagent: ${NODEAGENT:-none}"
echo "initramfs: $OUT/initramfs.cpio.zst compressed $zst_size bytes (padded to $padded_size), raw $raw_size bytes"
echo "sha256: $(sha256sum "$OUT/initramfs.cpio.zst" | cut -d' ' -f1)"

# --- the image's measurement policy (predicted, no boot) ---
if [ "$HAVE_CMDLINE" = 1 ]; then
    if [ -z "$MEASURE_WITH" ]; then
        MEASURE_WITH="$REPO/target/x86_64-unknown-linux-musl/release/confboot"
        [ -x "$MEASURE_WITH" ] || MEASURE_WITH="$(command -v confboot || true)"
    fi
    [ -n "$MEASURE_WITH" ] && [ -x "$MEASURE_WITH" ] ||
        die "--cmdline needs the confboot CLI: build it (cargo build --release --target x86_64-unknown-linux-musl -p confboot-cli) or give --confboot PATH"
    "$MEASURE_WITH" measure --kernel "$OUT/vmlinuz" --initrd "$OUT/initramfs.cpio.zst" \
        --cmdline "$CMDLINE" --policy-out "$OUT/measurements.json" \
        --events-out "$OUT/measurements.events.json"
    echo "policy ($OUT/measurements.json):"
    cat "$OUT/measurements.json"
fi
