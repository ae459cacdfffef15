//! Collateral from Intel's PCS: the v4 requests a quote's platform needs,
//! and answers kept as the files a policy names and loaded exactly as
//! those are (real Intel answers from `testdata/` give the real quote
//! the verdict the same files give it; an edited one is kept but then
//! fails verification, a malformed one is not kept). With the feature `pcs`, the fetch itself runs against
//! a local HTTP double: the issuer chain in its header, URL-encoded; bounds,
//! refusals and deadlines. No test reaches the network.

use confboot_attest::check::{CheckOutcome, ReportDataCheck};
use confboot_tdx::*;

fn testdata(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Inside every window of the version-4 quote's collateral.
const AT_V4: i64 = 1_687_392_000;
/// The version-4 quote's platform.
const FMSPC_V4: [u8; 6] = [0x50, 0x80, 0x6f, 0x00, 0x00, 0x00];

fn v4() -> Quote {
    Quote::parse(&testdata("quote_v4_spr_e4.dat")).unwrap()
}

/// URL-encoded, as the PCS sends its issuer-chain headers.
fn url_encoded(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .flat_map(|b| {
            if b.is_ascii_alphanumeric() {
                vec![*b]
            } else {
                format!("%{b:02X}").into_bytes()
            }
        })
        .collect()
}

/// Requests and their answers.
type Answers = Vec<(PcsRequest, PcsAnswer)>;

/// Intel's answers for the version-4 quote, as the PCS serves them.
fn intel_answers() -> Answers {
    vec![
        (
            PcsRequest::TcbInfo { fmspc: FMSPC_V4 },
            PcsAnswer {
                body: testdata("tcb_info_50806f000000.json"),
                issuer_chain: url_encoded(&testdata("tcb_info_issuer_chain.pem")),
            },
        ),
        (
            PcsRequest::QeIdentity,
            PcsAnswer {
                body: testdata("qe_identity.json"),
                issuer_chain: Vec::new(),
            },
        ),
        (
            PcsRequest::PckCrl(PckCa::Platform),
            PcsAnswer {
                body: testdata("pck_platform_crl.der"),
                issuer_chain: Vec::new(),
            },
        ),
    ]
}

fn failures(collateral: Collateral) -> Vec<&'static str> {
    let q = v4();
    let policy = TdxPolicy {
        mr_td: Some(q.report.mr_td),
        rtmrs: q.report.rtmr.map(Some),
        ..TdxPolicy::default()
    };
    TdxValidator::with_roots(policy, TdxRoots::intel())
        .with_collateral(collateral)
        .as_of(AT_V4)
        .verify_quote_detailed(&q, &ReportDataCheck::Exact(q.report.report_data))
        .into_iter()
        .filter(|c| matches!(c.outcome, CheckOutcome::Failed(_)))
        .map(|c| c.name)
        .collect()
}

/// What the verifier makes of the same answers read as files: every check
/// passes but the TCB status (the recorded platform's TCB matches no level
/// of its TCB info, as `tests/tdx.rs` shows).
fn as_files() -> Vec<&'static str> {
    let mut c = Collateral {
        tcb_info: Some(SignedTcbInfo::parse(&testdata("tcb_info_50806f000000.json")).unwrap()),
        qe_identity: Some(SignedQeIdentity::parse(&testdata("qe_identity.json")).unwrap()),
        pck_crl: Some(Crl::parse(&testdata("pck_platform_crl.der")).unwrap()),
        ..Collateral::default()
    };
    c.add_tcb_signing_chain(&testdata("tcb_info_issuer_chain.pem"))
        .unwrap();
    let failed = failures(c);
    assert_eq!(failed, [check::TCB_STATUS]);
    failed
}

