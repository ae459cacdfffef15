//! The opt-in KDS fetch (cargo feature `kds`): a VCEK that neither the
//! evidence nor the cache holds comes from the KDS, here a one-shot HTTP
//! server on loopback that serves the real VCEK at the KDS path.
//! Run with `cargo test -p confboot-attest --features kds --test snp_kds`.
#![cfg(feature = "kds")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::thread;

use confboot_attest::check::*;
use confboot_attest::{AttestationError, Detail, MeasurementPolicy};
use confboot_snp::*;

fn testdata(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Serves `count` requests: `(status, body)` for each; returns the base
/// URL and a handle yielding the request paths.
fn serve(replies: Vec<(u16, Vec<u8>)>) -> (String, thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let handle = thread::spawn(move || {
        let mut paths = Vec::new();
        for (status, body) in replies {
            let (mut stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            paths.push(line.split_whitespace().nth(1).unwrap_or("").to_string());
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header == "\r\n" || header.is_empty() {
                    break;
                }
            }
            write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .unwrap();
            stream.write_all(&body).unwrap();
        }
        paths
    });
    (base, handle)
}

fn policy_for(report: &SnpReport, base: &str) -> SnpPolicy {
    let mut measurement = MeasurementPolicy::default();
    measurement.set(0, report.measurement().to_vec(), false);
    SnpPolicy {
        measurement,
        kds_fetch: true,
        kds_base_url: Some(base.to_string()),
        ..SnpPolicy::default()
    }
}

#[test]
fn a_missing_vcek_is_fetched_from_the_kds_and_verified() {
    let report = SnpReport::from_bytes(&testdata("test-report.bin")).unwrap();
    let evidence = SnpEvidence {
        report: report.clone(),
        certificates: vec![],
    };
    let want = ReportDataCheck::Exact(report.report_data().try_into().unwrap());
    let (base, server) = serve(vec![(200, testdata("test-vcek.der"))]);
    let cache = std::env::temp_dir().join(format!("confboot-snp-kds-{}", std::process::id()));
    let mut policy = policy_for(&report, &base);
    policy.vcek_cache_dir = Some(cache.clone());
    let v = SnpValidator::with_roots(policy, TrustRoots::builtin());
    let checks = v.verify_report_detailed(&evidence, &want);
    let paths = server.join().unwrap();
    // A version-2 report names no product: Milan, the first pinned root, is asked first.
    assert_eq!(
        paths,
        vec![format!(
            "/vcek/v1/Milan/{}?blSPL=03&teeSPL=00&snpSPL=08&ucodeSPL=115",
            confboot_util::hex::encode(report.chip_id())
        )]
    );
    assert!(first_failure(&checks).is_none(), "{checks:?}");
    assert!(matches!(&checks[0].outcome, CheckOutcome::Passed(m) if m.contains("AMD KDS")));
    // It was cached: the next verification needs no server.
    assert!(vcek_cache_path(&cache, &report).is_file());
    let result = v.verify(&evidence, &want);
    std::fs::remove_dir_all(&cache).unwrap();
    result.unwrap();
}

#[test]
fn kds_errors_and_wrong_certificates_are_refused() {
    let report = SnpReport::from_bytes(&testdata("test-report.bin")).unwrap();
    let evidence = SnpEvidence {
        report: report.clone(),
        certificates: vec![],
    };
    let want = ReportDataCheck::Exact(report.report_data().try_into().unwrap());
    // 404 for every product tried; then a VCEK of another chip.
    let (base, server) = serve(vec![(404, vec![]), (404, vec![]), (404, vec![])]);
    let v = SnpValidator::with_roots(policy_for(&report, &base), TrustRoots::builtin());
    let err = v.verify(&evidence, &want).unwrap_err();
    assert_eq!(server.join().unwrap().len(), 3);
    assert!(
        matches!(&err, AttestationError::Trust(d) if d.is(&SnpRefusal::NoVek)
            && d.text().starts_with("the evidence carries no VCEK or VLEK, none is cached, and the KDS gave none:")
            && d.text().contains("404")),
        "{err}"
    );
    let (base, server) = serve(vec![(200, testdata("vcek_milan.der"))]);
    let v = SnpValidator::with_roots(policy_for(&report, &base), TrustRoots::builtin());
    let err = v.verify(&evidence, &want).unwrap_err();
    server.join().unwrap();
    assert_eq!(
        err,
        AttestationError::Signature(Detail::with(
            &SnpRefusal::ReportSignature,
            "report signature does not verify with the endorsement key"
        ))
    );
}
