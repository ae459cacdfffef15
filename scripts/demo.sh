#!/usr/bin/env bash
# The main job: builds the static release binaries and boots a cluster on
# this machine, first as processes, then as QEMU VMs. Every node has its own
# swtpm and LUKS2 state disk; `confboot init` makes node 1 the first control
# plane; joinsvc admits the others after verifying them; a node with a
# tampered image is refused; a rebooted node rejoins. As VMs, every node
# then boots into its operating system (a dm-verity root). Last, a VM
# boots the production OS image and joins a real Kubernetes control plane
# with the real kubeadm: the real API server lists the Ready node.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

target=x86_64-unknown-linux-musl
cargo build --locked --release --target "$target" -p bootstrapper -p joinsvc -p nodeagent -p confboot-cli -p confboot-pause
bin="target/$target/release"
for b in joinsvc bootstrapper nodeagent confboot; do
  printf '%-13s %8d bytes, %s\n' "$b" "$(stat -c %s "$bin/$b")" "$(file -b "$bin/$b" | cut -d, -f1-2)"
done
echo
# The orchestrator runs in the dev profile: it unwinds on a panic, so every
# process it started is ended.
cargo run --locked --quiet -p confboot-tests --bin demo -- "$bin"

# Then the same boot with real VMs: QEMU (software emulation) with OVMF
# measured boot and one swtpm each boots the production initramfs and the
# node's OS image (os/build.sh: Debian's systemd and OpenSSH on a squashfs
# root under dm-verity); the bootstrapper in each guest attests to joinsvc
# on the host, opens a real LUKS2 state disk with dm-crypt and hands over
# to the OS, where systemd runs the cluster step and the node agent. Each
# node's timeline is printed (seconds since its VM started). Takes a few
# minutes.
echo
echo "== the cluster as QEMU VMs, booting into their OS"
cargo test --locked --quiet -p confboot-tests --test vm_os -- --nocapture

# Last, Kubernetes for real: the real control plane (etcd, kube-apiserver,
# kube-controller-manager at the pinned release, built by
# scripts/kubernetes.sh) runs on this machine as processes, and joinsvc
# beside it as its ServiceAccount. A VM boots the production initramfs and
# the production OS image (kubelet, kubeadm, containerd, runc, the CNI
# plugins, the pause image), attests, gets its ticket, opens its disk and
# hands over to its OS, whose cluster step runs the real `kubeadm join`
# with the ticket's token, CA hash and endpoint. The real API server then
# lists the node Ready (kubectl get nodes) and a pod runs on it.
echo
echo "== a VM node joins a real Kubernetes control plane"
cargo test --locked --quiet -p confboot-tests --test vm_kubernetes -- --nocapture