fn cache_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("confboot-pcs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn the_requests_follow_the_v4_api() {
    let base = PCS_BASE_URL;
    assert_eq!(
        PcsRequest::TcbInfo { fmspc: FMSPC_V4 }.url(base),
        "https://api.trustedservices.intel.com/tdx/certification/v4/tcb?fmspc=50806F000000"
    );
    assert_eq!(
        PcsRequest::QeIdentity.url("http://127.0.0.1:8080/"),
        "http://127.0.0.1:8080/tdx/certification/v4/qe/identity"
    );
    assert_eq!(
        PcsRequest::PckCrl(PckCa::Platform).url(base),
        "https://api.trustedservices.intel.com/sgx/certification/v4/pckcrl?ca=platform"
    );
    assert_eq!(
        PcsRequest::PckCrl(PckCa::Processor).url(base),
        "https://api.trustedservices.intel.com/sgx/certification/v4/pckcrl?ca=processor"
    );
    // The real quote's platform, read from its verified PCK chain.
    assert_eq!(
        pcs_requests(&v4(), &TdxRoots::intel()).unwrap(),
        [
            PcsRequest::TcbInfo { fmspc: FMSPC_V4 },
            PcsRequest::QeIdentity,
            PcsRequest::PckCrl(PckCa::Platform),
        ]
    );
    assert_eq!(
        PckCa::of_common_name("Intel SGX PCK Processor CA"),
        Some(PckCa::Processor)
    );
    assert_eq!(PckCa::of_common_name("Intel SGX Root CA"), None);
}

#[test]
fn a_quote_whose_chain_is_not_the_pinned_roots_names_no_platform() {
    let test_root = confboot_testkit::tdx::TestIntel::new().root_pem();
    let roots =
        TdxRoots::new(&certificates_from_pem_or_der(test_root.as_bytes()).unwrap()).unwrap();
    assert!(matches!(
        pcs_requests(&v4(), &roots),
        Err(PcsError::Platform(_))
    ));
}

