//! TDX quote verification latency on a real quote (version 4) with and
//! without Intel's collateral, median over many runs, with one bare ECDSA
//! P-256 verification (the quote signature) measured in the same run as
//! the baseline (these machines are noisy: compare ratios, not absolute
//! times).
//!
//! `cargo bench -p confboot-attest --bench tdx` (release), or
//! `cargo test -p confboot-attest --bench tdx` (the same code unoptimized).

use std::hint::black_box;
use std::time::{Duration, Instant};

use confboot_attest::check::ReportDataCheck;
use confboot_tdx::*;

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

/// 2023-06-22, inside every window of the quote's collateral.
const AT: i64 = 1_687_392_000;

fn main() {
    let raw = testdata("quote_v4_spr_e4.dat");
    let tcb_info = testdata("tcb_info_50806f000000.json");
    let qe_identity = testdata("qe_identity.json");
    let pck_crl = testdata("pck_platform_crl.der");
    let root_crl = testdata("root_crl.der");
    let quote = Quote::parse(&raw).unwrap();
    let policy = TdxPolicy {
        mr_td: Some(quote.report.mr_td),
        rtmrs: quote.report.rtmr.map(Some),
        ..TdxPolicy::default()
    };
    let report_data = ReportDataCheck::Exact(quote.report.report_data);
    let key = quote.attestation_key_sec1();

    let n = 200;
    let baseline = measure(n, || {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &key)
            .verify(black_box(quote.signed_bytes()), black_box(&quote.signature))
            .unwrap();
    });
    let parse = measure(n, || {
        black_box(Quote::parse(black_box(&raw)).unwrap());
    });
    let bare = TdxValidator::with_roots(policy.clone(), TdxRoots::intel()).as_of(AT);
    let without = measure(n, || {
        let q = Quote::parse(black_box(&raw)).unwrap();
        black_box(bare.verify_quote_detailed(&q, &report_data));
    });
    let collateral = || Collateral {
        tcb_info: Some(SignedTcbInfo::parse(&tcb_info).unwrap()),
        qe_identity: Some(SignedQeIdentity::parse(&qe_identity).unwrap()),
        pck_crl: Some(Crl::parse(&pck_crl).unwrap()),
        root_crl: Some(Crl::parse(&root_crl).unwrap()),
        tcb_signing: Vec::new(),
    };
    let parse_collateral = measure(n, || {
        black_box(collateral());
    });
    let full = TdxValidator::with_roots(policy, TdxRoots::intel())
        .with_collateral(collateral())
        .as_of(AT);
    let with = measure(n, || {
        let q = Quote::parse(black_box(&raw)).unwrap();
        black_box(full.verify_quote_detailed(&q, &report_data));
    });
    println!("tdx: median latency over {n} runs");
    println!(
        "  baseline  one ECDSA P-256 verification (quote signature)  {:>9.1} µs  1.00x",
        baseline.as_secs_f64() * 1e6
    );
    for (name, d) in [
        ("parse the quote                                ", parse),
        ("parse + every check, no collateral            ", without),
        (
            "parse the collateral (TCB info, QE id, 2 CRLs) ",
            parse_collateral,
        ),
        ("parse + every check, with collateral (parsed) ", with),
    ] {
        println!(
            "  {name}  {:>9.1} µs  {:.2}x",
            d.as_secs_f64() * 1e6,
            d.as_secs_f64() / baseline.as_secs_f64()
        );
    }
}
