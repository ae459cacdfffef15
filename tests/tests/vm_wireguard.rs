//! WireGuard through netlink (`confboot_vpn::WireGuardInterface`) in
//! a QEMU guest (the build machine's kernel has no WireGuard): one boot of
//! a test image whose probe `confboot-wg-probe` brings up `wg0`, applies
//! 1,024 peers, then a smaller list, takes the interface over and applies
//! another; after each step the peers the kernel holds (read back with
//! `WG_CMD_GET_DEVICE`) must be exactly those applied, compared here by a
//! digest computed from the same lists.
//!
//! The probe is a static musl build: `cargo build --release --target
//! x86_64-unknown-linux-musl -p confboot-tests --bins`.

use std::time::Duration;

use confboot_tests::qemu::{Image, Vm, VmConfig};
use confboot_tests::wireguard_probe::{LISTEN_PORT, node_key, peer_list, peers_digest};
use confboot_vpn::peer_configs;

/// Bound for the probe boot (SeaBIOS under TCG, 1,024 peers twice).
const BOOT_BOUND: Duration = Duration::from_secs(300);
/// Bound for QEMU to exit after the probe's end marker.
const EXIT_BOUND: Duration = Duration::from_secs(30);

/// The fields of the `CONFBOOT-WG-HELD step` line.
fn held<'a>(serial: &'a str, step: &str) -> Option<Vec<&'a str>> {
    let prefix = format!("CONFBOOT-WG-HELD {step} ");
    serial
        .lines()
        .find_map(|l| l.trim_end().strip_prefix(prefix.as_str()))
        .map(|rest| rest.split(' ').collect())
}

#[test]
fn the_kernel_holds_exactly_the_peers_applied() {
    let image = Image::with_probe("wireguard", "confboot-wg-probe");
    let mut config = VmConfig::new(
        &image.kernel,
        &image.initrd,
        "confboot.probe=1 confboot.tasks=wg-probe",
    );
    config.name = "wireguard".to_string();
    let vm = Vm::boot_probe(config, BOOT_BOUND, EXIT_BOUND);
    let serial = vm.serial();
    let report = vm.failure_report();
    assert!(
        serial
            .lines()
            .any(|l| l.trim_end() == "CONFBOOT-TASK wg-probe ok"),
        "{report}"
    );
    assert!(
        serial.lines().any(|l| l.starts_with("CONFBOOT-WG-UP wg0 ")),
        "{report}"
    );

    let own = node_key().public_key();
    let steps = [
        ("full", peer_list(0..1024, false), 1024),
        ("smaller", peer_list(0..5, true), 5),
        ("takeover", peer_list(0..0, false), 0),
        ("again", peer_list(0..3, true), 3),
    ];
    for (step, list, count) in steps {
        let fields = held(&serial, step).unwrap_or_else(|| panic!("no {step} step\n{report}"));
        assert_eq!(fields.len(), 6, "{step}: {fields:?}");
        let want = peers_digest(&peer_configs(&list, &own));
        assert_eq!(fields[0], count.to_string(), "{step}: peers held\n{report}");
        assert_eq!(
            fields[1], want,
            "{step}: the peers held are not those applied\n{report}"
        );
        assert_eq!(fields[2], LISTEN_PORT.to_string(), "{step}: port");
        assert_eq!(fields[3], own.to_string(), "{step}: public key");
        eprintln!(
            "[wireguard] {step}: {count} peers, apply {} ms, read {} ms",
            fields[4], fields[5]
        );
    }
    assert!(
        serial
            .lines()
            .any(|l| l.trim_end() == "CONFBOOT-WG-OTHER-KIND refused"),
        "{report}"
    );
    eprintln!("[wireguard] boot took {:.1} s", vm.elapsed().as_secs_f64());
}
