#!/usr/bin/env bash
# Installs everything confboot needs on a Debian 12 machine: Debian packages,
# the Rust musl target, the Kubernetes parts. Idempotent, and quick when
# everything is already there.
#
#   scripts/setup.sh                       everything
#   scripts/setup.sh --without-kubernetes  everything but the Kubernetes parts
#                                          (scripts/test.sh builds them beside
#                                          its Rust builds)
set -euo pipefail
kubernetes=true
case "${1:-}" in
  "") ;;
  --without-kubernetes) kubernetes=false ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: scripts/setup.sh [--without-kubernetes]" >&2; exit 2 ;;
esac

# Debian packages: protoc for prost, musl-gcc for static builds of ring,
# libtss2 for the TPM provisioning tool, swtpm as the TPM in tests, curl for
# the demo, systemd for systemd-analyze (the node agent's unit is checked),
# mmdebstrap and squashfs-tools for the node's OS image (os/build.sh).
PACKAGES=(
  protobuf-compiler musl-tools pkg-config gcc libc6-dev
  libtss2-dev swtpm swtpm-tools curl procps file cryptsetup-bin e2fsprogs
  qemu-system-x86 ovmf busybox-static cpio zstd kmod netcat-openbsd util-linux
  systemd dropbear-bin openssh-client mmdebstrap squashfs-tools
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || {
    echo "setup: installing the Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  }
  export PATH="$HOME/.cargo/bin:$PATH"
fi

if command -v rustup >/dev/null 2>&1; then
  # rust-toolchain.toml pins a release: where that release is installed
  # only under another name (a "stable" that is the same version), name it
  # so, instead of having rustup fetch it again.
  pinned="$(sed -n 's/^channel = "\(.*\)"/\1/p' "$(dirname "$0")/../rust-toolchain.toml")"
  if [ -n "$pinned" ] && ! rustup toolchain list | grep -q "^$pinned-"; then
    for t in $(rustup toolchain list | awk '{print $1}'); do
      if rustc "+$t" --version 2>/dev/null | grep -q "^rustc $pinned "; then
        echo "setup: using toolchain $t as $pinned"
        ln -s "$(rustc "+$t" --print sysroot)" \
          "${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$pinned-$(rustc "+$t" -vV | sed -n 's/^host: //p')"
        break
      fi
    done
  fi
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
  rustup target list --installed | grep -qx x86_64-unknown-linux-musl \
    || rustup target add x86_64-unknown-linux-musl
fi

# kubernetes-validate (PyPI, pinned), which checks deploy/kubernetes/ offline
# against the Kubernetes API schemas it ships: in a virtual environment
# under target/tools/, so nothing is installed system-wide.
KUBERNETES_VALIDATE_VERSION=1.37.0
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${CARGO_TARGET_DIR:-$ROOT/target}/tools/kubernetes-validate"
if ! "$VENV/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KUBERNETES_VALIDATE_VERSION"; then
  echo "setup: installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $VENV"
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
  fi
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

# sev-snp-measure (PyPI, pinned): the oracle `confboot measure --variant
# sev-snp`'s launch digest is checked against (crates/measure/tests/snp_oracle.rs).
SEV_SNP_MEASURE_VERSION=0.0.13
SNP_VENV="${CARGO_TARGET_DIR:-$ROOT/target}/tools/sev-snp-measure"
if ! "$SNP_VENV/bin/pip" show sev-snp-measure 2>/dev/null | grep -qx "Version: $SEV_SNP_MEASURE_VERSION"; then
  echo "setup: installing sev-snp-measure $SEV_SNP_MEASURE_VERSION into $SNP_VENV"
  rm -rf "$SNP_VENV"
  python3 -m venv "$SNP_VENV"
  "$SNP_VENV/bin/pip" install --quiet --disable-pip-version-check "sev-snp-measure==$SEV_SNP_MEASURE_VERSION"
fi

# The Kubernetes parts (kube-apiserver, kube-controller-manager, kubeadm,
# kubelet, kubemark, kubectl, etcd), built from their Go modules at the
# pinned release into a cache keyed by the versions: skipped when cached.
if $kubernetes && ! bash "$ROOT/scripts/kubernetes.sh" --print >/dev/null 2>&1; then
  command -v go >/dev/null 2>&1 || {
    echo "setup: Go is needed to build the Kubernetes parts (install Go 1.26 or later)" >&2
    exit 1
  }
  echo "setup: building the Kubernetes parts (scripts/kubernetes.sh; tens of minutes on a cold machine)"
  bash "$ROOT/scripts/kubernetes.sh" >/dev/null
fi
