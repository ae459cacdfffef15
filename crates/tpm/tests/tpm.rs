//! The TPM layer against a real swtpm: PCR read/extend, AK create/load, quote, NV.

use confboot_tpm::structures::{parse_ecc_public, parse_ecdsa_signature, parse_quote_attest};
use confboot_tpm::swtpm::Swtpm;
use confboot_tpm::{DEFAULT_AK_HANDLE, TpmError, pcr_digest};

#[test]
fn reads_all_24_pcrs_and_extends_one() {
    let swtpm = Swtpm::start().unwrap();
    let mut tpm = swtpm.connect().unwrap();
    let before = tpm.pcr_read_all().unwrap();
    assert_eq!(
        before.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (0..24).collect::<Vec<u32>>()
    );
    assert_eq!(before[15].1, [0; 32]);
    tpm.pcr_extend(15, &[7; 32]).unwrap();
    let after = tpm.pcr_read_all().unwrap();
    // An extend hashes the old value with the digest: SHA-256(0³² ‖ 7³²).
    assert_eq!(after[15].1, pcr_digest([&[0u8; 32][..], &[7u8; 32][..]]));
    for i in (0..24).filter(|i| *i != 15) {
        assert_eq!(before[i], after[i], "PCR {i} changed");
    }
    // Reading a subset, out of order with duplicates, gives sorted unique values.
    let some = tpm.pcr_read(&[23, 15, 0, 15]).unwrap();
    assert_eq!(some, vec![after[0], after[15], after[23]]);
    assert!(matches!(tpm.pcr_read(&[24]), Err(TpmError::Unsupported(_))));
}

#[test]
fn creates_ak_and_quotes_what_pcrs_hold() {
    let swtpm = Swtpm::start().unwrap();
    let mut tpm = swtpm.connect().unwrap();
    // Nothing at the persistent handle: load fails with TPM_RC_HANDLE, load_or_create creates.
    let err = tpm.load_ak(DEFAULT_AK_HANDLE).unwrap_err();
    assert!(err.is_handle_missing(), "{err}");
    let ak = tpm.load_or_create_ak(DEFAULT_AK_HANDLE).unwrap();
    assert!(ak.transient);
    assert_eq!(tpm.read_public(ak.handle).unwrap(), ak.public_area);
    let public = parse_ecc_public(&ak.public_area).unwrap();
    assert_eq!(public.point.len(), 65);
    // CreatePrimary is deterministic in the owner hierarchy.
    let again = tpm.create_ak().unwrap();
    assert_eq!(again.public_area, ak.public_area);
    tpm.flush(again.handle).unwrap();

    let pcrs: Vec<u32> = (0..24).collect();
    let quote = tpm.quote(&ak, &[0x5a; 32], &pcrs).unwrap();
    let info = parse_quote_attest(&quote.attest).unwrap();
    assert_eq!(info.extra_data, vec![0x5a; 32]);
    assert_eq!(info.pcr_selections[0].pcr_indices, pcrs);
    let values = tpm.pcr_read_all().unwrap();
    assert_eq!(
        info.pcr_digest,
        pcr_digest(values.iter().map(|(_, v)| &v[..])).to_vec()
    );
    let sig = parse_ecdsa_signature(&quote.signature).unwrap();
    let key = ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_FIXED,
        &public.point,
    );
    key.verify(&quote.attest, &sig.r_s).unwrap();
    tpm.flush(ak.handle).unwrap();
    assert!(
        tpm.quote(&ak, &[0; 32], &pcrs).is_err(),
        "flushed key still quotes"
    );
}

#[test]
fn nv_read_of_missing_index_fails_precisely() {
    let swtpm = Swtpm::start().unwrap();
    let mut tpm = swtpm.connect().unwrap();
    let err = tpm.nv_read(confboot_tpm::AK_CERT_NV_INDEX).unwrap_err();
    assert!(err.is_handle_missing(), "{err}");
}

