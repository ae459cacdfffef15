//! vTPM attestation latency on a real swtpm: quote and verify.
//!
//! `cargo bench -p nodeagent --bench vtpm [-- RUNS]` (default 200 runs each).
//! Also the verify service's round trip (the node agent's aTLS server and
//! the admin's client, in process: a handshake and a quote) and `confboot
//! verify`'s check.
//! Prints median, p90 and min per operation, and each median as a ratio to
//! a baseline measured in the same run (these machines are noisy): TPM
//! operations against one TPM2_PCR_Read round trip, verification against
//! one bare ECDSA P-256 signature check (ring).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use confboot_attest::{Issuer, MeasurementPolicy, Validator};
use confboot_net::listener::PoolConfig;
use confboot_proto::Message as _;
use confboot_tpm::swtpm::Swtpm;
use confboot_verifier::verify::check_node;
use confboot_verifier::verify::service::{fetch_document, serve};
use confboot_vtpm::{AkTrust, VtpmIssuer, VtpmValidator, issue_ak_certificate};

struct Stats {
    median: Duration,
    p90: Duration,
    min: Duration,
}

fn measure(runs: usize, mut f: impl FnMut()) -> Stats {
    f(); // warm-up
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    samples.sort_unstable();
    Stats {
        median: samples[samples.len() / 2],
        p90: samples[(samples.len() * 9 / 10).min(samples.len() - 1)],
        min: samples[0],
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(200);
    let swtpm = Swtpm::start().expect("swtpm starts (Debian package swtpm)");
    let issuer = Arc::new(VtpmIssuer::new(swtpm.connect().unwrap()).unwrap());
    let extra = [0x5a; 32];
    let pcrs: Vec<u32> = (0..24).collect();

    // TPM operations over one persistent socket.
    let pcr_read_one = measure(runs, || {
        issuer.with_tpm(|t| t.pcr_read(&[0]).unwrap());
    });
    let ak = issuer.with_tpm(|t| {
        t.load_or_create_ak(confboot_tpm::DEFAULT_AK_HANDLE)
            .unwrap()
    });
    let quote = measure(runs, || {
        issuer.with_tpm(|t| t.quote(&ak, &extra, &pcrs).unwrap());
    });
    issuer.with_tpm(|t| t.flush(ak.handle).unwrap());
    let read_all = measure(runs, || {
        issuer.with_tpm(|t| t.pcr_read_all().unwrap());
    });
    let issue = measure(runs, || {
        issuer.issue(&extra).unwrap();
    });

    // Verification (no TPM).
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "bench CA");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_der = ca_params.self_signed(&ca_key).unwrap().der().to_vec();
    let ca = rcgen::Issuer::new(ca_params, ca_key);
    let cert = issue_ak_certificate(&issuer.ak_public_key(), "bench AK", &ca).unwrap();
    let evidence = issuer.issue(&extra).unwrap();
    let mut with_cert = confboot_proto::vtpm::QuoteEvidence::decode(&evidence[..]).unwrap();
    with_cert.ak_certificate = cert;
    let evidence_with_cert = with_cert.encode_to_vec();
    let policy = MeasurementPolicy::new(BTreeMap::new());
    let pinned = VtpmValidator::new(
        AkTrust::Pinned(vec![issuer.ak_public_key()]),
        policy.clone(),
    );
    let rooted = VtpmValidator::new(AkTrust::CertificateRoots(vec![ca_der]), policy);
    pinned.validate(&evidence, &extra).unwrap();
    rooted.validate(&evidence_with_cert, &extra).unwrap();

    let point = issuer.ak_public_key();
    let attest = with_cert.attest.clone();
    let signature = confboot_tpm::structures::parse_ecdsa_signature(&with_cert.signature).unwrap();
    let ecdsa = measure(runs, || {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point)
            .verify(&attest, &signature.r_s)
            .unwrap();
    });
    let verify_pinned = measure(runs, || {
        pinned.validate(&evidence, &extra).unwrap();
    });
    let verify_cert = measure(runs, || {
        rooted.validate(&evidence_with_cert, &extra).unwrap();
    });

    // The verify service: the agent's server in process, the admin's
    // client over loopback, then the admin's check of the answer.
    let service = {
        let issuer: Arc<dyn Issuer> = issuer.clone();
        let pool = PoolConfig {
            gate: Some(confboot_atls::client_hello_gate(16, Duration::from_secs(5))),
            ..PoolConfig::default()
        };
        serve(TcpListener::bind("127.0.0.1:0").unwrap(), pool, issuer).unwrap()
    };
    let addr = service.local_addr().to_string();
    let fetch = measure(runs, || {
        fetch_document(&addr, Duration::from_secs(10)).unwrap();
    });
    let fetched = fetch_document(&addr, Duration::from_secs(10)).unwrap();
    let (doc, extra) = (fetched.document, fetched.extra_data);
    let any_pcrs = VtpmValidator::new(
        AkTrust::Pinned(vec![issuer.ak_public_key()]),
        MeasurementPolicy::new(BTreeMap::new()),
    )
    .require_unmarked(false);
    let mut node_policy = MeasurementPolicy::new(BTreeMap::new());
    for (pcr, value) in issuer.with_tpm(|t| t.pcr_read_all()).unwrap() {
        node_policy.set(pcr, value.to_vec(), pcr > 9);
    }
    let check = measure(runs, || {
        check_node(
            &doc,
            &extra,
            &any_pcrs,
            &node_policy,
            None,
            b"bench cluster",
        )
        .unwrap();
    });
    service.stop();

    let tpm_base = pcr_read_one.median;
    let cpu_base = ecdsa.median;
    let rows = [
        ("baseline: TPM2_PCR_Read, 1 PCR", pcr_read_one, tpm_base),
        ("TPM2_Quote, 24 PCRs", quote, tpm_base),
        ("PCR read, all 24 (3 calls)", read_all, tpm_base),
        ("VtpmIssuer::issue (quote+read)", issue, tpm_base),
        ("baseline: ECDSA P-256 verify", ecdsa, cpu_base),
        ("validate, pinned AK", verify_pinned, cpu_base),
        ("validate, AK certificate", verify_cert, cpu_base),
        ("verify service: aTLS, quote", fetch, tpm_base),
        ("confboot verify's check, 24 PCRs", check, cpu_base),
    ];
    println!(
        "vTPM on swtpm at {} ({runs} runs each; evidence {} B, with AK certificate {} B)",
        swtpm.addr(),
        evidence.len(),
        evidence_with_cert.len()
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>11}",
        "operation", "median ms", "p90 ms", "min ms", "x baseline"
    );
    for (name, s, base) in &rows {
        println!(
            "{:<34} {:>10} {:>10} {:>10} {:>11.2}",
            name,
            ms(s.median),
            ms(s.p90),
            ms(s.min),
            s.median.as_secs_f64() / base.as_secs_f64()
        );
    }
}
