#!/usr/bin/env bash
# Packs one static program built here as an OCI image-layout tarball that
# `ctr images import` takes, so that a node runs its pod sandboxes (the
# pause image) and, on a control plane, kubeadm's static pods (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler) without pulling
# anything from a registry.
#
#   os/binary-image.sh --binary PATH --name REF --out FILE [--at PATH]
#                      [--entrypoint] [--user UID:GID]
#
#   --binary PATH  the static program
#   --name REF     the image's name, as kubeadm and containerd expect it
#                  (registry.k8s.io/pause:<ver>, <ver> from `kubeadm config
#                  images list`)
#   --out FILE     the tarball to write
#   --at PATH      where the program is in the image (default
#                  /usr/local/bin/<its name>, where the release's images
#                  keep theirs; the pause image has it at /pause)
#   --entrypoint   the program is the image's entrypoint (the pause image;
#                  kubeadm's static pods name their command, found on PATH)
#   --user U:G     the image's user (default 0:0; the pause image 65535:65535)
#
# The image is one uncompressed layer holding the program (and /tmp),
# PATH set as containerd's default, linux/amd64. The bytes depend only on
# the inputs (every time SOURCE_DATE_EPOCH, default 0; owners 0:0; names
# sorted), so the same inputs give the same image digest.
set -euo pipefail
umask 022

die() { echo "os/binary-image.sh: error: $*" >&2; exit 1; }

BINARY=""
NAME=""
OUT=""
AT=""
ENTRYPOINT=0
USER_GROUP="0:0"
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) BINARY="${2:?}"; shift 2 ;;
        --name) NAME="${2:?}"; shift 2 ;;
        --out) OUT="${2:?}"; shift 2 ;;
        --at) AT="${2:?}"; shift 2 ;;
        --entrypoint) ENTRYPOINT=1; shift ;;
        --user) USER_GROUP="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ -f "$BINARY" ] || die "no program at '$BINARY' (--binary)"
file -L "$BINARY" | grep -q 'statically linked\|static-pie' || die "$BINARY is not statically linked"
[ -n "$AT" ] || AT="/usr/local/bin/$(basename "$BINARY")"
[[ "$AT" =~ ^(/[A-Za-z0-9._-]+)+$ && "$AT" != */../* && "$AT" != */./* ]] || die "--at '$AT' is not an absolute path"
[[ "$USER_GROUP" =~ ^[0-9]{1,5}:[0-9]{1,5}$ ]] || die "--user '$USER_GROUP' is not UID:GID"
# A reference with a tag, and nothing that could break the JSON below.
[[ "$NAME" =~ ^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+:[A-Za-z0-9._-]{1,128}$ ]] \
    || die "--name '$NAME' is not a registry/repository:tag reference"
[ -n "$OUT" ] || die "--out FILE is required"
tag="${NAME##*:}"
epoch="${SOURCE_DATE_EPOCH:-0}"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
blobs="$work/layout/blobs/sha256"
mkdir -p "$work/layer" "$blobs"
install -D -m 0755 "$BINARY" "$work/layer$AT"
install -d -m 1777 "$work/layer/tmp"

reproducible_tar() { # DIR OUT NAMES...
    local dir="$1" out="$2"; shift 2
    tar --create --file "$out" --directory "$dir" --format=posix --sort=name \
        --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime "$@"
}
# blob FILE -> prints "sha256:<hex> <size>" and stores FILE under blobs/.
blob() {
    local hex size
    hex="$(sha256sum "$1" | cut -d' ' -f1)"
    size="$(stat -c %s "$1")"
    cp "$1" "$blobs/$hex"
    echo "sha256:$hex $size"
}

# Every entry, parents first (sorted by tar).
top="${AT#/}"; top="${top%%/*}"
reproducible_tar "$work/layer" "$work/layer.tar" "$top" tmp
read -r layer_digest layer_size < <(blob "$work/layer.tar")

entrypoint=""
[ "$ENTRYPOINT" -eq 1 ] && entrypoint="\"Entrypoint\":[\"$AT\"],"
printf '{"architecture":"amd64","os":"linux","created":"%s","config":{"User":"%s","Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],%s"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["%s"]},"history":[{"created":"%s","created_by":"os/binary-image.sh: %s"}]}' \
    "$created" "$USER_GROUP" "$entrypoint" "$layer_digest" "$created" "$AT" >"$work/config.json"
read -r config_digest config_size < <(blob "$work/config.json")

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%d}]}' \
    "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$work/manifest.json"
read -r manifest_digest manifest_size < <(blob "$work/manifest.json")

# containerd's importer names the image after io.containerd.image.name;
# org.opencontainers.image.ref.name is the layout's own tag.
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%d,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest_digest" "$manifest_size" "$NAME" "$tag" >"$work/layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"

mkdir -p "$(dirname "$OUT")"
reproducible_tar "$work/layout" "$OUT.tmp" oci-layout index.json blobs
mv "$OUT.tmp" "$OUT"
echo "os/binary-image.sh: $NAME, manifest $manifest_digest, $(stat -c %s "$OUT") bytes" >&2
