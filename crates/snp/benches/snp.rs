//! SEV-SNP verification latency on a real AMD-signed report (Milan, VCEK),
//! median over many runs, with the bare ECDSA signature check of the same
//! report measured in the same run as the baseline (these machines are
//! noisy: compare ratios, not absolute times).
//!
//! `cargo bench -p confboot-attest --bench snp`

use std::hint::black_box;
use std::time::{Duration, Instant};

use confboot_attest::check::*;
use confboot_attest::{MeasurementPolicy, Validator};
use confboot_snp::*;

fn testdata(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn measure(n: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..n.div_ceil(10) {
        f();
    }
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let report = testdata("test-report.bin");
    let vcek = testdata("test-vcek.der");
    let parsed = SnpReport::from_bytes(&report).unwrap();
    let extra: [u8; 32] = parsed.report_data()[..32].try_into().unwrap();
    let mut measurement = MeasurementPolicy::default();
    measurement.set(0, parsed.measurement().to_vec(), false);
    let policy = SnpPolicy {
        measurement,
        ..SnpPolicy::default()
    };
    let evidence = SnpEvidence {
        report: parsed.clone(),
        certificates: vec![CertEntry {
            kind: CertKind::Vcek,
            der: vcek.clone(),
        }],
    }
    .encode()
    .unwrap();
    let key = VekInfo::from_der(&vcek).unwrap().public_key;

    let baseline = measure(2000, || {
        verify_signature(black_box(&parsed), black_box(&key)).unwrap();
    });
    let warm_validator = SnpValidator::with_roots(policy.clone(), TrustRoots::builtin());
    let warm = measure(2000, || {
        warm_validator
            .validate(black_box(&evidence), black_box(&extra))
            .unwrap();
    });
    // A fresh set of roots each time: the VCEK → ASK → ARK RSA checks run too.
    let roots = TrustRoots::builtin();
    let cold = measure(200, || {
        let fresh = TrustRoots::new(roots.roots().to_vec());
        SnpValidator::with_roots(policy.clone(), fresh)
            .validate(black_box(&evidence), black_box(&extra))
            .unwrap();
    });
    let detailed = measure(2000, || {
        let ev = SnpEvidence::decode(&evidence).unwrap();
        black_box(warm_validator.verify_report_detailed(&ev, &ReportDataCheck::ExtraData(extra)));
    });
    println!("snp: median latency (runs: baseline/warm/detailed 2000, cold 200)");
    println!(
        "  baseline  ECDSA P-384 report signature only  {:>9.1} µs  1.00x",
        baseline.as_secs_f64() * 1e6
    );
    for (name, d) in [
        ("validate, VCEK chain remembered       ", warm),
        ("verify_report_detailed (all 16 checks)", detailed),
        ("validate, cold (RSA chain checked)    ", cold),
    ] {
        println!(
            "  {name}  {:>9.1} µs  {:.2}x",
            d.as_secs_f64() * 1e6,
            d.as_secs_f64() / baseline.as_secs_f64()
        );
    }
}
