//! Seed inputs for each target: valid inputs (so the fuzzer starts where
//! the checks are deep: signed evidence, whole calls) and a few near
//! misses. The corpora in `fuzz/corpus/` started from these; the ignored
//! test `write_seed_corpora` writes the ones a corpus lacks.

use confboot_atls::AttestationMessage;
use confboot_attest::Variant;
use confboot_kms::MasterSecret;
use confboot_kms::init_secret::{MIN_ITERATIONS, hash};
use confboot_proto::Message;
use confboot_proto::health::HealthCheckRequest;
use confboot_proto::init::{
    InitFailureResponse, InitRequest, InitResponse, InitSuccessResponse, LogResponseType,
    init_response,
};
use confboot_proto::join::{
    ConfirmGenerationRequest, ControlPlaneCertOrKey, IssueJoinTicketRequest,
    IssueJoinTicketResponse, IssueRejoinTicketRequest, IssueRejoinTicketResponse, TicketSecrets,
};
use confboot_proto::recover::RecoverMessage;
use confboot_proto::rpc::{CallHeader, Status};
use confboot_snp::{CertEntry, CertKind, SnpEvidence, certificates_from_pem_or_der};
use confboot_wire::frame::{FrameKind, write_frame};

use x509_parser::prelude::{FromDer, X509Certificate};

use crate::fixtures::{self, EXTRA, MILAN_ASK_ARK_ASVK, PcrSet};
use crate::{TICKET_SALT, TICKET_SECRET};

/// A seed: its file name and its bytes.
pub type Seed = (String, Vec<u8>);

fn frame(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_frame(&mut v, kind, payload).expect("writing to a Vec");
    v
}

fn message(m: &impl Message) -> Vec<u8> {
    frame(FrameKind::Message, &m.encode_to_vec())
}

fn trailer(code: i32, text: &str) -> Vec<u8> {
    frame(
        FrameKind::Trailer,
        &Status {
            code,
            message: text.into(),
        }
        .encode_to_vec(),
    )
}

/// A whole call: its header and its request.
fn call(method: &str, request: &impl Message) -> Vec<u8> {
    let mut v = message(&CallHeader {
        method: method.into(),
        timeout_ms: 10_000,
    });
    v.extend(message(request));
    v
}

fn seed(name: &str, bytes: impl Into<Vec<u8>>) -> Seed {
    (name.to_string(), bytes.into())
}

/// A valid `kms://` URI.
fn kms_uri() -> String {
    MasterSecret::new(vec![7; 32], vec![8; 32])
        .expect("lengths")
        .to_kms_uri()
        .to_string()
}

fn init_request() -> InitRequest {
    let mut r = InitRequest::default();
    r.kms_uri = kms_uri();
    r.storage_uri = "storage://no-store".into();
    r.measurement_salt = vec![9; 32];
    r.init_secret = b"the init secret".to_vec();
    r.kubernetes_version = "v1.30.4".into();
    r.cluster_name = "c".into();
    r
}

fn join_response(secret: &[u8], salt: &[u8], key_len: usize) -> IssueJoinTicketResponse {
    let mut t = IssueJoinTicketResponse::default();
    t.state_disk_key = vec![1; key_len];
    t.measurement_secret = secret.to_vec();
    t.measurement_salt = salt.to_vec();
    t.api_server_endpoint = "10.0.0.1:6443".into();
    t.token = "abcdef.0123456789abcdef".into();
    t
}

fn rpc_frame() -> Vec<Seed> {
    let mut two = frame(FrameKind::Message, b"hello");
    two.extend(trailer(0, ""));
    vec![
        seed("two-frames", [&[0u8][..], &two].concat()),
        seed("two-frames-in-pieces", [&[3u8][..], &two].concat()),
        seed("announces-4mib", [0u8, 0, 0, 0x40, 0, 0, 1, 2]),
        seed("bad-flags", [0u8, 0x42, 0, 0, 0, 1, 7]),
    ]
}

fn rpc_server() -> Vec<Seed> {
    let uuid = "0a1b2c3d-0000-4000-8000-000000000001";
    let mut join = IssueJoinTicketRequest {
        disk_uuid: uuid.into(),
        ..Default::default()
    };
    let mut calls = vec![
        (
            "health",
            call(HEALTH_CHECK_PATH, &HealthCheckRequest::default()),
        ),
        ("join", call(confboot_proto::JOIN.path(), &join)),
        (
            "rejoin",
            call(
                confboot_proto::REJOIN.path(),
                &IssueRejoinTicketRequest {
                    disk_uuid: uuid.into(),
                },
            ),
        ),
        (
            "confirm-generation",
            call(
                confboot_proto::CONFIRM_GENERATION.path(),
                &ConfirmGenerationRequest {
                    disk_uuid: uuid.into(),
                    found_generation: 41,
                    written_generation: 42,
                    proof: vec![7; 32],
                },
            ),
        ),
        (
            "confirm-generation-at-the-end",
            call(
                confboot_proto::CONFIRM_GENERATION.path(),
                &ConfirmGenerationRequest {
                    disk_uuid: uuid.into(),
                    found_generation: u64::MAX,
                    written_generation: 0,
                    proof: Vec::new(),
                },
            ),
        ),
        ("init", call(confboot_proto::INIT.path(), &init_request())),
        ("recover", {
            let mut r = RecoverMessage::default();
            r.kms_uri = kms_uri();
            r.storage_uri = "storage://no-store".into();
            call(confboot_proto::RECOVER.path(), &r)
        }),
        (
            "unknown-method",
            call("/nobody.API/Nothing", &HealthCheckRequest::default()),
        ),
        (
            "trailer-for-a-header",
            [trailer(0, ""), message(&HealthCheckRequest::default())].concat(),
        ),
        (
            "oversized-request",
            [
                message(&CallHeader {
                    method: HEALTH_CHECK_PATH.into(),
                    timeout_ms: 0,
                }),
                vec![0, 0xff, 0xff, 0xff, 0xff],
            ]
            .concat(),
        ),
    ];
    join.disk_uuid = "not a uuid".into();
    calls.push(("join-bad-uuid", call(confboot_proto::JOIN.path(), &join)));
    let mut three = Vec::new();
    for (_, c) in calls.iter().take(3) {
        three.extend_from_slice(c);
    }
    calls.push(("three-calls", three));
    let mut seeds: Vec<Seed> = calls
        .iter()
        .map(|(name, c)| seed(name, [&[0u8][..], c].concat()))
        .collect();
    seeds.push(seed("init-in-pieces", [&[5u8][..], &calls[3].1].concat()));
    seeds
}

const HEALTH_CHECK_PATH: &str = confboot_proto::HEALTH_CHECK.path();

fn rpc_client() -> Vec<Seed> {
    let log = message(&InitResponse {
        kind: Some(init_response::Kind::Log(LogResponseType {
            log: b"nodelock taken".to_vec(),
        })),
    });
    let success = message(&InitResponse {
        kind: Some(init_response::Kind::InitSuccess(InitSuccessResponse {
            kubeconfig: b"apiVersion: v1".to_vec(),
            owner_id: vec![1; 32],
            cluster_id: vec![2; 32],
        })),
    });
    let failure = message(&InitResponse {
        kind: Some(init_response::Kind::InitFailure(InitFailureResponse {
            error: "wrong init secret".into(),
        })),
    });
    vec![
        seed(
            "log-success-ok",
            [vec![0], log.clone(), success, trailer(0, "")].concat(),
        ),
        seed(
            "log-failure-denied",
            [vec![0], log, failure, trailer(7, "wrong init secret")].concat(),
        ),
        seed("ok-in-pieces", [vec![2], trailer(0, "")].concat()),
    ]
}

