#!/usr/bin/env bash
# Builds the Kubernetes parts confboot's tests and node image use, from their
# Go modules at pinned versions: kube-apiserver, kube-controller-manager,
# kube-scheduler (the third control-plane component kubeadm init runs),
# kubeadm, kubelet, kubemark and kubectl (k8s.io/kubernetes with every k8s.io/*
# staging module replaced by its matching release), etcd
# (go.etcd.io/etcd/server/v3) and the container runtime the node's kubelet
# talks to: containerd, its runc shim and ctr
# (github.com/containerd/containerd/v2). Nothing is fetched but Go modules.
#
# The binaries go into a cache directory keyed by the pinned versions
# ($CONFBOOT_KUBE_CACHE, by default ~/.cache/confboot/kubernetes/<key>/bin);
# a machine that has them skips the build. Prints that directory last.
#
#   scripts/kubernetes.sh            build what is missing, print the bin dir
#   scripts/kubernetes.sh --print    print the bin dir only (exit 1 if absent)
set -euo pipefail

KUBERNETES_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3
CONTAINERD_VERSION=v2.4.2
KEY="k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-containerd-$CONTAINERD_VERSION-4"
CACHE="${CONFBOOT_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/confboot/kubernetes}/$KEY"
BIN="$CACHE/bin"
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubeadm kubelet kubemark kubectl)
CONTAINERD_COMMANDS=(containerd containerd-shim-runc-v2 ctr)

case "${1:-}" in
  "") ;;
  --print) [ -f "$CACHE/complete" ] && { echo "$BIN"; exit 0; } || exit 1 ;;
  -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: scripts/kubernetes.sh [--print]" >&2; exit 2 ;;
esac

if [ -f "$CACHE/complete" ]; then
  echo "kubernetes: cached in $CACHE" >&2
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || { echo "kubernetes: no go toolchain on PATH" >&2; exit 1; }

mkdir -p "$CACHE/src/kubernetes" "$CACHE/src/etcd" "$CACHE/src/containerd" "$BIN.partial"
start=$(date +%s)
log() { echo "kubernetes: [$(( $(date +%s) - start ))s] $*" >&2; }
# go build -v names each package it compiles: count them as progress, and
# pass every other line (an error) through.
progress() {
  awk -v what="$1" -v t0="$start" '
    /[ :]/ { print > "/dev/stderr"; next }
    { n++; if (n % 200 == 0) printf "kubernetes: [%ds] %s: %d packages compiled\n", systime() - t0, what, n > "/dev/stderr" }'
}

# The release's version stamps (hack/lib/version.sh), so that
# `kubeadm version -o short` prints the release and kubeadm picks its images.
minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
build_date="$(date -u -d @"${SOURCE_DATE_EPOCH:-0}" +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

# k8s.io/kubernetes: a module that requires it and replaces each staging
# module (its own go.mod names them as ./staging/src/k8s.io/NAME).
cd "$CACHE/src/kubernetes"
log "downloading k8s.io/kubernetes@$KUBERNETES_VERSION"
kdir="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[ -f "$kdir/go.mod" ] || { echo "kubernetes: k8s.io/kubernetes@$KUBERNETES_VERSION not downloaded" >&2; exit 1; }
{
  echo "module confboot.local/kubernetes-build"
  echo
  sed -n 's/^go \(.*\)$/go \1/p' "$kdir/go.mod"
  echo
  echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
  echo
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*$#\t\1 => \1 '"$STAGING_VERSION"'#p' "$kdir/go.mod"
  echo ")"
} > go.mod
count="$(grep -c "=> k8s.io/" go.mod)"
[ "$count" -ge 30 ] || { echo "kubernetes: only $count staging modules found in k8s.io/kubernetes's go.mod" >&2; exit 1; }
printf 'package tools\n\nimport (\n' > tools.go
for c in "${COMMANDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c" >> tools.go; done
printf ')\n' >> tools.go
sed -i '1i //go:build tools\n' tools.go
log "resolving modules ($count staging modules replaced by $STAGING_VERSION)"
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
log "building ${COMMANDS[*]}"
pkgs=(); for c in "${COMMANDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -v -trimpath -ldflags "$ldflags" -o "$BIN.partial/" "${pkgs[@]}" 2>&1 | progress kubernetes
log "built ${COMMANDS[*]}"

# etcd: the server module's main package.
cd "$CACHE/src/etcd"
printf 'module confboot.local/etcd-build\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -v -trimpath -ldflags "-s -w" -o "$BIN.partial/etcd" go.etcd.io/etcd/server/v3 2>&1 | progress etcd
log "built etcd"

# containerd: the daemon, the runc shim and ctr (which imports the node's
# images), as containerd's `make STATIC=1` builds them but without cgo: the
# btrfs snapshotter is the one plugin that needs it, and it is left out
# (no_btrfs); the node uses the overlayfs snapshotter.
cd "$CACHE/src/containerd"
printf 'module confboot.local/containerd-build\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 %s\n' "$CONTAINERD_VERSION" > go.mod
printf '//go:build tools\n\npackage tools\n\nimport (\n' > tools.go
for c in "${CONTAINERD_COMMANDS[@]}"; do printf '\t_ "github.com/containerd/containerd/v2/cmd/%s"\n' "$c" >> tools.go; done
printf ')\n' >> tools.go
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
cpkg=github.com/containerd/containerd/v2
cldflags="-s -w -X $cpkg/version.Version=$CONTAINERD_VERSION -X $cpkg/version.Package=$cpkg"
ctags="urfave_cli_no_docs osusergo netgo static_build no_btrfs"
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -v -trimpath -tags "$ctags" -ldflags "$cldflags" -o "$BIN.partial/" \
  "$cpkg/cmd/containerd" "$cpkg/cmd/ctr" 2>&1 | progress containerd
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -v -trimpath -tags "$ctags no_grpc" -ldflags "$cldflags" \
  -o "$BIN.partial/containerd-shim-runc-v2" "$cpkg/cmd/containerd-shim-runc-v2" 2>&1 | progress containerd
log "built ${CONTAINERD_COMMANDS[*]}"

"$BIN.partial/kubeadm" version -o short | grep -qx "$KUBERNETES_VERSION" \
  || { echo "kubernetes: kubeadm does not report $KUBERNETES_VERSION" >&2; exit 1; }
"$BIN.partial/containerd" --version | grep -q " $CONTAINERD_VERSION\( \|$\)" \
  || { echo "kubernetes: containerd does not report $CONTAINERD_VERSION" >&2; exit 1; }
for b in "$BIN.partial"/*; do
  file -L "$b" | grep -q 'statically linked' || { echo "kubernetes: $b is not statically linked" >&2; exit 1; }
done
rm -rf "$BIN" && mv "$BIN.partial" "$BIN"
du -b "$BIN"/* | awk '{ n=$2; sub(".*/", "", n); printf "%s %d\n", n, $1 }' > "$CACHE/sizes"
echo "$(( $(date +%s) - start ))" > "$CACHE/build-seconds"
touch "$CACHE/complete"
log "done: $BIN"
echo "$BIN"
