# The kernel every node boots, pinned exactly, and how to get its module
# tree. Sourced by initramfs/build.sh (the initramfs's modules and the
# kernel image) and os/build.sh --production (the modules Kubernetes' node
# parts load in the OS): one pin for both, so the OS's modules are the
# booted kernel's. Override KERNEL_PKG and KERNEL_PKG_VERSION together to
# move to another ABI. Needs die() from the sourcing script.

KERNEL_PKG="${KERNEL_PKG:-linux-image-6.1.0-56-amd64}"
KERNEL_PKG_VERSION="${KERNEL_PKG_VERSION:-6.1.192-2}"
KERNEL_RELEASE="${KERNEL_PKG#linux-image-}"

# kernel_tree CACHE: the package downloaded once into CACHE (apt-get
# download, by name and version) and unpacked there with its modules.dep
# (depmod -b: the package ships none). Sets KTREE (the unpacked package)
# and MODDIR (its lib/modules/RELEASE).
kernel_tree() {
    local cache="$1" deb
    mkdir -p "$cache"
    # One build at a time fills the cache (a lock of its own: the caller
    # may hold the cache's other locks).
    exec 8>"$cache/.kernel-lock"
    flock 8 || die "cannot lock $cache/.kernel-lock"
    deb="$cache/${KERNEL_PKG}_${KERNEL_PKG_VERSION}_amd64.deb"
    if [ ! -f "$deb" ]; then
        echo "downloading $KERNEL_PKG=$KERNEL_PKG_VERSION"
        (cd "$cache" && apt-get download "$KERNEL_PKG=$KERNEL_PKG_VERSION" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
        if [ ! -f "$deb" ] && [ "$(id -u)" -eq 0 ]; then
            echo "refreshing the package lists once (apt-get update)"
            apt-get update -qq || true
            (cd "$cache" && apt-get download "$KERNEL_PKG=$KERNEL_PKG_VERSION" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
        fi
        [ -f "$deb" ] || die "could not download $KERNEL_PKG=$KERNEL_PKG_VERSION (run apt-get update; is the version still in the archive?)"
    fi
    KTREE="$cache/kernel-$KERNEL_PKG_VERSION"
    if [ ! -f "$KTREE/.done" ]; then
        rm -rf "$KTREE"
        mkdir -p "$KTREE"
        dpkg-deb -x "$deb" "$KTREE"
        depmod -b "$KTREE" "$KERNEL_RELEASE"
        touch "$KTREE/.done"
    fi
    flock -u 8
    MODDIR="$KTREE/lib/modules/$KERNEL_RELEASE"
    [ -f "$MODDIR/modules.dep" ] || die "no modules.dep in $MODDIR"
}

# module_order NAME...: the module files (relative to MODDIR) NAME... need,
# dependencies first, each once, in ORDER.
module_order() {
    declare -gA SEEN=()
    ORDER=()
    local m
    for m in "$@"; do _module_visit "$m"; done
}
_module_dep_line() {
    # modules.dep names files with '-' or '_' as the module names differ.
    local name="$1" pat
    pat="$(printf '%s' "$name" | sed 's/[-_]/[-_]/g')"
    grep -E "(^|/)${pat}\.ko(\.[a-z]+)?:" "$MODDIR/modules.dep" | head -n1
}
_module_visit() {
    local line file deps d
    line="$(_module_dep_line "$1")"
    [ -n "$line" ] || die "module '$1' not in modules.dep of $KERNEL_RELEASE"
    file="${line%%:*}"
    [ -z "${SEEN[$file]:-}" ] || return 0
    SEEN[$file]=1
    deps="${line#*:}"
    # modules.dep lists the direct and indirect dependencies, the
    # most-depended-upon last: load them in reverse order.
    local arr=()
    for d in $deps; do arr=("$d" "${arr[@]}"); done
    for d in "${arr[@]}"; do
        d="$(basename "$d")"; d="${d%%.ko*}"
        _module_visit "$d"
    done
    ORDER+=("$file")
}