#[test]
fn swtpm_helper_isolates_instances_and_cleans_up() {
    let a = Swtpm::start().unwrap();
    let b = Swtpm::start().unwrap();
    assert_ne!(a.addr(), b.addr());
    assert_ne!(a.state_dir(), b.state_dir());
    assert_eq!(a.ctrl_port(), a.addr().port() + 1);
    assert_eq!(
        a.tcti(),
        format!("swtpm:host=127.0.0.1,port={}", a.addr().port())
    );
    // Separate TPMs: extending one leaves the other's PCR 15 alone.
    a.connect().unwrap().pcr_extend(15, &[1; 32]).unwrap();
    assert_eq!(b.connect().unwrap().pcr_read(&[15]).unwrap()[0].1, [0; 32]);
    let (dir, pid, addr) = (a.state_dir().to_path_buf(), a.pid(), a.addr());
    assert!(dir.exists());
    drop(a);
    assert!(!dir.exists(), "state dir removed");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process reaped"
    );
    assert!(confboot_tpm::Tpm::connect_tcp(addr).is_err(), "port closed");

    // start_in keeps a caller's directory.
    let kept = std::env::temp_dir().join(format!("confboot-swtpm-kept-{}", std::process::id()));
    std::fs::create_dir_all(&kept).unwrap();
    let c = Swtpm::start_in(&kept).unwrap();
    c.connect().unwrap().pcr_read_all().unwrap();
    drop(c);
    assert!(kept.exists());
    std::fs::remove_dir_all(&kept).unwrap();
}

const ABORT_HELPER_ENV: &str = "CONFBOOT_SWTPM_ABORT_HELPER";

/// Run in a child process by `swtpm_stops_when_the_test_process_aborts`:
/// starts a Swtpm, reports its control port, then aborts (no unwinding, no
/// Drop) when told to.
#[test]
#[ignore = "helper, run by swtpm_stops_when_the_test_process_aborts"]
fn swtpm_abort_helper() {
    assert!(
        std::env::var_os(ABORT_HELPER_ENV).is_some(),
        "run only as a helper"
    );
    let swtpm = Swtpm::start().unwrap();
    println!("ctrl-port {}", swtpm.ctrl_port());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    std::process::abort();
}

#[test]
fn swtpm_stops_when_the_test_process_aborts() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args(["swtpm_abort_helper", "--exact", "--ignored", "--nocapture"])
        .env(ABORT_HELPER_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(helper.stdout.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines.next().expect("helper reports its port").unwrap();
        if let Some(p) = line.strip_prefix("ctrl-port ") {
            break p.parse().unwrap();
        }
    };
    // An idle connection to swtpm's control channel ends only when swtpm exits.
    let mut ctrl = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    writeln!(helper.stdin.take().unwrap(), "abort").unwrap();
    assert!(!helper.wait().unwrap().success(), "the helper aborted");
    let mut buf = [0u8; 16];
    match ctrl.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("swtpm still serves its control channel: {other:?}"),
    }
}

#[test]
fn transient_objects_left_by_dead_clients_are_flushed_when_memory_is_full() {
    let swtpm = Swtpm::start().unwrap();
    // Clients that die without flushing leave their AKs loaded (no
    // resource manager on a swtpm socket) until the object memory is full.
    let mut left = 0;
    loop {
        let mut tpm = swtpm.connect().unwrap();
        match tpm.create_ak() {
            Ok(_) => left += 1,
            Err(TpmError::ResponseCode { rc, .. }) if rc == confboot_tpm::RC_OBJECT_MEMORY => {
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(left < 64, "the TPM never ran out of object memory");
    }
    let mut tpm = swtpm.connect().unwrap();
    assert_eq!(tpm.transient_handles().unwrap().len(), left);
    // The next client still gets its AK: the leftovers are flushed.
    let ak = tpm.load_or_create_ak(DEFAULT_AK_HANDLE).unwrap();
    assert_eq!(tpm.transient_handles().unwrap(), vec![ak.handle]);
}