/// Sealed-ticket seeds: tickets as they arrive, sealed to the target's
/// key (whole, cut short, beside a secret in the clear) and plaintexts of
/// sealed secrets (a join's, a rejoin's, a rejoin's with a token).
fn sealed_ticket() -> Vec<Seed> {
    use confboot_cluster::ticket::{JoinTicket, RejoinTicket};
    use confboot_kms::SecretBytes;
    let node = crate::sealed_ticket_key().public_key();
    let secrets = |token: &str, files: usize| TicketSecrets {
        state_disk_key: vec![1; 32],
        measurement_secret: TICKET_SECRET.to_vec(),
        token: token.into(),
        control_plane_files: (0..files)
            .map(|i| ControlPlaneCertOrKey {
                name: format!("file-{i}"),
                data: vec![i as u8; 64],
            })
            .collect(),
        control_plane_key: vec![4; 32],
    };
    let with = |scenario: u8, bytes: Vec<u8>| [vec![scenario], bytes].concat();
    let join = JoinTicket {
        state_disk_key: SecretBytes::new(vec![1; 32]),
        measurement_secret: SecretBytes::new(TICKET_SECRET.to_vec()),
        measurement_salt: TICKET_SALT.to_vec(),
        api_server_endpoint: "10.0.0.1:6443".into(),
        token: "abcdef.0123456789abcdef".to_string().into(),
        control_plane_key: vec![4; 32],
        ..Default::default()
    }
    .seal(&node)
    .expect("sealed");
    let rejoin = RejoinTicket {
        state_disk_key: SecretBytes::new(vec![1; 32]),
        measurement_secret: SecretBytes::new(TICKET_SECRET.to_vec()),
        generation: 3,
        measurement_salt: TICKET_SALT.to_vec(),
        control_plane_key: vec![4; 32],
    }
    .seal(&node)
    .expect("sealed");
    let mut cut = join.clone();
    cut.sealed_secrets.truncate(40);
    let mut beside = join.clone();
    beside.state_disk_key = vec![9; 32];
    vec![
        seed("join-sealed", with(0, join.encode_to_vec())),
        seed("rejoin-sealed", with(1, rejoin.encode_to_vec())),
        seed("join-cut-short", with(0, cut.encode_to_vec())),
        seed("join-key-in-the-clear", with(0, beside.encode_to_vec())),
        seed(
            "join-secrets",
            with(2, secrets("abcdef.0123456789abcdef", 2).encode_to_vec()),
        ),
        seed("rejoin-secrets", with(3, secrets("", 0).encode_to_vec())),
        seed(
            "rejoin-secrets-with-token",
            with(3, secrets("a token", 0).encode_to_vec()),
        ),
        seed("secrets-not-protobuf", with(2, vec![0xff; 12])),
    ]
}

fn join_ticket() -> Vec<Seed> {
    let member = 0b100u8; // bits 1-2 = 2: the service is marked for the cluster
    let good = join_response(&TICKET_SECRET, &TICKET_SALT, 32);
    let rejoin = IssueRejoinTicketResponse {
        state_disk_key: vec![1; 32],
        measurement_secret: TICKET_SECRET.to_vec(),
        generation: 0,
        measurement_salt: TICKET_SALT.to_vec(),
        sealed_secrets: Vec::new(),
    };
    let answer = |m: Vec<u8>| [m, trailer(0, "")].concat();
    vec![
        seed(
            "join-from-member",
            [vec![member, 0], answer(message(&good))].concat(),
        ),
        seed(
            "rejoin-from-member",
            [vec![member | 1, 0], answer(message(&rejoin))].concat(),
        ),
        seed(
            "join-other-cluster",
            [
                vec![member, 0],
                answer(message(&join_response(&[1; 32], &TICKET_SALT, 32))),
            ]
            .concat(),
        ),
        seed(
            "join-unattested-in-pieces",
            [vec![0, 4], answer(message(&good))].concat(),
        ),
        seed(
            "join-short-key",
            [
                vec![member, 0],
                answer(message(&join_response(&TICKET_SECRET, &TICKET_SALT, 31))),
            ]
            .concat(),
        ),
        seed(
            "join-refused",
            [vec![member, 0], trailer(7, "not admitted")].concat(),
        ),
    ]
}

fn snp_evidence_of(f: &fixtures::SnpFixture) -> Vec<u8> {
    f.evidence().encode().expect("fixture evidence encodes")
}

fn atls_attestation() -> Vec<Seed> {
    let v = fixtures::vtpm();
    let message = |evidence: Option<(Variant, Vec<u8>)>, sealing_key: Option<[u8; 32]>| {
        AttestationMessage {
            evidence,
            sealing_key,
            reference_values: None,
        }
        .encode()
    };
    let vtpm = |extra: &[u8; 32], set: PcrSet, cert: bool| {
        Some((Variant::QemuVtpm, v.evidence(extra, set, cert)))
    };
    vec![
        seed("none", message(None, None)),
        seed(
            "vtpm-all-pcrs",
            message(vtpm(&fixtures::SESSION_EXTRA, PcrSet::All, false), None),
        ),
        seed(
            "vtpm-two-pcrs-certified",
            message(
                vtpm(&fixtures::SESSION_EXTRA, PcrSet::PolicyAndMark, true),
                None,
            ),
        ),
        seed(
            "vtpm-sealing-key",
            message(
                vtpm(&fixtures::SEALED_SESSION_EXTRA, PcrSet::All, false),
                Some([0x42; 32]),
            ),
        ),
        seed(
            "vtpm-sealing-key-not-bound",
            message(
                vtpm(&fixtures::SESSION_EXTRA, PcrSet::All, false),
                Some([0x42; 32]),
            ),
        ),
        seed(
            "vtpm-other-extra-data",
            message(vtpm(&EXTRA, PcrSet::All, false), None),
        ),
        seed(
            "snp-evidence",
            message(
                Some((Variant::SevSnp, snp_evidence_of(&fixtures::snp()[1]))),
                None,
            ),
        ),
        // A presented reference-value set (bytes a validator that pins no
        // release key ignores).
        seed(
            "vtpm-reference-values",
            AttestationMessage {
                evidence: vtpm(&fixtures::SESSION_EXTRA, PcrSet::All, false),
                sealing_key: None,
                reference_values: Some(vec![0xd2; 64]),
            }
            .encode(),
        ),
    ]
}

fn vtpm_evidence() -> Vec<Seed> {
    let v = fixtures::vtpm();
    vec![
        seed("all-pcrs", v.evidence(&EXTRA, PcrSet::All, false)),
        seed("all-pcrs-ak-cert", v.evidence(&EXTRA, PcrSet::All, true)),
        seed(
            "two-pcrs-ak-cert",
            v.evidence(&EXTRA, PcrSet::PolicyAndMark, true),
        ),
        seed("marked", v.evidence(&EXTRA, PcrSet::Marked, false)),
        seed("event-log", v.evidence(&EXTRA, PcrSet::Logged, false)),
        seed(
            "other-extra-data",
            v.evidence(&fixtures::SESSION_EXTRA, PcrSet::All, false),
        ),
    ]
}

fn snp_cert_table() -> Vec<Seed> {
    use confboot_snp::cert_table;
    let f = &fixtures::snp()[0];
    let mut certs: Vec<CertEntry> = f.evidence().certificates;
    let bundle = certificates_from_pem_or_der(MILAN_ASK_ARK_ASVK).expect("bundle");
    for (kind, der) in [CertKind::Ask, CertKind::Ark].into_iter().zip(bundle) {
        certs.push(CertEntry { kind, der });
    }
    let table = cert_table::encode(&certs);
    // An entry of a GUID confboot does not use, and a length past the end.
    let mut unknown_guid = table.clone();
    unknown_guid[..16].copy_from_slice(&[0x11; 16]);
    let mut past_the_end = table.clone();
    past_the_end[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    vec![
        seed("vcek-ask-ark", table),
        seed("empty", Vec::new()),
        seed("terminator-only", vec![0; cert_table::ENTRY_LEN]),
        seed("unknown-guid", unknown_guid),
        seed("length-past-the-end", past_the_end),
    ]
}

fn snp_evidence() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = fixtures::snp()
        .iter()
        .enumerate()
        .map(|(i, f)| seed(&format!("report-{i}"), snp_evidence_of(f)))
        .collect();
    // The VLEK report with the ASK, ARK and ASVK in its table.
    let f = &fixtures::snp()[2];
    let mut e: SnpEvidence = f.evidence();
    for der in certificates_from_pem_or_der(MILAN_ASK_ARK_ASVK).expect("bundle") {
        let kind = match e.certificates.len() {
            1 => CertKind::Ask,
            2 => CertKind::Ark,
            _ => CertKind::Asvk,
        };
        e.certificates.push(CertEntry { kind, der });
    }
    seeds.push(seed(
        "report-2-with-table",
        e.encode().expect("evidence encodes"),
    ));
    seeds
}

fn snp_report() -> Vec<Seed> {
    fixtures::snp()
        .iter()
        .enumerate()
        .map(|(i, f)| seed(&format!("report-{i}"), f.report.to_vec()))
        .collect()
}

fn tdx_quote() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = fixtures::TDX_QUOTES
        .iter()
        .enumerate()
        .map(|(i, f)| seed(&format!("quote-{i}"), f.quote))
        .collect();
    // Near misses: the version-4 quote without its trailing bytes, with a
    // flipped report byte, and cut inside the PCK chain.
    let v4 = fixtures::TDX_QUOTES[0].quote;
    seeds.push(seed("quote-0-exact", &v4[..4935]));
    let mut flipped = v4.to_vec();
    flipped[600] ^= 1;
    seeds.push(seed("quote-0-flipped", flipped));
    seeds.push(seed("quote-0-cut", &v4[..3000]));
    seeds
}

