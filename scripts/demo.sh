#!/usr/bin/env bash
# The main job: builds the static release binaries and boots a cluster on
# this machine, first as processes, then as QEMU VMs. Every node has its own
# swtpm and LUKS2 state disk; `confboot init` makes node 1 the first control
# plane; joinsvc admits the others after verifying them; a node with a
# tampered image is refused; a rebooted node rejoins. As VMs, every node
# then boots into its operating system (a dm-verity root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

target=x86_64-unknown-linux-musl
cargo build --locked --release --target "$target" -p bootstrapper -p joinsvc -p nodeagent -p confboot-cli
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