#[test]
fn answers_are_kept_as_files_and_verified_as_files_are() {
    let dir = cache_dir("kept");
    let (files, collateral) = store_answers(&dir, &intel_answers()).unwrap();
    assert_eq!(
        files.tcb_info.as_deref(),
        Some(dir.join("tcb_info-50806f000000.json").as_path())
    );
    assert!(files.tcb_info_issuer_chain.is_some() && files.pck_crl.is_some());
    // The files load as a policy's collateral does, and the real quote
    // verifies with them.
    assert_eq!(failures(collateral), as_files());
    assert_eq!(failures(load_collateral(&files).unwrap()), as_files());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_fetch_decides_nothing_an_edited_answer_fails_verification() {
    // A status changed in the body: it parses, is kept, and the TCB info
    // signature refuses it when the quote is verified.
    let mut answers = intel_answers();
    let body = String::from_utf8(answers[0].1.body.clone()).unwrap();
    let edited = body.replacen("\"OutOfDate\"", "\"UpToDate\"", 1);
    assert_ne!(edited, body);
    answers[0].1.body = edited.into_bytes();
    let dir = cache_dir("edited");
    let (_, collateral) = store_answers(&dir, &answers).unwrap();
    assert!(
        failures(collateral).contains(&check::TCB_INFO),
        "an edited TCB info is refused"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_oversized_or_chainless_answers_are_not_kept() {
    let refused = |name: &str, edit: &dyn Fn(&mut Answers)| {
        let mut answers = intel_answers();
        edit(&mut answers);
        let dir = cache_dir(name);
        let err = store_answers(&dir, &answers).unwrap_err();
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "{name}: files left behind");
        std::fs::remove_dir_all(&dir).unwrap();
        err
    };
    let err = refused("not-json", &|a| a[1].1.body = b"<html>".to_vec());
    assert!(matches!(err, PcsError::Refused(_)), "{err}");
    let err = refused("no-chain", &|a| a[0].1.issuer_chain.clear());
    assert!(
        matches!(&err, PcsError::Answer { message, .. } if message.contains("TCB-Info-Issuer-Chain")),
        "{err}"
    );
    let err = refused("huge", &|a| a[2].1.body = vec![0; MAX_CRL_LEN + 1]);
    assert!(matches!(err, PcsError::Answer { .. }), "{err}");
    let err = refused("huge-chain", &|a| {
        a[0].1.issuer_chain = vec![b'A'; MAX_ISSUER_CHAIN_LEN + 1]
    });
    assert!(matches!(err, PcsError::Answer { .. }), "{err}");
    let err = refused("bad-chain", &|a| a[0].1.issuer_chain = b"%2D%2D".to_vec());
    assert!(matches!(err, PcsError::Refused(_)), "{err}");
}

#[test]
fn a_policy_asks_for_pcs_fetching_only_with_a_cache_and_the_feature() {
    let m = "7d".repeat(48);
    let pins = format!(r#""mrtd": "{m}", "rtmrs": {{"0": "{m}", "1": "{m}", "2": "{m}"}}"#);
    let err = TdxPolicy::from_json(&format!(r#"{{{pins}, "pcsFetch": true}}"#)).unwrap_err();
    assert!(err.to_string().contains("collateralCache"), "{err}");
    let err = TdxPolicy::from_json(&format!(
        r#"{{{pins}, "pcsFetch": true, "collateralCache": "/tmp/c", "pcsBaseUrl": "ftp://x"}}"#
    ))
    .unwrap_err();
    assert!(err.to_string().contains("pcsBaseUrl"), "{err}");
    let policy = TdxPolicy::from_json(&format!(
        r#"{{{pins}, "pcsFetch": true, "collateralCache": "/var/cache/tdx",
            "pcsBaseUrl": "https://pcs.example"}}"#
    ))
    .unwrap();
    assert!(policy.pcs_fetch);
    assert_eq!(policy.pcs_base_url.as_deref(), Some("https://pcs.example"));
    let built = TdxValidator::new(policy);
    if cfg!(feature = "pcs") {
        assert!(built.is_ok());
    } else {
        let err = built.unwrap_err();
        assert!(err.to_string().contains("cargo feature `pcs`"), "{err}");
    }
}

#[cfg(feature = "pcs")]
mod fetch {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// A status, extra header lines, and a body.
    type Reply = (u16, String, Vec<u8>);

    /// A local HTTP double of the PCS: answers each path from `replies`
    /// (404 otherwise), `connections` times, and records the paths asked.
    fn pcs_double(
        replies: BTreeMap<String, Reply>,
        connections: usize,
    ) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&asked);
        std::thread::spawn(move || {
            for _ in 0..connections {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                seen.lock().unwrap().push(path.clone());
                let (status, headers, body) = replies.get(&path).cloned().unwrap_or((
                    404,
                    String::new(),
                    b"not found".to_vec(),
                ));
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        (base, asked)
    }

    fn intel_replies() -> BTreeMap<String, Reply> {
        let mut replies = BTreeMap::new();
        for (request, answer) in intel_answers() {
            let headers = match request.kept_issuer_chain_header() {
                Some(name) => format!(
                    "{name}: {}\r\n",
                    String::from_utf8(answer.issuer_chain).unwrap()
                ),
                None => String::new(),
            };
            replies.insert(request.url(""), (200, headers, answer.body));
        }
        replies
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(20)
    }

    #[test]
    fn collateral_is_fetched_into_the_cache_and_verified_as_files_are() {
        let (base, asked) = pcs_double(intel_replies(), 3);
        let dir = cache_dir("fetched");
        let (files, collateral) =
            fetch_collateral(&base, &v4(), &TdxRoots::intel(), &dir, soon()).unwrap();
        assert_eq!(
            *asked.lock().unwrap(),
            [
                "/tdx/certification/v4/tcb?fmspc=50806F000000",
                "/tdx/certification/v4/qe/identity",
                "/sgx/certification/v4/pckcrl?ca=platform",
            ]
        );
        // The issuer chain from the header, URL-encoded, is kept as sent
        // and loads as the policy's `tcbInfoIssuerChain` file does.
        let chain = std::fs::read(files.tcb_info_issuer_chain.unwrap()).unwrap();
        assert!(chain.starts_with(b"%2D%2D%2D%2D%2DBEGIN"));
        assert_eq!(failures(collateral), as_files());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refusals_bounds_and_deadlines() {
        let path = PcsRequest::QeIdentity.url("");
        // A status other than 200, redirects included.
        let (base, _) = pcs_double(BTreeMap::new(), 1);
        let err = fetch(&base, &PcsRequest::QeIdentity, soon()).unwrap_err();
        assert!(matches!(err, PcsError::Request { .. }), "{err}");
        let redirect = (
            302,
            format!("Location: {PCS_BASE_URL}{path}\r\n"),
            Vec::new(),
        );
        let (base, _) = pcs_double(BTreeMap::from([(path.clone(), redirect)]), 1);
        let err = fetch(&base, &PcsRequest::QeIdentity, soon()).unwrap_err();
        assert!(matches!(err, PcsError::Request { .. }), "{err}");
        // A body over its bound.
        let huge = (200, String::new(), vec![b' '; MAX_COLLATERAL_LEN + 1]);
        let (base, _) = pcs_double(BTreeMap::from([(path.clone(), huge)]), 1);
        let err = fetch(&base, &PcsRequest::QeIdentity, soon()).unwrap_err();
        assert!(matches!(err, PcsError::Answer { .. }), "{err}");
        // A deadline already passed: nothing is sent.
        let (base, asked) = pcs_double(BTreeMap::new(), 1);
        let err = fetch(&base, &PcsRequest::QeIdentity, Instant::now()).unwrap_err();
        assert!(
            matches!(&err, PcsError::Request { message, .. } if message.contains("deadline")),
            "{err}"
        );
        assert!(asked.lock().unwrap().is_empty());
        // A server that stalls is cut off at the deadline.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let started = Instant::now();
        let err = fetch(
            &base,
            &PcsRequest::QeIdentity,
            Instant::now() + Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(matches!(err, PcsError::Request { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(listener);
    }

    #[test]
    fn a_validator_with_pcs_fetch_fills_in_its_collateral_once() {
        let (base, asked) = pcs_double(intel_replies(), 3);
        let dir = cache_dir("validator");
        let q = v4();
        let policy = TdxPolicy {
            mr_td: Some(q.report.mr_td),
            rtmrs: q.report.rtmr.map(Some),
            pcs_fetch: true,
            pcs_base_url: Some(base),
            collateral_cache: Some(dir.clone()),
            ..TdxPolicy::default()
        };
        let v = TdxValidator::with_roots(policy, TdxRoots::intel()).as_of(AT_V4);
        let failed = |v: &TdxValidator| -> Vec<&'static str> {
            v.verify_quote_detailed(&q, &ReportDataCheck::Exact(q.report.report_data))
                .into_iter()
                .filter(|c| matches!(c.outcome, CheckOutcome::Failed(_)))
                .map(|c| c.name)
                .collect()
        };
        // The verdict the same answers give as files; fetched once, then
        // reused while current.
        assert_eq!(failed(&v), as_files());
        assert_eq!(failed(&v), as_files());
        assert_eq!(asked.lock().unwrap().len(), 3);
        assert!(dir.join("tcb_info-50806f000000.json").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_validator_whose_fetch_fails_refuses_as_without_collateral() {
        let (base, _) = pcs_double(BTreeMap::new(), 1);
        let dir = cache_dir("validator-404");
        let q = v4();
        let policy = TdxPolicy {
            mr_td: Some(q.report.mr_td),
            rtmrs: q.report.rtmr.map(Some),
            pcs_fetch: true,
            pcs_base_url: Some(base),
            collateral_cache: Some(dir.clone()),
            ..TdxPolicy::default()
        };
        let v = TdxValidator::with_roots(policy, TdxRoots::intel()).as_of(AT_V4);
        assert!(
            v.verify(&q, &ReportDataCheck::Exact(q.report.report_data))
                .is_err()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