/// A CCEL log of a direct-kernel boot's shape (firmware, kernel, initrd,
/// command line), with and without OVMF's padding; the table; near misses.
fn tdx_ccel_log() -> Vec<u8> {
    use confboot_tdx::synthetic_ccel_log;
    let tag = |text: &str| {
        let mut d = 0x8a35_ff10u32.to_le_bytes().to_vec();
        d.extend_from_slice(&(text.len() as u32).to_le_bytes());
        d.extend_from_slice(text.as_bytes());
        d
    };
    let (kernel, initrd) = (tag("Linux kernel"), tag("Linux initrd"));
    synthetic_ccel_log(
        &[
            (1, 0x8000_000a, b"TdxTable"),
            (1, 0x8000_0001, b"SecureBoot"),
            (1, 0x4, &[0; 4]),
            (2, 0x8000_0003, &kernel),
            (3, 0x6, &initrd),
            (3, 0x3, b"no action"),
            (4, 0x8000_0007, b"runtime"),
        ],
        0,
    )
}

fn tdx_ccel() -> Vec<Seed> {
    use confboot_tdx::{CC_TYPE_TDX, CcelTable};
    let log = tdx_ccel_log();
    let mut padded = log.clone();
    padded.extend(std::iter::repeat_n(0xff, 512));
    let mut flipped = log.clone();
    flipped[70] ^= 0x40;
    let table = CcelTable {
        cc_type: CC_TYPE_TDX,
        cc_subtype: 0,
        log_area_len: 0x10000,
        log_area_start: 0x7fbd_0000,
    }
    .encode();
    vec![
        seed("log", log.clone()),
        seed("log-padded", padded),
        seed("log-flipped", flipped),
        seed("log-cut", &log[..log.len() - 7]),
        seed("table", table),
    ]
}

fn tdx_evidence() -> Vec<Seed> {
    use confboot_tdx::TdxEvidence;
    let quote = fixtures::TDX_QUOTES[0].quote.to_vec();
    let with_log = TdxEvidence {
        quote: quote.clone(),
        ccel_log: tdx_ccel_log(),
    };
    let without = TdxEvidence {
        quote,
        ccel_log: Vec::new(),
    };
    vec![
        seed("quote-and-log", with_log.encode().expect("seed evidence")),
        seed("quote-only", without.encode().expect("seed evidence")),
    ]
}

fn tdx_tcb_info() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = fixtures::TDX_TCB_INFOS
        .iter()
        .enumerate()
        .map(|(i, t)| seed(&format!("tcb-info-{i}"), *t))
        .collect();
    let text = String::from_utf8(fixtures::TDX_TCB_INFOS[0].to_vec()).expect("JSON is text");
    seeds.push(seed(
        "tcb-info-0-status-changed",
        text.replacen("\"OutOfDate\"", "\"UpToDate\"", 1),
    ));
    seeds
}

fn tdx_qe_identity() -> Vec<Seed> {
    let text = String::from_utf8(fixtures::TDX_QE_IDENTITY.to_vec()).expect("JSON is text");
    vec![
        seed("qe-identity", fixtures::TDX_QE_IDENTITY),
        seed(
            "qe-identity-isvsvn-changed",
            text.replace("\"isvsvn\":4", "\"isvsvn\":1"),
        ),
    ]
}

fn tdx_certs() -> Vec<Seed> {
    use confboot_tdx::{OID_SGX_EXTENSIONS, Quote, certificates_from_pem_or_der};
    let q = Quote::parse(fixtures::TDX_QUOTES[0].quote).expect("fixture quote");
    let ders = certificates_from_pem_or_der(&q.pck_chain_pem).expect("fixture chain");
    let (_, leaf) = X509Certificate::from_der(&ders[0]).expect("fixture PCK certificate");
    let sgx = leaf
        .extensions()
        .iter()
        .find(|e| e.oid.to_id_string() == OID_SGX_EXTENSIONS)
        .expect("SGX extensions")
        .value
        .to_vec();
    vec![
        seed("pck-crl", fixtures::TDX_CRLS[0]),
        seed("root-crl", fixtures::TDX_CRLS[1]),
        seed("pck-certificate", ders[0].clone()),
        seed("pck-chain-pem", q.pck_chain_pem.clone()),
        seed("sgx-extensions", sgx),
    ]
}

fn snp_certs() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = fixtures::snp()
        .iter()
        .enumerate()
        .map(|(i, f)| seed(&format!("vek-{i}"), f.vek.to_vec()))
        .collect();
    for (i, der) in certificates_from_pem_or_der(MILAN_ASK_ARK_ASVK)
        .expect("bundle")
        .into_iter()
        .enumerate()
    {
        seeds.push(seed(&format!("milan-bundle-{i}"), der));
    }
    seeds.push(seed("milan-bundle-pem", MILAN_ASK_ARK_ASVK));
    seeds
}

fn measurement_policy() -> Vec<Seed> {
    let d = |b: u8| confboot_util::hex::encode(&[b; 32]);
    vec![
        seed(
            "two-entries",
            format!(
                r#"{{"4": {{"expected": "{}", "warnOnly": false}}, "9": {{"expected": "{}", "warnOnly": true}}}}"#,
                d(4),
                d(9)
            ),
        ),
        seed(
            "escaped-key",
            format!(r#"{{"\u0031\u0035": {{"expected": "{}"}}}}"#, d(0)),
        ),
        seed(
            "duplicate-key",
            format!(
                r#"{{"4": {{"expected": "{}"}}, "4": {{"expected": "{}"}}}}"#,
                d(1),
                d(2)
            ),
        ),
    ]
}

fn azure_policy() -> Vec<Seed> {
    let launch = "7a".repeat(48);
    let pcr = |i: u32, warn: bool| {
        format!(
            r#""{i}": {{"expected": "{}", "warnOnly": {warn}}}"#,
            "ab".repeat(32)
        )
    };
    let policy = |snp: String, pcrs: &[String]| {
        format!(r#"{{"snp": {snp}, "pcrs": {{{}}}}}"#, pcrs.join(", "))
    };
    let snp = format!(r#"{{"measurement": {{"expected": "{launch}"}}}}"#);
    let id_key = format!(
        r#"{{"measurement": {{"expected": "{launch}", "warnOnly": true}}, "idKeyDigests": ["{}"], "minimumTcb": {{"bootloader": 3, "tee": 0, "snp": 8, "microcode": 115}}}}"#,
        "cd".repeat(48)
    );
    vec![
        seed(
            "minimal",
            policy(snp.clone(), &[pcr(4, false), pcr(9, false)]),
        ),
        seed(
            "id-key-and-firmware",
            policy(
                id_key,
                &[
                    pcr(0, true),
                    pcr(4, false),
                    pcr(7, false),
                    pcr(9, false),
                    pcr(15, false),
                ],
            ),
        ),
        seed(
            "initrd-unpinned",
            policy(snp.clone(), &[pcr(4, false), pcr(9, true)]),
        ),
        seed("mark-only", policy(snp.clone(), &[pcr(15, false)])),
        seed(
            "unknown-member",
            format!(
                r#"{{"snp": {snp}, "pcrs": {{{}}}, "tdx": {{}}}}"#,
                pcr(4, false)
            ),
        ),
    ]
}

fn snp_policy() -> Vec<Seed> {
    let m = confboot_util::hex::encode(fixtures::snp()[0].measurement());
    vec![
        seed(
            "minimal",
            format!(r#"{{"measurement": {{"expected": "{m}"}}}}"#),
        ),
        seed(
            "every-key",
            format!(
                r#"{{"measurement": {{"expected": "{m}", "warnOnly": false}},
 "minimumTcb": {{"bootloader": 3, "tee": 0, "snp": 8, "microcode": 115, "fmc": 0}},
 "vmpl": 0, "allowDebug": false, "allowSmt": true, "allowMigrationAgent": false,
 "minimumAbi": "1.51", "hostData": "{}", "idKeyDigests": ["{}"],
 "rootBundles": ["milan_ask_ark_asvk.pem"], "vcekCacheDir": "/var/lib/confboot/vcek",
 "kdsFetch": false, "kdsBaseUrl": "https://kdsintf.amd.com", "insecureAnyImage": false}}"#,
                "ab".repeat(32),
                "cd".repeat(48)
            ),
        ),
        seed(
            "allowed-chip-ids",
            format!(
                r#"{{"measurement": {{"expected": "{m}"}}, "allowedChipIds": ["{}", "{}"]}}"#,
                "a1".repeat(64),
                "b2".repeat(64)
            ),
        ),
        seed(
            "allowed-chip-ids-repeated",
            format!(
                r#"{{"measurement": {{"expected": "{m}"}}, "allowedChipIds": ["{a}", "{a}"]}}"#,
                a = "a1".repeat(64)
            ),
        ),
        seed(
            "allowed-chip-ids-masked",
            format!(
                r#"{{"measurement": {{"expected": "{m}"}}, "allowedChipIds": ["{}"]}}"#,
                "00".repeat(64)
            ),
        ),
        seed(
            "warn-only-insecure",
            format!(
                r#"{{"measurement": {{"expected": "{m}", "warnOnly": true}}, "insecureAnyImage": true}}"#
            ),
        ),
    ]
}

/// Netlink answers as the kernel sends them: a WireGuard device dump over
/// two messages and its end, a family answer and its acknowledgement, a
/// refusal, a link; and bare bodies.
fn netlink_reply() -> Vec<Seed> {
    use confboot_sys::netlink::message::{NLMSG_DONE, NLMSG_ERROR, message, put_attribute};
    use confboot_vpn::{
        AllowedIp, VpnPrivateKey, VpnPublicKey, WireGuardPeerConfig, set_device_requests,
    };
    let peers: Vec<WireGuardPeerConfig> = (1..=3u8)
        .map(|i| WireGuardPeerConfig {
            public_key: VpnPublicKey::from_bytes(&[i; 32]).expect("key"),
            endpoint: ([192, 0, 2, i], 51820).into(),
            allowed_ips: vec![AllowedIp::host([10, 118, 0, i].into())],
            persistent_keepalive_secs: 25,
        })
        .collect();
    let key = VpnPrivateKey::from_bytes(&[9; 32]).expect("key");
    // SET_DEVICE's layout is GET_DEVICE's: only the command differs.
    let mut device = set_device_requests(7, &key, 51820, &peers).expect("bodies")[0].to_vec();
    device[0] = 0;
    let family = 29u16;
    let mut dump = message(family, 2, 1, &device);
    dump.extend_from_slice(&message(family, 2, 1, &device));
    dump.extend_from_slice(&message(NLMSG_DONE, 2, 1, &0i32.to_ne_bytes()));
    let ack = |code: i32| {
        let mut body = code.to_ne_bytes().to_vec();
        body.extend_from_slice(&[0u8; 16]);
        message(NLMSG_ERROR, 0, 1, &body)
    };
    let mut family_attrs = vec![1u8, 2, 0, 0];
    put_attribute(&mut family_attrs, 2, b"wireguard\0");
    put_attribute(&mut family_attrs, 1, &family.to_ne_bytes());
    let mut family_answer = message(0x10, 0, 1, &family_attrs);
    family_answer.extend_from_slice(&ack(0));
    let mut link = vec![0u8; 16];
    link[4..8].copy_from_slice(&7u32.to_ne_bytes());
    put_attribute(&mut link, 3, b"wg0\0");
    let mut kind = Vec::new();
    put_attribute(&mut kind, 1, b"wireguard");
    put_attribute(&mut link, 18 | 0x8000, &kind);
    let mut link_answer = message(16, 0, 1, &link);
    link_answer.extend_from_slice(&ack(0));
    vec![
        seed("wireguard-dump", dump),
        seed("family", family_answer),
        seed("refused", ack(-19)),
        seed("link", link_answer),
        seed("device-body", device),
        seed("family-body", family_attrs),
        seed("link-body", link),
    ]
}

/// A reply as QEMU's user networking sends it (OFFER or ACK), with its
/// options, and a few near misses.
fn dhcp_reply_seeds() -> Vec<Seed> {
    let reply = |kind: u8, options: &[u8]| {
        let mut m = vec![0u8; 236];
        m[..3].copy_from_slice(&[2, 1, 6]);
        m[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        m[16..20].copy_from_slice(&[10, 0, 2, 15]);
        m[28..34].copy_from_slice(&[0x52, 0x54, 0, 0x12, 0x34, 0x56]);
        m.extend_from_slice(&[99, 130, 83, 99, 53, 1, kind]);
        m.extend_from_slice(options);
        m.push(255);
        m
    };
    let qemu: &[u8] = &[
        54, 4, 10, 0, 2, 2, 1, 4, 255, 255, 255, 0, 3, 4, 10, 0, 2, 2, 51, 4, 0, 1, 81, 128, 6, 4,
        10, 0, 2, 3,
    ];
    vec![
        seed("offer", reply(2, qemu)),
        seed("ack", reply(5, qemu)),
        seed("nak", reply(6, &[54, 4, 10, 0, 2, 2])),
        seed(
            "two-routers-pads",
            reply(5, &[0, 0, 3, 8, 1, 2, 3, 4, 5, 6, 7, 8]),
        ),
        seed("truncated-option", reply(2, &[3, 200, 10])),
    ]
}

fn kms_uri_seeds() -> Vec<Seed> {
    let uri = kms_uri();
    vec![
        seed("kms", uri.clone()),
        seed("kms-percent-padding", uri.replace('=', "%3D")),
        seed("storage", "storage://no-store"),
        seed("kms-other-backend", "kms://vault?key=AAAA"),
    ]
}

fn kubelet_csr() -> Vec<Seed> {
    use confboot_cluster::kubelet_cert::KubeletCertRequest;
    let csr = |name: &str, ips: &[&str]| {
        let ips: Vec<std::net::IpAddr> = ips.iter().map(|s| s.parse().unwrap()).collect();
        KubeletCertRequest::new(name, &ips).unwrap().csr_der
    };
    let mut ca_request = rcgen::CertificateParams::default();
    ca_request
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:x");
    ca_request
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    ca_request.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_request.subject_alt_names = vec![rcgen::SanType::IpAddress([10, 0, 0, 1].into())];
    let key = rcgen::KeyPair::generate().unwrap();
    vec![
        seed("one-ip", csr("worker-1", &["10.0.2.15"])),
        seed(
            "dual-stack",
            csr(
                "node.example.com",
                &["10.0.2.15", "fd00::15", "192.168.1.7"],
            ),
        ),
        seed(
            "asks-ca",
            ca_request.serialize_request(&key).unwrap().der().to_vec(),
        ),
    ]
}

fn vpn_own_record() -> Vec<Seed> {
    use confboot_proto::vpn::GetUpdateRequest;
    use confboot_vpn::{OwnRecordKey, VpnPublicKey};
    let key = OwnRecordKey::from_disk_key(&crate::VPN_OWN_RECORD_DISK_KEY);
    let record = key.record(
        "worker-1",
        "192.0.2.1:51820",
        &VpnPublicKey::from_bytes(&[1; 32]).unwrap(),
        "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f",
    );
    let request = |own| {
        GetUpdateRequest {
            resource_version: 3,
            own,
        }
        .encode_to_vec()
    };
    let mut forged = record.clone();
    forged.peer.as_mut().unwrap().public_endpoint = "192.0.2.9:51820".into();
    vec![
        seed("valid", request(Some(record))),
        seed("forged-endpoint", request(Some(forged))),
        seed("no-record", request(None)),
    ]
}

fn vpn_update() -> Vec<Seed> {
    use confboot_proto::vpn::{GetUpdateResponse, Peer};
    let peer = |i: u8| Peer {
        name: format!("node-{i}"),
        public_endpoint: format!("192.0.2.{i}:51820"),
        vpn_ip: format!("10.118.0.{i}"),
        vpn_pub_key: vec![i; 32],
    };
    let response = |version, peers: Vec<Peer>| {
        GetUpdateResponse {
            resource_version: version,
            peers,
            signature: Vec::new(),
        }
        .encode_to_vec()
    };
    // Signed with the target's role key for its session and request.
    let signed = {
        use crate::{VPN_UPDATE_MASTER_SECRET, VPN_UPDATE_SESSION};
        use confboot_cluster::role::ControlPlaneKey;
        let role = ControlPlaneKey::derive(
            &confboot_kms::MasterSecret::new(
                VPN_UPDATE_MASTER_SECRET.to_vec(),
                VPN_UPDATE_MASTER_SECRET.to_vec(),
            )
            .unwrap(),
        );
        let mut answer = GetUpdateResponse {
            resource_version: 2,
            peers: vec![peer(1), peer(2)],
            signature: Vec::new(),
        };
        let request = confboot_proto::vpn::GetUpdateRequest {
            resource_version: 1,
            own: None,
        };
        role.sign_answer(
            confboot_proto::GET_UPDATE,
            &VPN_UPDATE_SESSION,
            &request,
            &mut answer,
        );
        answer.encode_to_vec()
    };
    let mut outside = peer(3);
    outside.vpn_ip = "10.119.0.3".into();
    let mut ipv6 = peer(4);
    ipv6.public_endpoint = "[2001:db8::4]:51820".into();
    vec![
        seed("three-peers", response(2, vec![peer(1), peer(2), peer(3)])),
        seed("unchanged", response(1, vec![])),
        seed("all-removed", response(3, vec![])),
        seed("ipv6-endpoint", response(4, vec![peer(2), ipv6])),
        seed("outside-range", response(5, vec![peer(2), outside])),
        seed("duplicate-name", response(6, vec![peer(2), peer(2)])),
        seed("signed", signed),
    ]
}

fn ssh_users_config() -> Vec<Seed> {
    let key = |key_type: &str, fields: &[&[u8]]| {
        let mut blob = Vec::new();
        for f in [key_type.as_bytes()].iter().chain(fields) {
            blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
            blob.extend_from_slice(f);
        }
        format!(
            "{key_type} {} user@host",
            confboot_util::base64::encode(&blob)
        )
    };
    let mut point = vec![4u8];
    point.extend([9; 64]);
    let mut modulus = vec![0u8, 0xc3];
    modulus.extend([7; 255]);
    let keys = [
        key("ssh-ed25519", &[&[1; 32]]),
        key("ecdsa-sha2-nistp256", &[b"nistp256", &point]),
        key("ssh-rsa", &[&[1, 0, 1], &modulus]),
        key("sk-ssh-ed25519@openssh.com", &[&[2; 32], b"ssh:"]),
    ];
    let config = |pairs: &[(&str, &str)]| {
        let entries: Vec<_> = pairs
            .iter()
            .map(|(u, k)| serde_json::json!({"username": u, "publicKey": k}))
            .collect();
        serde_json::json!({ "sshUsers": entries }).to_string()
    };
    vec![
        seed(
            "users",
            config(&[
                ("alice", &keys[0]),
                ("bob", &keys[1]),
                ("_carol", &keys[2]),
                ("dave-2", &keys[3]),
            ]),
        ),
        seed("empty", "{}"),
        seed(
            "duplicate",
            config(&[("alice", &keys[0]), ("alice", &keys[1])]),
        ),
        seed("root", config(&[("root", &keys[0])])),
        seed(
            "options",
            config(&[("alice", &format!("command=\"x\" {}", keys[0]))]),
        ),
    ]
}

fn init_secret_hash() -> Vec<Seed> {
    let h = hash(b"the init secret", MIN_ITERATIONS);
    vec![
        seed("hash", h.clone()),
        seed("hash-with-newline", format!("  {h}\n")),
        seed("too-few-iterations", h.replace("$10000$", "$9999$")),
    ]
}

fn master_secret_file() -> Vec<Seed> {
    let m = MasterSecret::new(vec![7; 32], vec![8; 32]).expect("lengths");
    vec![
        seed("file", m.to_file_text().as_bytes()),
        seed("extra-field", r#"{"key": "AAAA", "salt": "AAAA", "x": 1}"#),
    ]
}

/// What `cryptsetup luksDump --dump-json-metadata` printed for a header
/// with confboot's three tokens (cryptsetup 2.6, LUKS2, PBKDF2).
const LUKS2_DUMP: &str = include_str!("luks2_dump.json");

/// Request buffers as the kernel returns them (it rewrites the header in
/// place): a status-like one, a table load (a dummy key), a truncated one,
/// a table status reply of two crypt targets (keyring-style keys).
fn dm_reply() -> Vec<Seed> {
    use confboot_disk::dm::wire::{Request, Target};
    let status = Request::new(
        "state",
        "CRYPT-LUKS2-0a1b2c3d00004000800000000000000f-state",
        0,
    )
    .expect("a request");
    let table = Request::table_load(
        "state",
        1 << 15,
        &Target {
            sector_start: 0,
            length: 98304,
            target_type: "crypt",
            params: b"aes-xts-plain64 0000 0 254:0 32768 1 sector_size:4096",
        },
    )
    .expect("a table");
    let crypt = Target {
        sector_start: 0,
        length: 98304,
        target_type: "crypt",
        params: b"aes-xts-plain64 :64:logon:cryptsetup:0a1b2c3d-0000-4000-8000-00000000000f-d0 0 254:16 32768 1 sector_size:4096",
    };
    let table_status = confboot_disk::dm::wire::encode_table_reply("state", &[crypt, crypt])
        .expect("a table status reply");
    vec![
        seed("status", status.bytes()),
        seed("table-load", table.bytes()),
        seed("truncated", &status.bytes()[..400]),
        seed("table-status", table_status.bytes()),
    ]
}

fn luks2_metadata() -> Vec<Seed> {
    vec![
        seed("luks-dump", LUKS2_DUMP),
        seed("luks-uuid", "0a1b2c3d-0000-4000-8000-000000000001\n"),
        seed(
            "two-salt-tokens",
            r#"{"tokens": {"0": {"type": "confboot-measurement-salt", "salt": "00"}, "1": {"type": "confboot-measurement-salt", "salt": "01"}}}"#,
        ),
    ]
}

/// Primary LUKS2 headers cryptsetup 2.6 wrote (their trailing zeros
/// cut), formatted with [`crate::LUKS2_FUZZ_PASSPHRASE`]: PBKDF2 with
/// confboot's three tokens; Argon2id with a second, Argon2i, key slot.
const LUKS2_HEADER_PBKDF2: &[u8] = include_bytes!("luks2_header_cryptsetup_pbkdf2-tokens.bin");
const LUKS2_HEADER_ARGON2: &[u8] = include_bytes!("luks2_header_cryptsetup_argon2id-argon2i.bin");

fn luks2_header() -> Vec<Seed> {
    // The same header with its JSON's costs raised and checksum recomputed:
    // the bounds, not the checksum, must stop it.
    let mut costly = LUKS2_HEADER_ARGON2.to_vec();
    costly.resize(16 << 10, 0);
    let end = 4096 + costly[4096..].iter().position(|&b| b == 0).expect("a NUL");
    let text = String::from_utf8(costly[4096..end].to_vec()).expect("JSON text");
    let raised = text.replacen("\"memory\":1024", "\"memory\":4194304", 1);
    costly[4096..4096 + raised.len()].copy_from_slice(raised.as_bytes());
    costly[448..512].fill(0);
    let sum = ring::digest::digest(&ring::digest::SHA256, &costly);
    costly[448..480].copy_from_slice(sum.as_ref());
    while costly.last() == Some(&0) {
        costly.pop();
    }
    vec![
        seed("cryptsetup-pbkdf2-tokens-header", LUKS2_HEADER_PBKDF2),
        seed("cryptsetup-argon2id-argon2i-header", LUKS2_HEADER_ARGON2),
        seed("cryptsetup-argon2-4gib-header", costly),
    ]
}

fn tpm_event_log() -> Vec<Seed> {
    let log = fixtures::event_log();
    let padded = [log.clone(), vec![0; 64]].concat();
    vec![seed("ovmf-like", log), seed("zero-padded", padded)]
}

fn tpm_event_list() -> Vec<Seed> {
    let list = confboot_tpm::event_log::EventLog::parse(&fixtures::event_log())
        .expect("fixture event log")
        .to_event_list();
    vec![
        seed("ovmf-like", list.to_json()),
        seed("empty", r#"{"events": []}"#),
    ]
}

/// A bzImage-shaped PE32+ file: a setup header (HdrS, protocol 2.15,
/// loaded high, initrd above 4 GiB allowed) in a one-section image, with
/// or without a certificate table: what `confboot measure` can predict.
pub fn bz_image(signed: bool) -> Vec<u8> {
    let mut k = vec![0u8; 0x600];
    k[..2].copy_from_slice(b"MZ");
    k[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
    k[0x80..0x84].copy_from_slice(b"PE\0\0");
    k[0x86..0x88].copy_from_slice(&1u16.to_le_bytes());
    k[0x94..0x96].copy_from_slice(&240u16.to_le_bytes());
    let opt = 0x98;
    k[opt..opt + 2].copy_from_slice(&0x20bu16.to_le_bytes());
    k[opt + 60..opt + 64].copy_from_slice(&0x200u32.to_le_bytes());
    k[opt + 108..opt + 112].copy_from_slice(&16u32.to_le_bytes());
    let section = opt + 240;
    k[section + 16..section + 20].copy_from_slice(&0x400u32.to_le_bytes());
    k[section + 20..section + 24].copy_from_slice(&0x200u32.to_le_bytes());
    k[0x202..0x206].copy_from_slice(b"HdrS");
    k[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
    k[0x211] = 0x01;
    k[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    k[0x236..0x238].copy_from_slice(&0x7fu16.to_le_bytes());
    k[0x238..0x23c].copy_from_slice(&2048u32.to_le_bytes());
    if signed {
        let cert_entry = opt + 112 + 32;
        k[cert_entry..cert_entry + 4].copy_from_slice(&0x600u32.to_le_bytes());
        k[cert_entry + 4..cert_entry + 8].copy_from_slice(&16u32.to_le_bytes());
        k.extend_from_slice(&[0x30; 16]);
    }
    k
}

/// Firmware files: one that takes a measured direct boot, one that does
/// not, one whose table lies outside its page, and one whose metadata
/// lists a section of unknown type.
fn ovmf_firmware() -> Vec<Seed> {
    use confboot_testkit::ovmf::{
        SECTION_CPUID, SECTION_KERNEL_HASHES, SECTION_MEMORY, SECTION_SECRETS, synthetic,
    };
    let sections = [
        (0x80_0000, 0x2000, SECTION_MEMORY),
        (0x80_2000, 0x1000, SECTION_SECRETS),
        (0x80_3000, 0x1000, SECTION_CPUID),
        (0x80_4000, 0x1000, SECTION_KERNEL_HASHES),
    ];
    vec![
        seed(
            "direct-boot",
            synthetic(2, &sections, Some(0x80_4c00), 0x80_b004),
        ),
        seed(
            "firmware-only",
            synthetic(2, &sections[..3], None, 0x80_b004),
        ),
        seed(
            "table-outside",
            synthetic(2, &sections, Some(0x80_5000), 0x80_b004),
        ),
        seed(
            "unknown-section",
            synthetic(2, &[(0x80_0000, 0x1000, 9)], None, 0x80_b004),
        ),
    ]
}

fn kernel_image() -> Vec<Seed> {
    vec![
        seed("bzimage", bz_image(false)),
        seed("bzimage-signed", bz_image(true)),
    ]
}

/// What a node sends `confboot verify` after the handshake: its
/// attestation frame bound to the session (marked, with its event log),
/// one bound to another value (a relayed or recorded answer), one with a
/// sealing key, the empty message, and a refusal instead.
fn verify_document() -> Vec<Seed> {
    let v = fixtures::vtpm();
    let answer = |extra: &[u8; 32], set: PcrSet, key: Option<[u8; 32]>| {
        let m = AttestationMessage {
            evidence: Some((Variant::QemuVtpm, v.evidence(extra, set, false))),
            sealing_key: key,
            reference_values: None,
        };
        frame(FrameKind::Message, &m.encode())
    };
    vec![
        seed(
            "marked",
            answer(&fixtures::SESSION_EXTRA, PcrSet::Marked, None),
        ),
        seed(
            "logged",
            answer(&fixtures::SESSION_EXTRA, PcrSet::Logged, None),
        ),
        seed("other-session", answer(&EXTRA, PcrSet::Marked, None)),
        seed(
            "sealing-key",
            answer(
                &fixtures::SEALED_SESSION_EXTRA,
                PcrSet::Marked,
                Some([0x42; 32]),
            ),
        ),
        seed(
            "not-attested",
            frame(FrameKind::Message, &AttestationMessage::none().encode()),
        ),
        seed("refused", trailer(7, "the server refused this client")),
    ]
}

/// Superblocks: one as veritysetup writes it (UUID and salt given), one
/// without salt and with 512-byte blocks, an old version, a truncated one.
fn verity_superblock() -> Vec<Seed> {
    use confboot_disk::verity::Superblock;
    let sb = Superblock {
        uuid: [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ],
        data_block_size: 4096,
        hash_block_size: 4096,
        data_blocks: 10,
        salt: vec![0x00, 0x11, 0x22, 0x33],
    };
    let small = Superblock {
        data_block_size: 512,
        hash_block_size: 512,
        data_blocks: 300,
        salt: vec![],
        ..sb.clone()
    };
    let mut old = sb.encode();
    old[8] = 2;
    vec![
        seed("veritysetup", sb.encode()),
        seed("no-salt-512", small.encode()),
        seed("version-2", old),
        seed("truncated", &sb.encode()[..100]),
    ]
}

/// Command lines: the root on one device, on two without a superblock, a
/// key given twice, an unknown key.
fn verity_cmdline() -> Vec<Seed> {
    let hash = "5cc8999f9db736c358351c87ee8f553f7928188bdf0fc043e6bfbd60cfcd1e51";
    let one = format!(
        "console=ttyS0 confboot.root=/dev/vdb confboot.root.hash={hash} confboot.root.salt=00112233 \
         confboot.root.blocks=10 confboot.root.datablock=4096 confboot.root.hashblock=4096 \
         confboot.root.hashoffset=40960 quiet"
    );
    let two = format!(
        "confboot.root=/dev/vdb confboot.root.hashdev=/dev/vdc confboot.root.hash={hash} \
         confboot.root.salt=- confboot.root.blocks=300 confboot.root.datablock=512 \
         confboot.root.hashblock=512 confboot.root.hashoffset=0 confboot.root.superblock=0"
    );
    vec![
        seed("one-device", one.as_str()),
        seed("two-devices", two.as_str()),
        seed("twice", format!("{one} confboot.root.blocks=10")),
        seed("unknown-key", format!("{one} confboot.root.fec=/dev/vdd")),
    ]
}

/// An init and a control-plane join as the bootstrapper hands them over,
/// and a few near misses.
fn cluster_handoff() -> Vec<Seed> {
    use confboot_cluster::InitClusterParams;
    use confboot_cluster::handoff::{JoinStep, StepDocument};
    let init = StepDocument::Init(InitClusterParams {
        cluster_name: "confboot".into(),
        kubernetes_version: "v1.31.1".into(),
        node_ip: "10.0.0.1".into(),
        api_server_cert_sans: vec!["api.example.com".into(), "*.example.com".into()],
        service_cidr: "10.96.0.0/12".into(),
        pod_cidr: "10.244.0.0/16".into(),
        conformance_mode: false,
    })
    .to_json();
    let join = StepDocument::Join(JoinStep {
        api_server_endpoint: "10.0.0.1:6443".into(),
        discovery_token_ca_cert_hash: format!("sha256:{}", "ab".repeat(32)),
        is_control_plane: true,
        control_plane_files: vec!["ca.crt".into(), "ca.key".into(), "etcd/ca.key".into()],
        node_ip: "10.0.0.2".into(),
        kubernetes_version: "1.30.4".into(),
        node_name: "node-2".into(),
        kubelet_cert: true,
        token_valid_until: 1_900_000_000,
    })
    .to_json();
    let text = String::from_utf8(join.clone()).expect("JSON is text");
    vec![
        seed("init", init),
        seed("join", join),
        seed("unknown-kind", text.replace("\"join\",", "\"reset\",")),
        seed("escaping-name", text.replace("etcd/ca.key", "../token")),
        seed(
            "version-2",
            text.replace("\"version\": 1", "\"version\": 2"),
        ),
    ]
}

/// Unsigned reference-value sets: a valid one, an expired one (it reads:
/// the window is checked by whoever opens it), one whose policy does not
/// pin the image, one cut short and one with a byte changed.
fn reference_corim() -> Vec<Seed> {
    let [valid, expired] = fixtures::reference_sets();
    let mut loose = valid.clone();
    let pcr9 = loose.variants[0].policy.entries()[&9].value.clone();
    loose.variants[0].policy.set(9, pcr9, true);
    let bytes = valid.to_cbor();
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0x01;
    let mut with_snp = valid.clone();
    with_snp
        .variants
        .push(confboot_appraisal::reference::VariantReference::snp_launch(
            [0x42; 48],
            confboot_appraisal::reference::DirectBootHashes {
                kernel: [1; 32],
                initrd: [2; 32],
                cmdline: [3; 32],
            },
        ));
    vec![
        seed("valid", bytes.clone()),
        seed("with-snp-launch", with_snp.to_cbor()),
        seed("expired", expired.to_cbor()),
        seed("pcr9-warn-only", loose.to_cbor()),
        seed("truncated", &bytes[..bytes.len() - 1]),
        seed("flipped", flipped),
    ]
}

/// A history with a retirement and a signing, an empty one, one with a
/// bad digest, and time floors (one with, one without its newline, one
/// negative).
fn reference_history() -> Vec<Seed> {
    let digest = "ab".repeat(32);
    let full = format!(
        r#"{{"retired":[{{"digest":"{digest}","name":"confboot-node","version":"1","notAfter":1800000000,"retiredAt":1790000000,"reason":"removed"}}],"signings":[{{"name":"confboot-node","version":"2","notBefore":1790000000}}]}}"#
    );
    vec![
        seed("history", full.clone()),
        seed("history-empty", r#"{"retired":[],"signings":[]}"#),
        seed("history-bad-digest", full.replace(&digest, "ab")),
        seed(
            "floor",
            "1800000000
",
        ),
        seed("floor-bare", "1800000000"),
        seed(
            "floor-negative",
            "-1
",
        ),
    ]
}

/// Signed reference-value sets: signed by the fixture's release key (valid,
/// and expired), by another key, unsigned, and with a byte of the payload
/// changed.
fn reference_cose() -> Vec<Seed> {
    let key = fixtures::reference_signing_key();
    let [valid, expired] = fixtures::reference_sets();
    let signed = valid.sign(&key).expect("the fixture set signs");
    let (other, _) = confboot_appraisal::reference::SigningKey::generate().expect("a key");
    let mut forged = signed.clone();
    forged[signed.len() / 2] ^= 0x01;
    vec![
        seed("signed", signed),
        seed("signed-expired", expired.sign(&key).expect("signs")),
        seed("other-key", valid.sign(&other).expect("signs")),
        seed("unsigned", valid.to_cbor()),
        seed("forged", forged),
    ]
}

/// Attestation results: affirming and contraindicated ones signed by the
/// fixture key, one by another key, one with its claims changed, one with
/// `alg` none, and one with a duplicate claim.
fn ear_token() -> Vec<Seed> {
    use confboot_appraisal::ear::{EarSigningKey, Status};
    let key = fixtures::ear_signing_key();
    let affirming = fixtures::ear_result(Status::Affirming);
    let signed = affirming.sign(&key).expect("signs");
    let parts: Vec<&str> = signed.split('.').collect();
    let other = EarSigningKey::generate().expect("a key");
    let b64 = |b: &[u8]| {
        confboot_util::base64::encode_url(b)
            .trim_end_matches('=')
            .to_string()
    };
    let mut changed = affirming.to_claims();
    changed["iat"] = 0.into();
    let changed = format!(
        "{}.{}.{}",
        parts[0],
        b64(&serde_json::to_vec(&changed).expect("JSON")),
        parts[2]
    );
    let none = format!("{}.{}.", b64(br#"{"alg":"none"}"#), parts[1]);
    let payload = String::from_utf8(serde_json::to_vec(&affirming.to_claims()).expect("JSON"))
        .expect("UTF-8");
    let duplicate = format!(
        "{}.{}.{}",
        parts[0],
        b64(payload
            .replacen(r#""iat":"#, r#""iat":1,"iat":"#, 1)
            .as_bytes()),
        parts[2]
    );
    vec![
        seed("affirming", signed.clone()),
        seed(
            "contraindicated",
            fixtures::ear_result(Status::Contraindicated)
                .sign(&key)
                .expect("signs"),
        ),
        seed("other-key", affirming.sign(&other).expect("signs")),
        seed("changed-claims", changed),
        seed("alg-none", none),
        seed("duplicate-claim", duplicate),
    ]
}

/// The seeds of the target `name` (none for a name that is no target).
pub fn seeds(name: &str) -> Vec<Seed> {
    match name {
        "rpc_frame" => rpc_frame(),
        "rpc_server" => rpc_server(),
        "rpc_client" => rpc_client(),
        "join_ticket" => join_ticket(),
        "sealed_ticket" => sealed_ticket(),
        "atls_attestation" => atls_attestation(),
        "vtpm_evidence" => vtpm_evidence(),
        "snp_evidence" => snp_evidence(),
        "snp_cert_table" => snp_cert_table(),
        "snp_report" => snp_report(),
        "snp_certs" => snp_certs(),
        "measurement_policy" => measurement_policy(),
        "reference_corim" => reference_corim(),
        "reference_cose" => reference_cose(),
        "reference_history" => reference_history(),
        "ear_token" => ear_token(),
        "snp_policy" => snp_policy(),
        "tdx_quote" => tdx_quote(),
        "tdx_tcb_info" => tdx_tcb_info(),
        "tdx_qe_identity" => tdx_qe_identity(),
        "tdx_certs" => tdx_certs(),
        "tdx_ccel" => tdx_ccel(),
        "tdx_evidence" => tdx_evidence(),
        "kms_uri" => kms_uri_seeds(),
        "dhcp_reply" => dhcp_reply_seeds(),
        "init_secret_hash" => init_secret_hash(),
        "master_secret_file" => master_secret_file(),
        "luks2_metadata" => luks2_metadata(),
        "luks2_header" => luks2_header(),
        "dm_reply" => dm_reply(),
        "verity_superblock" => verity_superblock(),
        "verity_cmdline" => verity_cmdline(),
        "tpm_event_log" => tpm_event_log(),
        "tpm_event_list" => tpm_event_list(),
        "kernel_image" => kernel_image(),
        "ovmf_firmware" => ovmf_firmware(),
        "verify_document" => verify_document(),
        "ssh_users_config" => ssh_users_config(),
        "kubelet_csr" => kubelet_csr(),
        "vpn_update" => vpn_update(),
        "vpn_own_record" => vpn_own_record(),
        "netlink_reply" => netlink_reply(),
        "cluster_handoff" => cluster_handoff(),
        "registry_configmap" => registry_configmap(),
        "registry_ledger" => registry_ledger(),
        "ledger_anchor" => ledger_anchor(),
        "admin_generations" => admin_generations(),
        "state_mac_file" => state_mac_file(),
        "azure_hcl_report" => azure_hcl_report(),
        "azure_runtime_claims" => azure_runtime_claims(),
        "azure_evidence" => azure_evidence(),
        "azure_policy" => azure_policy(),
        "aws_document" => aws_document(),
        "aws_nitro_evidence" => aws_nitro_evidence(),
        "gcp_attestation" => gcp_attestation(),
        _ => Vec::new(),
    }
}

/// The ledger joinsvc keeps in its registry ConfigMap: two joins whose
/// first boot runs, two disks' generations and, with `filter`, a filter
/// of issued tickets with a few bits set.
fn registry_ledger_value(filter: bool) -> joinsvc::ledger::Ledger {
    use joinsvc::ledger::{DiskGeneration, FILTER_BITS, IssuedFilter, Ledger};
    let mut ledger = Ledger::default();
    ledger.pending.insert(registry_disk(1), 1_700_000_000);
    ledger.pending.insert(registry_disk(2), 1_700_000_100);
    for (i, generation) in [(3, 4), (4, 1)] {
        let at = 1_700_000_200;
        ledger
            .generations
            .insert(registry_disk(i), DiskGeneration { generation, at });
    }
    if filter {
        let mut bits = vec![0u8; FILTER_BITS / 8];
        for i in 0..64 {
            bits[i * 997] = 1 << (i % 8);
        }
        ledger.issued = IssuedFilter::from_parts(bits, 8).expect("the filter's size");
    }
    ledger
}

/// The state disk UUID of test node `i`.
fn registry_disk(i: u8) -> String {
    format!("2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e{i:02x}")
}

/// The registry ConfigMap's `data` as joinsvc writes it: `peers` nodes
/// (each bound to its disk, the last still waiting for its own record),
/// one removed disk and the ledger.
fn registry_data(peers: u8, filter: bool) -> serde_json::Value {
    use confboot_proto::vpn::Peer;
    use joinsvc::configmap::{Written, data_json};
    let network: confboot_vpn::VpnNetwork = crate::REGISTRY_NETWORK.parse().expect("range");
    let wire: Vec<Peer> = (1..=peers)
        .map(|i| Peer {
            name: format!("node-{i}"),
            public_endpoint: format!("192.0.2.{i}:51820"),
            vpn_ip: format!("10.118.0.{i}"),
            vpn_pub_key: vec![i; 32],
        })
        .collect();
    let list = confboot_vpn::PeerList::from_update(&wire, &network).expect("a valid list");
    let disks = (1..=peers)
        .map(|i| (format!("node-{i}"), registry_disk(0x10 + i)))
        .collect();
    let pending_peers = (peers > 0)
        .then(|| (format!("node-{peers}"), 1_700_000_300))
        .into_iter()
        .collect();
    let ledger = registry_ledger_value(filter);
    let written = Written {
        list: &list,
        disks: &disks,
        removed: &[registry_disk(0x20)],
        pending_peers: &pending_peers,
        ledger: &ledger,
    };
    let mut data = data_json(7, &written);
    // The filter as a joinsvc from before it had an object of its own kept
    // it: beside the peers (the same keys as in its own object).
    let filter = joinsvc::configmap::filter_data_json(&ledger.issued);
    for (key, value) in filter.as_object().expect("an object") {
        data[key] = value.clone();
    }
    data
}

/// The object as the API server returns it.
fn registry_object(data: serde_json::Value) -> Vec<u8> {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "confboot-vpn-peers", "namespace": "kube-system", "resourceVersion": "4711"},
        "data": data,
    })
    .to_string()
    .into_bytes()
}

/// joinsvc's registry ConfigMap: as written (empty, with peers, with the
/// filter, from before the ledger), and spoilt.
fn registry_configmap() -> Vec<Seed> {
    let mut outside = registry_data(2, false);
    outside["peers.json"] = serde_json::json!(
        outside["peers.json"]
            .as_str()
            .expect("a string")
            .replace("10.118.0.2", "10.119.0.2")
    );
    let mut removed = registry_data(1, false);
    removed["removed.json"] = serde_json::json!(r#"["not-a-uuid"]"#);
    let mut short_filter = registry_data(1, false);
    short_filter["issued-filter"] = serde_json::json!("AAAA");
    short_filter["issued-count"] = serde_json::json!("1");
    vec![
        seed("empty", registry_object(registry_data(0, false))),
        seed("three-peers", registry_object(registry_data(3, false))),
        seed("with-filter", registry_object(registry_data(2, true))),
        seed(
            "before-the-ledger",
            registry_object(serde_json::json!({"version": "3", "peers.json": "[]"})),
        ),
        seed("peer-outside-range", registry_object(outside)),
        seed("removed-not-a-uuid", registry_object(removed)),
        seed("filter-of-the-wrong-size", registry_object(short_filter)),
    ]
}

/// The ledger's part of the registry's `data`: as written, and spoilt.
fn registry_ledger() -> Vec<Seed> {
    let ledger_only = |filter: bool| {
        let mut data = registry_data(0, filter);
        let object = data.as_object_mut().expect("an object");
        object.retain(|k, _| !matches!(k.as_str(), "version" | "peers.json" | "removed.json"));
        data.to_string().into_bytes()
    };
    vec![
        seed("empty", "{}"),
        seed("pending-and-generations", ledger_only(false)),
        seed("with-filter", ledger_only(true)),
        seed(
            "generation-not-a-pair",
            format!(
                r#"{{"generations.json": "{{\"{}\": [1]}}"}}"#,
                registry_disk(1)
            ),
        ),
        seed(
            "pending-not-a-uuid",
            r#"{"pending-joins.json": "{\"disk\": 1}"}"#,
        ),
    ]
}

const AZURE_SNP_HCL: &[u8] = include_bytes!("../../crates/azure/testdata/azure-snp/hcl-report.bin");
const AZURE_TDX_HCL: &[u8] = include_bytes!("../../crates/azure/testdata/azure-tdx/hcl-report.bin");

/// The recorded SEV-SNP and TDX HCL reports, the SNP one with a changed
/// runtime-claims byte, and one cut short.
fn azure_hcl_report() -> Vec<Seed> {
    let mut changed = AZURE_SNP_HCL.to_vec();
    changed[0x4d4 + 200] ^= 1;
    vec![
        seed("snp", AZURE_SNP_HCL),
        seed("tdx", AZURE_TDX_HCL),
        seed("snp-claims-changed", changed),
        seed("snp-short", &AZURE_SNP_HCL[..0x600]),
    ]
}

/// The runtime claims of the recorded HCL reports, and one with its
/// attestation key named twice.
fn azure_runtime_claims() -> Vec<Seed> {
    let claims = |hcl: &[u8]| {
        confboot_azure::HclReport::parse(hcl)
            .expect("recorded report")
            .runtime_claims
            .to_vec()
    };
    let snp = claims(AZURE_SNP_HCL);
    let text = String::from_utf8(snp.clone()).expect("JSON text");
    let first = text.find("{\"kid\"").expect("a key");
    let end = first + text[first..].find('}').expect("its end") + 1;
    let twice = text.replacen(&text[first..end], &format!("{0},{0}", &text[first..end]), 1);
    vec![
        seed("snp", snp),
        seed("tdx", claims(AZURE_TDX_HCL)),
        seed("ak-twice", twice.into_bytes()),
    ]
}

/// The recorded quote in both encodings and two evidence files.
fn azure_evidence() -> Vec<Seed> {
    vec![
        seed(
            "quote-json",
            &include_bytes!("../../crates/azure/testdata/azure-snp/tpm-quote-v1.json")[..],
        ),
        seed(
            "quote-bin",
            &include_bytes!("../../crates/azure/testdata/azure-snp/quote.bin")[..],
        ),
        seed(
            "snp-evidence-v2",
            &include_bytes!("../../crates/azure/testdata/azure-snp/evidence-v2.json")[..],
        ),
        seed(
            "tdx-evidence-v1",
            &include_bytes!("../../crates/azure/testdata/azure-tdx/evidence-v1.json")[..],
        ),
    ]
}

/// The recorded NitroTPM evidence.
fn nitro() -> confboot_aws::NitroEvidence {
    confboot_aws::NitroEvidence::from_json(crate::NITRO_EVIDENCE).expect("the fixture reads")
}

/// The recorded NSM document; cut, with a flipped signature byte, and a
/// tagged envelope.
fn aws_document() -> Vec<Seed> {
    let doc = nitro().document;
    let mut flipped = doc.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let tagged = [&[0xd2][..], &doc].concat();
    vec![
        seed("recorded", doc.clone()),
        seed("cut", &doc[..2000]),
        seed("flipped-signature", flipped),
        seed("tagged", tagged),
    ]
}

/// The recorded NitroTPM evidence, and with another nonce and another bank.
fn aws_nitro_evidence() -> Vec<Seed> {
    let text = crate::NITRO_EVIDENCE;
    let nonce = "230af3f7c0ec43ccf99a4cab47ac61469a36ea74b1e79740fdf8ccfc8f56161a";
    vec![
        seed("recorded", text),
        seed("other-nonce", text.replacen(nonce, &"00".repeat(32), 1)),
        seed("sha256-bank", text.replacen("\"sha384\"", "\"sha256\"", 1)),
    ]
}

/// The recorded GCE attestations, and one cut inside its event log.
fn gcp_attestation() -> Vec<Seed> {
    let [with, without] = crate::GCP_ATTESTATIONS;
    vec![
        seed("nonce9009", with),
        seed("no-nonce", without),
        seed("cut", &without[..20_000]),
    ]
}

/// joinsvc's ledger anchor file: new, seen, and spoilt ones.
fn ledger_anchor() -> Vec<Seed> {
    vec![
        seed(
            "generation-negative",
            r#"{"registry":1,"filter":1,"filterCount":0,"generations":{"d":-1}}"#,
        ),
        seed(
            "new",
            r#"{"registry":null,"filter":null,"filterCount":0,"generations":{}}"#,
        ),
        seed("not-an-object", r#"[1,2,3]"#),
        seed(
            "joins",
            r#"{"format":2,"registry":120,"filter":121,"filterCount":42,"generations":{},"joins":{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f":{"pending":true,"bound":false,"until":1700003600},"9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f":{"pending":false,"bound":true,"until":null}}}"#,
        ),
        seed(
            "joins-spoilt",
            r#"{"format":2,"registry":1,"filter":1,"filterCount":0,"generations":{},"joins":{"d":{"pending":"yes","bound":false,"until":-1}}}"#,
        ),
        seed(
            "seen",
            r#"{"registry":120,"filter":121,"filterCount":42,"generations":{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f":7,"9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f":1}}"#,
        ),
        seed(
            "version-a-string",
            r#"{"registry":"5","filter":null,"filterCount":0,"generations":{}}"#,
        ),
    ]
}

/// The admin's generations file: its own form, the ledger's, spoilt ones.
fn admin_generations() -> Vec<Seed> {
    vec![
        seed("empty", r#"{}"#),
        seed(
            "own-and-ledger-form",
            r#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": 3, "9F3C6C1E-2B5D-4E8A-9C7F-1A2B3C4D5E6F": [5, 1700000000]}"#,
        ),
        seed("not-a-uuid", r#"{"disk": 1}"#),
        seed(
            "negative",
            r#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": -1}"#,
        ),
    ]
}

/// State files as the node seals them (the fuzz target's key), and near
/// misses: no trailer, a spoilt MAC.
fn state_mac_file() -> Vec<Seed> {
    use confboot_kms::state_mac::StateMacKey;
    let key = StateMacKey::derive(&[0x42; 32]);
    let users = key.seal("ssh-users.json", 3, b"{\"sshUsers\": []}\n");
    let mut spoilt = users.clone();
    let last = spoilt.len() - 2;
    spoilt[last] ^= 1;
    vec![
        seed("ssh-users", users),
        seed("generation", key.seal("state-generation", 7, b"7\n")),
        seed("unsealed", "4\n"),
        seed("spoilt-mac", spoilt),
    ]
}
