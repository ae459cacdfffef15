//! The fuzz targets of confboot, one function `fn(&[u8])` each, callable on
//! stable Rust. Each drives a parser or validator that reads bytes from the
//! network, a disk header or a configuration file, and asserts:
//!
//! - **no panic**: every input ends in `Ok` or `Err`, never in a panic (a
//!   failed assertion below is a finding too);
//! - **bounded memory**: the campaign runs under an RSS limit and a bound on
//!   the input length (`scripts/fuzz.sh`); the parsers' own limits are
//!   checked before they allocate;
//! - **never `Ok` without a valid signature**: a validator may accept only
//!   evidence whose signed bytes are bytes the fixture's keys signed (for
//!   vTPM, [`fixtures::Vtpm::signed_attests`]; for SEV-SNP, the genuine
//!   reports' signed parts; a ticket only from a member of its cluster);
//! - and where a format can be written back, that what was read writes back
//!   to what reads the same.
//!
//! [`TARGETS`] lists them by name. cargo-fuzz (`fuzz/`, nightly, libFuzzer)
//! calls them one per `fuzz/fuzz_targets/<name>.rs`; the test
//! `tests/corpus_replay.rs` replays every file of `fuzz/corpus/<name>/` and
//! `fuzz/regressions/<name>/` through them on stable, so the normal test
//! suite keeps every seed and every crash found passing.

pub mod fixtures;
pub mod seeds;
mod wire;

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use confboot_atls::AttestationMessage;
use confboot_attest::check::ReportDataCheck;
use confboot_attest::{MeasurementPolicy, Validator, Variant};
use confboot_cluster::mark::marked_pcr15;
use confboot_cluster::ticket::{
    JoinTicket, RejoinTicket, STATE_DISK_KEY_LEN, TicketError, check_member_mark,
};
use confboot_disk::cryptsetup::{
    BOOTSTRAPPED_TOKEN_TYPE, HeaderMetadata, SALT_TOKEN_TYPE, parse_luks_uuid,
};
use confboot_disk::{DiskBackend, DiskError, DiskState, StateDisk};
use confboot_kms::init_secret::{InitSecretHash, MAX_ITERATIONS, MIN_ITERATIONS};
use confboot_kms::seal::{SealedKind, SealingKeyPair, seal};
use confboot_kms::{
    MEASUREMENT_SALT_LEN, MIN_MASTER_SECRET_LEN, MIN_SALT_LEN, MasterSecret, MeasurementSalt,
    SecretBytes, StorageUri, is_uuid,
};
use confboot_proto::Message;
use confboot_proto::health::HealthCheckResponse;
use confboot_proto::init::{
    InitFailureResponse, InitRequest, InitResponse, InitSuccessResponse, LogResponseType,
    init_response,
};
use confboot_proto::join::{
    ConfirmGenerationRequest, ConfirmGenerationResponse, IssueJoinTicketRequest,
    IssueJoinTicketResponse, IssueRejoinTicketRequest, IssueRejoinTicketResponse, TicketSecrets,
};
use confboot_proto::recover::{RecoverMessage, RecoverResponse};
use confboot_proto::vtpm::QuoteEvidence;
use confboot_proto::{CONFIRM_GENERATION, HEALTH_CHECK, INIT, JOIN, RECOVER, REJOIN};
use confboot_snp::{
    AmdCert, CertRole, KDS_BASE_URL, Product, ProductRoot, SnpEvidence, SnpPolicy, SnpReport,
    TcbVersion, TrustRoots, VekInfo, certificates_from_pem_or_der, kds_vcek_url, vcek_cache_path,
    verify_signature,
};
use confboot_tpm::CLUSTER_ID_PCR;
use confboot_tpm::event_log::{EventList, EventLog, MAX_EVENTS};
use confboot_util::stop::Stop;
use confboot_wire::frame::{self, FrameError, FrameKind};
use confboot_wire::{Client, Router, ServerLimits, Status, serve_connection};

use fixtures::{EXTRA, POLICY_PCR};
use wire::Scripted;
use x509_parser::prelude::{FromDer, X509Certificate};

/// A fuzz target: takes any bytes, panics only on a finding.
pub type Target = fn(&[u8]);

/// Every target by name (the name of its `fuzz/fuzz_targets/*.rs` and of
/// its corpus directory).
pub const TARGETS: &[(&str, Target)] = &[
    ("rpc_frame", rpc_frame),
    ("rpc_server", rpc_server),
    ("rpc_client", rpc_client),
    ("join_ticket", join_ticket),
    ("sealed_ticket", sealed_ticket),
    ("atls_attestation", atls_attestation),
    ("vtpm_evidence", vtpm_evidence),
    ("snp_evidence", snp_evidence),
    ("snp_cert_table", snp_cert_table),
    ("snp_report", snp_report),
    ("snp_certs", snp_certs),
    ("measurement_policy", measurement_policy),
    ("reference_corim", reference_corim),
    ("reference_cose", reference_cose),
    ("reference_history", reference_history),
    ("ear_token", ear_token),
    ("snp_policy", snp_policy),
    ("tdx_quote", tdx_quote),
    ("tdx_tcb_info", tdx_tcb_info),
    ("tdx_qe_identity", tdx_qe_identity),
    ("tdx_certs", tdx_certs),
    ("tdx_ccel", tdx_ccel),
    ("tdx_evidence", tdx_evidence),
    ("kms_uri", kms_uri),
    ("dhcp_reply", dhcp_reply),
    ("init_secret_hash", init_secret_hash),
    ("master_secret_file", master_secret_file),
    ("luks2_metadata", luks2_metadata),
    ("luks2_header", luks2_header),
    ("dm_reply", dm_reply),
    ("verity_superblock", verity_superblock),
    ("verity_cmdline", verity_cmdline),
    ("tpm_event_log", tpm_event_log),
    ("tpm_event_list", tpm_event_list),
    ("kernel_image", kernel_image),
    ("ovmf_firmware", ovmf_firmware),
    ("verify_document", verify_document),
    ("ssh_users_config", ssh_users_config),
    ("kubelet_csr", kubelet_csr),
    ("vpn_update", vpn_update),
    ("vpn_own_record", vpn_own_record),
    ("netlink_reply", netlink_reply),
    ("cluster_handoff", cluster_handoff),
    ("registry_configmap", registry_configmap),
    ("registry_ledger", registry_ledger),
    ("ledger_anchor", ledger_anchor),
    ("admin_generations", admin_generations),
    ("state_mac_file", state_mac_file),
    ("azure_hcl_report", azure_hcl_report),
    ("azure_runtime_claims", azure_runtime_claims),
    ("azure_evidence", azure_evidence),
    ("azure_policy", azure_policy),
    ("aws_document", aws_document),
    ("aws_nitro_evidence", aws_nitro_evidence),
    ("gcp_attestation", gcp_attestation),
];

// ---- RPC ----

/// What a frame reader made of a stream: the frames, then how it ended.
fn read_frames(mut r: impl std::io::Read) -> (Vec<(FrameKind, Vec<u8>)>, String) {
    let mut frames = Vec::new();
    loop {
        match frame::read_frame(&mut r, frame::DEFAULT_MAX_FRAME_LEN) {
            Ok(f) => frames.push((f.kind, f.payload.clone())),
            Err(e) => return (frames, e.to_string()),
        }
    }
}

/// Frames (`flags length payload`) read from a stream: each frame read
/// writes back to exactly the bytes it came from, and reading the stream in
/// pieces (the first byte chooses their sizes) gives the same frames and
/// the same end as reading it whole.
pub fn rpc_frame(data: &[u8]) {
    let conn = Scripted::new(data);
    let input = conn.input();
    if let Some(Ok(header)) = input
        .get(..frame::HEADER_LEN)
        .map(<[u8; frame::HEADER_LEN]>::try_from)
    {
        for max in [0, 16, frame::DEFAULT_MAX_FRAME_LEN] {
            if let Ok((_, len)) = frame::parse_header(header, max) {
                assert!(len <= max);
                assert!(matches!(
                    header[0],
                    frame::FLAG_MESSAGE | frame::FLAG_TRAILER
                ));
            }
        }
    }
    let mut rest = input;
    loop {
        let before = rest;
        match frame::read_frame(&mut rest, frame::DEFAULT_MAX_FRAME_LEN) {
            Ok(f) => {
                let mut again = Vec::new();
                frame::write_frame(&mut again, f.kind, &f.payload).expect("writing to a Vec");
                assert_eq!(
                    again,
                    before[..before.len() - rest.len()],
                    "frame round trip"
                );
            }
            Err(FrameError::Eof) => {
                assert!(before.is_empty(), "EOF with bytes left");
                break;
            }
            Err(FrameError::Truncated { .. }) => {
                assert!(rest.is_empty(), "truncated with bytes left");
                break;
            }
            Err(_) => break,
        }
    }
    assert_eq!(
        read_frames(conn),
        read_frames(input),
        "pieces change frames"
    );
}

/// The router the RPC server targets serve: every method of the wire
/// contract, with the request checks the real services apply (the kms and
/// storage URIs, the disk UUID, the measurement salt's length).
fn router() -> &'static Router {
    static R: OnceLock<Router> = OnceLock::new();
    R.get_or_init(|| {
        let uri_checks = |kms_uri: &str, storage_uri: &str| -> Result<(), Status> {
            MasterSecret::from_kms_uri(kms_uri)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            StorageUri::parse(storage_uri).map_err(|e| Status::invalid_argument(e.to_string()))?;
            Ok(())
        };
        let uuid = |u: &str| {
            if is_uuid(u) {
                Ok(())
            } else {
                Err(Status::invalid_argument("disk_uuid is not a UUID"))
            }
        };
        Router::new()
            .unary(HEALTH_CHECK, |_, _| Ok(HealthCheckResponse { status: 1 }))
            .unary(JOIN, move |_, req: IssueJoinTicketRequest| {
                uuid(&req.disk_uuid)?;
                let mut t = IssueJoinTicketResponse::default();
                t.state_disk_key = vec![1; STATE_DISK_KEY_LEN];
                t.measurement_secret = vec![2; 32];
                t.measurement_salt = vec![3; 32];
                Ok(t)
            })
            .unary(REJOIN, move |_, req: IssueRejoinTicketRequest| {
                uuid(&req.disk_uuid)?;
                let mut t = IssueRejoinTicketResponse::default();
                t.state_disk_key = vec![1; STATE_DISK_KEY_LEN];
                t.measurement_secret = vec![2; 32];
                Ok(t)
            })
            .unary(
                CONFIRM_GENERATION,
                move |_, req: ConfirmGenerationRequest| {
                    uuid(&req.disk_uuid)?;
                    if req.written_generation != 0
                        && Some(req.written_generation) != req.found_generation.checked_add(1)
                    {
                        return Err(Status::invalid_argument(
                            "written_generation is neither 0 nor found_generation + 1",
                        ));
                    }
                    Ok(ConfirmGenerationResponse::default())
                },
            )
            .unary(RECOVER, move |_, req: RecoverMessage| {
                uri_checks(&req.kms_uri, &req.storage_uri)?;
                Ok(RecoverResponse::default())
            })
            .server_streaming(INIT, move |_, req: InitRequest, sink| {
                sink.send(&InitResponse {
                    kind: Some(init_response::Kind::Log(LogResponseType {
                        log: b"Init received".to_vec(),
                    })),
                })?;
                let checked = uri_checks(&req.kms_uri, &req.storage_uri).and_then(|()| {
                    if req.measurement_salt.len() < MIN_SALT_LEN {
                        Err(Status::invalid_argument("measurement_salt too short"))
                    } else {
                        Ok(())
                    }
                });
                let kind = match &checked {
                    Ok(()) => init_response::Kind::InitSuccess(InitSuccessResponse::default()),
                    Err(s) => init_response::Kind::InitFailure(InitFailureResponse {
                        error: s.to_string(),
                    }),
                };
                sink.send(&InitResponse { kind: Some(kind) })?;
                checked
            })
    })
}

/// The RPC server on one connection whose client sent `data` (after the
/// piece byte): call headers, every request message of the wire contract,
/// malformed frames. What it answers is whole frames, every trailer a
/// `Status`, the last frame a trailer.
pub fn rpc_server(data: &[u8]) {
    let mut conn = Scripted::new(data);
    let _ = serve_connection(&mut conn, router(), &ServerLimits::default(), &Stop::new());
    let (frames, end) = read_frames(&conn.written[..]);
    assert_eq!(
        end,
        FrameError::Eof.to_string(),
        "the server wrote a broken frame"
    );
    for (kind, payload) in &frames {
        if *kind == FrameKind::Trailer {
            confboot_proto::rpc::Status::decode(&payload[..]).expect("a trailer is a Status");
        }
    }
    if let Some((kind, _)) = frames.last() {
        assert_eq!(
            *kind,
            FrameKind::Trailer,
            "the answer does not end in a trailer"
        );
    }
}

/// The RPC client of a server-streaming call (the CLI's Init) reading what
/// the server sent (`data`, after the piece byte). It succeeds exactly when
/// the stream holds response messages and then an OK trailer, and hands
/// over exactly those messages.
pub fn rpc_client(data: &[u8]) {
    let conn = Scripted::new(data);
    let input = conn.input();
    let mut client = Client::new(conn);
    let mut got = Vec::new();
    let result = client.server_streaming(
        INIT,
        &InitRequest::default(),
        Duration::from_secs(60),
        |m: InitResponse| {
            got.push(m);
            Ok(())
        },
    );
    // The same stream read by hand.
    let (frames, _) = read_frames(input);
    let mut expected = Vec::new();
    let mut ok = false;
    for (kind, payload) in frames {
        match kind {
            FrameKind::Message => match InitResponse::decode(&payload[..]) {
                Ok(m) => expected.push(m),
                Err(_) => break,
            },
            FrameKind::Trailer => {
                ok = confboot_proto::rpc::Status::decode(&payload[..]).is_ok_and(|s| s.code == 0);
                break;
            }
        }
    }
    assert_eq!(result.is_ok(), ok, "{result:?}");
    if ok {
        assert_eq!(got, expected);
    } else {
        assert!(expected.starts_with(&got));
    }
}

/// The measurement secret of the cluster the join-ticket target's service
/// is a member of.
pub const TICKET_SECRET: [u8; 32] = [0x42; 32];
/// Its measurement salt (a join ticket's; also what a rejoining node's disk
/// header keeps).
pub const TICKET_SALT: [u8; 32] = [0x24; 32];

/// The node's key pair of the sealed-ticket target (fixed, so that seeds
/// sealed to it open).
pub fn sealed_ticket_key() -> &'static SealingKeyPair {
    static KEY: OnceLock<SealingKeyPair> = OnceLock::new();
    KEY.get_or_init(|| SealingKeyPair::derive(&[0x5e; 32]))
}

/// A node opening the sealed secrets of a ticket with its key
/// ([`sealed_ticket_key`]). `data[0]` bit 0 picks the kind (join or
/// rejoin); bit 1 what the rest is:
///
/// - clear: the ticket as it arrives (a prost `IssueJoinTicketResponse` or
///   `IssueRejoinTicketResponse`, sealed secrets inside). Opened, its
///   secrets are in their fields and nothing sealed is left; a rejoin
///   ticket's carry no token and no files.
/// - set: the plaintext of genuine sealed secrets, sealed here to the key
///   as that kind, so the `TicketSecrets` decoder and the opener's checks
///   see any bytes: it opens exactly when the plaintext decodes (and, for
///   a rejoin, has no token and no files), to what it decodes to; sealed
///   as one kind it never opens as the other.
pub fn sealed_ticket(data: &[u8]) {
    let Some((&scenario, rest)) = data.split_first() else {
        return;
    };
    let rejoin = scenario & 1 == 1;
    let key = sealed_ticket_key();
    if scenario & 2 == 0 {
        if rejoin {
            let Ok(t) = IssueRejoinTicketResponse::decode(rest) else {
                return;
            };
            if let Ok(opened) = RejoinTicket::open(&t, key) {
                assert!(!t.sealed_secrets.is_empty() && t.state_disk_key.is_empty());
                assert_eq!(opened.measurement_salt, t.measurement_salt);
            }
        } else {
            let Ok(t) = IssueJoinTicketResponse::decode(rest) else {
                return;
            };
            if let Ok(opened) = JoinTicket::open(&t, key) {
                assert!(!t.sealed_secrets.is_empty() && t.token.is_empty());
                assert_eq!(opened.measurement_salt, t.measurement_salt);
            }
        }
        return;
    }
    let (kind, other) = if rejoin {
        (SealedKind::RejoinTicket, SealedKind::JoinTicket)
    } else {
        (SealedKind::JoinTicket, SealedKind::RejoinTicket)
    };
    let Ok(sealed) = seal(&key.public_key(), kind, rest) else {
        // Only a plaintext over the bound is not sealed.
        assert!(
            rest.len() > confboot_kms::seal::MAX_SEALED_LEN - confboot_kms::seal::MIN_SEALED_LEN
        );
        return;
    };
    let decoded = TicketSecrets::decode(rest).ok();
    if rejoin {
        let mut wire = IssueRejoinTicketResponse::default();
        wire.sealed_secrets = sealed.clone();
        let opened = RejoinTicket::open(&wire, key);
        let expected = decoded.filter(|d| d.token.is_empty() && d.control_plane_files.is_empty());
        match (opened, expected) {
            (Ok(t), Some(d)) => {
                assert_eq!(t.state_disk_key.expose(), d.state_disk_key);
                assert_eq!(t.measurement_secret.expose(), d.measurement_secret);
            }
            (Err(TicketError::Unusable(_)), None) => {}
            (opened, expected) => panic!(
                "rejoin secrets: opened {:?}, decodable {}",
                opened,
                expected.is_some()
            ),
        }
        let mut as_join = IssueJoinTicketResponse::default();
        as_join.sealed_secrets = sealed;
        assert!(JoinTicket::open(&as_join, key).is_err(), "{other}");
    } else {
        let mut wire = IssueJoinTicketResponse::default();
        wire.sealed_secrets = sealed.clone();
        let opened = JoinTicket::open(&wire, key);
        match (opened, decoded) {
            (Ok(t), Some(d)) => {
                assert_eq!(t.state_disk_key.expose(), d.state_disk_key);
                assert_eq!(t.measurement_secret.expose(), d.measurement_secret);
                assert_eq!(*t.token, d.token);
                let files: Vec<(&str, &[u8])> = t
                    .control_plane_files
                    .iter()
                    .map(|f| (f.name.as_str(), f.data.expose()))
                    .collect();
                let sent: Vec<(&str, &[u8])> = d
                    .control_plane_files
                    .iter()
                    .map(|f| (f.name.as_str(), &f.data[..]))
                    .collect();
                assert_eq!(files, sent);
            }
            (Err(TicketError::Unusable(_)), None) => {}
            (opened, decoded) => panic!(
                "join secrets: opened {:?}, decodable {}",
                opened,
                decoded.is_some()
            ),
        }
        let mut as_rejoin = IssueRejoinTicketResponse::default();
        as_rejoin.sealed_secrets = sealed;
        assert!(RejoinTicket::open(&as_rejoin, key).is_err(), "{other}");
    }
}

/// A node's join client reading a join service's answer (`data[1..]`, after
/// the piece byte) and the checks the node applies to the ticket. `data[0]`
/// picks the request (bit 0: join or rejoin) and what the service attested
/// (bits 1-2: nothing, no PCR 15, the mark of the [`TICKET_SECRET`]
/// cluster, an unmarked PCR 15). A ticket is taken only with a usable key
/// and secret and only from a service marked for the ticket's cluster.
pub fn join_ticket(data: &[u8]) {
    let derive_cluster_id = |secret: &[u8], salt: &[u8]| {
        let salt = MeasurementSalt::try_from(salt).expect("a taken ticket's salt is checked");
        confboot_kms::derive_cluster_id(secret, &salt)
    };
    let Some((&scenario, answer)) = data.split_first() else {
        return;
    };
    let rejoin = scenario & 1 == 1;
    let member = marked_pcr15(&derive_cluster_id(&TICKET_SECRET, &TICKET_SALT)).to_vec();
    let service = match (scenario >> 1) & 3 {
        0 => None,
        1 => Some(vec![]),
        2 => Some(vec![(CLUSTER_ID_PCR, member.clone())]),
        _ => Some(vec![(CLUSTER_ID_PCR, vec![0; 32])]),
    }
    .map(|m| confboot_attest::Attested {
        set_verdict: None,
        warnings: Vec::new(),
        variant: Variant::QemuVtpm,
        measurements: m.into_iter().collect(),
    });
    // The node's checks of a ticket's fields (its secrets as they would
    // have opened: the wire's plaintext fields carry them here) and of the
    // service's mark, once.
    let checks = |secret: &[u8], salt: &[u8], key: &[u8]| {
        let ticket = RejoinTicket {
            state_disk_key: SecretBytes::new(key.to_vec()),
            measurement_secret: SecretBytes::new(secret.to_vec()),
            measurement_salt: salt.to_vec(),
            generation: 0,
            // Sealed in a real ticket: a valid one, so the other checks run.
            control_plane_key: vec![4; 32],
        };
        ticket
            .check()
            .and_then(|t| check_member_mark(t.cluster_id(), service.as_ref()).map(|()| t))
    };
    let mut client = Client::new(Scripted::new(answer));
    let timeout = Duration::from_secs(60);
    let uuid = "0a1b2c3d-0000-4000-8000-000000000001".to_string();
    // (secret, salt, key) of a ticket the node takes.
    let taken: Option<(Vec<u8>, Vec<u8>, Vec<u8>)> = if rejoin {
        let req = IssueRejoinTicketRequest { disk_uuid: uuid };
        client.unary(REJOIN, &req, timeout).ok().and_then(|t| {
            let ok = checks(
                &t.measurement_secret,
                &t.measurement_salt,
                &t.state_disk_key,
            );
            ok.ok().map(|checked| {
                assert!(
                    MEASUREMENT_SALT_LEN.contains(&checked.measurement_salt().as_bytes().len())
                );
                assert_eq!(checked.state_disk_key().expose(), t.state_disk_key);
                (
                    t.measurement_secret.clone(),
                    t.measurement_salt.clone(),
                    t.state_disk_key.clone(),
                )
            })
        })
    } else {
        let req = IssueJoinTicketRequest {
            disk_uuid: uuid,
            is_control_plane: scenario & 8 != 0,
            ..Default::default()
        };
        client.unary(JOIN, &req, timeout).ok().and_then(|t| {
            let ticket = JoinTicket {
                state_disk_key: SecretBytes::new(t.state_disk_key.clone()),
                measurement_secret: SecretBytes::new(t.measurement_secret.clone()),
                measurement_salt: t.measurement_salt.clone(),
                control_plane_key: vec![4; 32],
                ..Default::default()
            };
            let ok = ticket.check().and_then(|checked| {
                check_member_mark(checked.cluster_id(), service.as_ref()).map(|()| checked)
            });
            ok.ok().map(|checked| {
                assert!(
                    MEASUREMENT_SALT_LEN.contains(&checked.measurement_salt().as_bytes().len())
                );
                (
                    t.measurement_secret.clone(),
                    t.measurement_salt.clone(),
                    t.state_disk_key.clone(),
                )
            })
        })
    };
    if let Some((secret, salt, key)) = taken {
        assert_eq!(key.len(), STATE_DISK_KEY_LEN);
        assert!(!secret.is_empty());
        let service = service.expect("a ticket from a service that did not attest");
        assert_eq!(service.measurements.get(&CLUSTER_ID_PCR), Some(&member));
        assert_eq!(
            derive_cluster_id(&secret, &salt),
            derive_cluster_id(&TICKET_SECRET, &TICKET_SALT),
            "a ticket of another cluster was taken"
        );
    }
}

// ---- aTLS ----

/// A peer's attestation message, as the side that requires attestation
/// reads and checks it (with the vTPM validators, then the SEV-SNP ones),
/// bound to the targets' session ([`fixtures::session_extra`]). What
/// decodes encodes back to what decodes the same; it passes only with a
/// quote the fixture AK signed for the session's `extra_data` of the
/// message's sealing key; no genuine SEV-SNP report binds that session,
/// so SNP evidence never passes.
pub fn atls_attestation(data: &[u8]) {
    let Ok(message) = AttestationMessage::decode(data) else {
        return;
    };
    assert_eq!(
        AttestationMessage::decode(&message.encode()).as_ref(),
        Ok(&message),
        "a decoded message does not encode back"
    );
    for variant in Variant::ALL {
        let verdict = message.verify(fixtures::atls_validators(variant), |key| {
            Ok(fixtures::session_extra(key))
        });
        let Ok(attested) = verdict else { continue };
        assert_eq!(
            attested.variant,
            Variant::QemuVtpm,
            "SEV-SNP evidence accepted for a session no genuine report binds"
        );
        let (_, evidence) = message
            .evidence
            .as_ref()
            .expect("a verified message carries evidence");
        let e = QuoteEvidence::decode(evidence.as_slice()).expect("verified evidence decodes");
        assert!(
            fixtures::vtpm().signed_attests.contains(&e.attest),
            "a quote the AK never signed was accepted"
        );
        let extra = fixtures::session_extra(message.sealing_key.as_ref());
        assert!(
            e.attest.windows(extra.len()).any(|w| w == extra),
            "evidence accepted for another session or sealing key"
        );
    }
}

// ---- Attestation ----

/// vTPM evidence through the validator, with the AK pinned and with the AK
/// certified by a CA: it passes only with a quote the fixture AK signed, and
/// then reports the quoted PCR values.
pub fn vtpm_evidence(data: &[u8]) {
    let f = fixtures::vtpm();
    for (trust, v) in [("pinned", &f.pinned), ("CA", &f.ca_trusted)] {
        if let Ok(attested) = v.validate(data, &EXTRA) {
            let e = QuoteEvidence::decode(data).expect("validated evidence decodes");
            assert!(
                f.signed_attests.contains(&e.attest),
                "{trust} AK trust accepted a quote the AK never signed"
            );
            assert_eq!(e.ak_public, f.ak_public, "{trust}: another AK public area");
            assert_eq!(
                attested.measurements.get(&POLICY_PCR),
                Some(&vec![POLICY_PCR as u8; 32])
            );
            assert_eq!(
                attested.measurements.get(&CLUSTER_ID_PCR),
                Some(&vec![0; 32])
            );
            if !e.event_log.is_empty() {
                let log = EventLog::parse(&e.event_log).expect("an accepted event log parses");
                for (pcr, v) in log.replay() {
                    assert_eq!(
                        attested.measurements.get(&pcr).map(Vec::as_slice),
                        Some(&v[..]),
                        "an event log that does not replay to the quote was accepted"
                    );
                }
            }
        }
    }
}

/// SEV-SNP evidence (the report and its certificate table) decoded and
/// verified against the genuine report whose measurement it carries (the
/// first when none): it passes only if its signed part is that report's.
/// What decodes encodes back to what decodes the same.
pub fn snp_evidence(data: &[u8]) {
    let Ok(evidence) = SnpEvidence::decode(data) else {
        return;
    };
    let again = SnpEvidence::decode(&evidence.encode().expect("decoded evidence encodes"));
    assert_eq!(again.as_ref(), Ok(&evidence));
    let all = fixtures::snp();
    let f = all
        .iter()
        .find(|f| f.measurement() == evidence.report.measurement())
        .unwrap_or(&all[0]);
    let verdict = f
        .validator
        .verify(&evidence, &ReportDataCheck::Exact(f.report_data()));
    if verdict.is_ok() {
        assert_eq!(
            evidence.report.signed_bytes(),
            f.signed_part(),
            "a report AMD never signed was accepted"
        );
    }
}

/// The host's certificate table of an SNP extended report
/// (`auxblob`): parsing never panics, keeps every bound, and what it reads
/// lays out again to a table that reads the same.
pub fn snp_cert_table(data: &[u8]) {
    use confboot_snp::{MAX_CERTIFICATE_LEN, cert_table};
    let Ok(certs) = cert_table::parse(data) else {
        return;
    };
    assert!(data.len() <= cert_table::MAX_TABLE_LEN);
    assert!(certs.len() <= 4, "one certificate per known kind");
    for c in &certs {
        assert!(!c.der.is_empty() && c.der.len() <= MAX_CERTIFICATE_LEN);
        assert_eq!(
            certs.iter().filter(|o| o.kind == c.kind).count(),
            1,
            "a kind twice"
        );
    }
    assert_eq!(
        cert_table::parse(&cert_table::encode(&certs)).as_ref(),
        Ok(&certs)
    );
}

/// A raw SEV-SNP report: every field read for every product, the KDS URL
/// and cache path made from it, and its signature checked with the genuine
/// endorsement key of the report whose measurement it carries (the first
/// when none): it verifies only if its signed part is that report's.
pub fn snp_report(data: &[u8]) {
    let Ok(r) = SnpReport::from_bytes(data) else {
        return;
    };
    let _ = (
        r.version(),
        r.guest_svn(),
        r.guest_policy(),
        r.debug_allowed(),
    );
    let _ = (r.smt_allowed(), r.firmware_abi(), r.migrate_ma_allowed());
    let _ = (r.family_id(), r.image_id(), r.vmpl(), r.platform_info());
    let _ = (r.key_info(), r.signing_key().to_string(), r.report_data());
    let _ = (r.host_data(), r.id_key_digest(), r.author_key_digest());
    let _ = (r.report_id(), r.chip_id(), r.chip_id_masked(), r.cpuid());
    let _ = (
        r.product_from_cpuid(),
        r.current_tcb_raw(),
        r.committed_tcb_raw(),
    );
    let _ = r.signature_fixed();
    for p in Product::ALL {
        for tcb in [r.reported_tcb(p), r.launch_tcb(p), r.current_tcb(p)] {
            let _ = tcb.components();
        }
        let _ = kds_vcek_url(KDS_BASE_URL, p, &r);
    }
    let _ = vcek_cache_path(Path::new("/var/lib/confboot/vcek"), &r);
    static KEYS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        fixtures::snp()
            .iter()
            .map(|f| VekInfo::from_der(f.vek).expect("fixture VEK").public_key)
            .collect()
    });
    let all = fixtures::snp();
    let i = all
        .iter()
        .position(|f| f.measurement() == r.measurement())
        .unwrap_or(0);
    if verify_signature(&r, &keys[i]).is_ok() {
        assert_eq!(
            r.signed_bytes(),
            all[i].signed_part(),
            "a report signature verified over bytes AMD never signed"
        );
    }
}

/// The parsed to-be-signed part of a certificate.
fn tbs(der: &[u8]) -> Option<Vec<u8>> {
    X509Certificate::from_der(der)
        .ok()
        .map(|(_, c)| c.tbs_certificate.as_ref().to_vec())
}

struct SnpCertFixtures {
    /// The to-be-signed parts of the genuine VCEKs and VLEK.
    vek_tbs: Vec<Vec<u8>>,
    /// The to-be-signed parts of the genuine ASKs and ASVKs.
    intermediate_tbs: Vec<Vec<u8>>,
    /// The built-in roots, and Milan's with its ASVK.
    roots: [TrustRoots; 2],
    /// Milan's ARK alone (intermediates must come from evidence).
    ark_only: Vec<ProductRoot>,
    /// The genuine Milan VCEK.
    vcek: AmdCert,
}

fn snp_cert_fixtures() -> &'static SnpCertFixtures {
    static F: OnceLock<SnpCertFixtures> = OnceLock::new();
    F.get_or_init(|| {
        let bundle =
            certificates_from_pem_or_der(fixtures::MILAN_ASK_ARK_ASVK).expect("Milan bundle");
        let mut ark = None;
        let mut intermediate_tbs = Vec::new();
        for der in &bundle {
            let c = AmdCert::from_der(der).expect("Milan bundle certificate");
            match c.role() {
                CertRole::Ark => ark = Some(der.clone()),
                _ => intermediate_tbs.push(tbs(der).expect("TBS")),
            }
        }
        let ark = ark.expect("Milan ARK");
        SnpCertFixtures {
            vek_tbs: fixtures::snp()
                .iter()
                .map(|f| tbs(f.vek).expect("TBS"))
                .collect(),
            intermediate_tbs,
            roots: [
                TrustRoots::builtin(),
                TrustRoots::new(vec![
                    ProductRoot::from_pem_bundle(fixtures::MILAN_ASK_ARK_ASVK).expect("bundle"),
                ]),
            ],
            ark_only: vec![ProductRoot::new(&ark, &[]).expect("Milan ARK alone")],
            vcek: AmdCert::from_der(fixtures::snp()[0].vek).expect("Milan VCEK"),
        }
    })
}

/// AMD certificates: parsed as a VCEK/VLEK (its extensions), chained to the
/// pinned roots, offered as an evidence intermediate for a genuine VCEK,
/// and read as a PEM bundle of roots. A chain verifies only for a genuine
/// endorsement key or through a genuine intermediate.
pub fn snp_certs(data: &[u8]) {
    let f = snp_cert_fixtures();
    if let Ok(cert) = AmdCert::from_der(data) {
        let _ = (cert.validity(), cert.role(), cert.product());
        let _ = (cert.common_name(), cert.issuer_common_name());
        for roots in &f.roots {
            if roots.verify_vek(&cert, &[]).is_ok() {
                let t = tbs(data).expect("a verified certificate parses");
                assert!(f.vek_tbs.contains(&t), "a VEK AMD never signed chained");
            }
        }
        // Fresh roots: a chain remembered as verified would skip the
        // intermediate.
        let roots = TrustRoots::new(f.ark_only.clone());
        if roots.verify_vek(&f.vcek, &[cert]).is_ok() {
            let t = tbs(data).expect("a verified certificate parses");
            assert!(
                f.intermediate_tbs.contains(&t),
                "an ASK AMD never signed chained"
            );
        }
    }
    if let Ok(info) = VekInfo::from_der(data) {
        for p in Product::ALL {
            let _ = info.tcb_mismatches(&TcbVersion::decode([3, 0, 0, 0, 0, 0, 8, 115], p));
        }
    }
    let _ = certificates_from_pem_or_der(data);
    let _ = ProductRoot::from_pem_bundle(data);
}

// ---- Configuration files ----

/// The measurement policy JSON: what parses enforces something, names PCRs
/// 0 to 23 with SHA-256 values, writes back to text that parses the same,
/// and accepts its own values.
pub fn measurement_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = MeasurementPolicy::from_json(text) else {
        return;
    };
    assert!(p.enforces_something());
    for (i, e) in p.entries() {
        assert!(*i <= confboot_attest::measurements::MAX_INDEX);
        assert_eq!(e.value.len(), confboot_attest::measurements::DIGEST_LEN);
    }
    assert_eq!(
        MeasurementPolicy::from_json(&p.to_json()).as_ref().ok(),
        Some(&p),
        "to_json does not read back"
    );
    let own = p
        .entries()
        .iter()
        .map(|(i, e)| (*i, e.value.clone()))
        .collect();
    assert!(p.check(&own).is_ok());
}

/// An unsigned reference-value set (CoRIM): what reads is the one encoding
/// of what it says (it writes back to the same bytes), each variant's
/// policy pins the image and its events replay to its PCRs (an SEV-SNP
/// launch: its digest enforced, no events); read where no release key is
/// configured, it is the same set.
pub fn reference_corim(data: &[u8]) {
    use confboot_appraisal::reference::{LAUNCH_DIGEST_LEN, LAUNCH_VARIANTS, ReferenceSet, open};
    let Ok(set) = ReferenceSet::from_cbor(data) else {
        return;
    };
    assert_eq!(
        set.to_cbor(),
        data,
        "a set read from bytes it does not write"
    );
    assert_eq!(set.encode().ok().as_deref(), Some(data));
    for v in &set.variants {
        if LAUNCH_VARIANTS.contains(&v.variant) {
            assert!(v.launch.is_some() && v.events.events.is_empty());
            let digest = &v.policy.entries()[&0];
            assert!(!digest.warn_only && digest.value.len() == LAUNCH_DIGEST_LEN);
            continue;
        }
        assert!(v.launch.is_none());
        assert!(v.policy.check_pins_image().is_ok());
        for (pcr, value) in v.events.replay() {
            assert_eq!(v.policy.entries()[&pcr].value, value, "PCR {pcr}");
        }
    }
    assert!(set.not_before < set.not_after);
    if let Ok(opened) = open(data, &[], set.not_before) {
        assert_eq!((opened.set, opened.signer), (set, None));
    }
}

/// A reader's durable state: the history of retired sets (JSON) and the
/// time floor (decimal seconds). What reads writes back to what reads the
/// same; the bounds hold.
pub fn reference_history(data: &[u8]) {
    use confboot_appraisal::reference::history::{MAX_RETIRED, SetHistory};
    use confboot_util::floor::parse_floor;
    if let Ok(history) = SetHistory::from_json(data) {
        assert!(history.retired().count() <= MAX_RETIRED);
        let again = SetHistory::from_json(history.to_json().as_bytes())
            .expect("a history reads back what it writes");
        assert_eq!(again, history);
    }
    if let Ok(t) = parse_floor(data) {
        assert!(t >= 0);
        assert_eq!(parse_floor(format!("{t}\n").as_bytes()), Ok(t));
    }
}

/// A signed reference-value set, read with the fixture's release key: a
/// signature verifies only over a payload that key signed (the fixture's
/// sets), a set opens only then and within its window, and with no key
/// configured a signed set never opens.
pub fn reference_cose(data: &[u8]) {
    use confboot_appraisal::reference::{ReleaseKey, open, verify_signature};
    static KEY: OnceLock<ReleaseKey> = OnceLock::new();
    static SIGNED: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let key = KEY.get_or_init(|| fixtures::reference_signing_key().release_key().clone());
    let signed = SIGNED.get_or_init(|| {
        fixtures::reference_sets()
            .iter()
            .map(|s| s.to_cbor())
            .collect()
    });
    let keys = std::slice::from_ref(key);
    if let Ok((payload, kid)) = verify_signature(data, keys) {
        assert_eq!(kid, key.kid());
        assert!(
            signed.contains(&payload),
            "a signature verified over a payload the release key never signed"
        );
    }
    let now = fixtures::NOW as i64;
    if let Ok(opened) = open(data, keys, now) {
        assert_eq!(opened.signer, Some(key.kid()));
        assert!(signed.contains(&opened.set.to_cbor()));
        assert!(opened.set.check_time(now).is_ok());
    }
    if let Ok(opened) = open(data, &[], now) {
        assert_eq!(opened.signer, None);
        assert_eq!(
            opened.set.to_cbor(),
            data,
            "a signed set opened without a key"
        );
    }
}

/// A signed attestation result (EAR, an ES256 JWT) from anyone: what
/// reads was signed by the fixture key over exactly the claims the result
/// writes, is consistent, and signs again into a token that reads the same.
pub fn ear_token(data: &[u8]) {
    use confboot_appraisal::ear::{EarVerifyingKey, read};
    static KEY: OnceLock<confboot_appraisal::ear::EarSigningKey> = OnceLock::new();
    let key = KEY.get_or_init(fixtures::ear_signing_key);
    let keys: &[EarVerifyingKey] = std::slice::from_ref(key.verifying_key());
    let now = fixtures::NOW as i64;
    let Ok(result) = read(data, keys, now, i64::MAX) else {
        return;
    };
    result.check().expect("a result read is consistent");
    let payload = std::str::from_utf8(data)
        .expect("a token read is text")
        .trim_end_matches('\n')
        .split('.')
        .nth(1)
        .expect("a token read has a payload")
        .to_string();
    let claims = serde_json::to_vec(&result.to_claims()).expect("claims serialize");
    assert_eq!(
        confboot_util::base64::decode_url(&payload).expect("base64url"),
        claims,
        "a result read does not write the claims it was read from"
    );
    let again = result.sign(key).expect("a result read signs");
    assert_eq!(read(again.as_bytes(), keys, now, i64::MAX), Ok(result));
    assert!(
        read(data, &[], now, i64::MAX).is_err(),
        "read without a key"
    );
}

/// An `azure-sev-snp` policy's text: whatever the bytes, no panic; a
/// policy read pins the image twice over, the paravisor's launch (its SNP
/// part) and the kernel, initrd and command line (PCRs 4 and 9 enforced),
/// and never holds the cluster mark's PCR 15.
pub fn azure_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = confboot_azure::AzureSnpPolicy::from_json_at(text, None) else {
        return;
    };
    assert!(p.snp.pins_image() || p.snp.insecure_any_image);
    for pcr in confboot_azure::AZURE_IMAGE_PCRS {
        assert!(p.pcrs.entries().get(&pcr).is_some_and(|e| !e.warn_only));
    }
    assert!(!p.pcrs.entries().contains_key(&confboot_tpm::CLUSTER_ID_PCR));
    assert!(p.check_pins_image().is_ok());
}

/// The SEV-SNP policy JSON: what parses pins the image (or says
/// `insecureAnyImage`), names VMPL 0 to 3 and a 48-byte measurement,
/// cannot ask for KDS fetching in a build without it, and pins chips with a
/// list of 1 to `MAX_ALLOWED_CHIP_IDS` distinct ids, none all zero.
pub fn snp_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = SnpPolicy::from_json(text) else {
        return;
    };
    assert!(p.pins_image() || p.insecure_any_image);
    assert!(p.vmpl <= 3);
    let entries: Vec<_> = p.measurement.entries().iter().collect();
    assert!(matches!(entries[..], [(0, e)] if e.value.len() == 48));
    assert!(!p.kds_fetch);
    if let Some(ids) = &p.allowed_chip_ids {
        assert!(!ids.is_empty() && ids.len() <= confboot_snp::MAX_ALLOWED_CHIP_IDS);
        assert!(ids.iter().all(|id| id.iter().any(|b| *b != 0)));
        let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }
}

// ---- TDX ----

/// A raw TDX quote through every check, with no collateral, at the time
/// of the genuine quote whose attestation key it carries (the first's
/// otherwise): whatever the bytes, no panic; and when the PCK chain, the
/// QE report's signature and binding and the quote signature all pass, the
/// signed part is a genuine quote's (Intel signed the QE report that
/// binds the attestation key, and that key signed only those bytes).
pub fn tdx_quote(data: &[u8]) {
    use confboot_tdx::{Quote, TdxPolicy, TdxRoots, TdxValidator, check};
    let Ok(q) = Quote::parse(data) else {
        return;
    };
    let _ = (q.report.td_attributes(), q.report.xfam(), q.report.debug());
    let _ = (
        q.qe_report.misc_select(),
        q.qe_report.isv_svn(),
        q.trailing_len(),
    );
    static GENUINE: OnceLock<Vec<Quote>> = OnceLock::new();
    let genuine = GENUINE.get_or_init(|| {
        fixtures::TDX_QUOTES
            .iter()
            .map(|f| Quote::parse(f.quote).expect("fixture quote"))
            .collect()
    });
    let i = genuine
        .iter()
        .position(|g| g.attestation_key == q.attestation_key)
        .unwrap_or(0);
    let policy = TdxPolicy {
        insecure_any_image: true,
        ..TdxPolicy::default()
    };
    let checks = TdxValidator::with_roots(policy, TdxRoots::intel())
        .as_of(fixtures::TDX_QUOTES[i].at)
        .verify_quote_detailed(&q, &ReportDataCheck::NotChecked);
    let passed = |name: &str| {
        checks.iter().any(|c| {
            c.name == name && matches!(c.outcome, confboot_attest::check::CheckOutcome::Passed(_))
        })
    };
    if [
        check::PCK_CHAIN,
        check::QE_REPORT_SIGNATURE,
        check::QE_REPORT_DATA,
        check::QUOTE_SIGNATURE,
    ]
    .iter()
    .all(|n| passed(n))
    {
        assert!(
            genuine.iter().any(|g| g.signed_bytes() == q.signed_bytes()),
            "a quote verified whose signed part no genuine quote has"
        );
    }
}

/// The CCEL: bytes that begin with `CCEL` as the ACPI table, others as a
/// log area. A log that parses re-parses from the bytes it keeps to the
/// same log, replays to registers it then checks against, and explains no
/// difference with itself.
pub fn tdx_ccel(data: &[u8]) {
    use confboot_tdx::{CcelLog, CcelTable};
    if data.starts_with(b"CCEL") {
        if let Ok(table) = CcelTable::parse(data) {
            assert_eq!(CcelTable::parse(&table.encode()), Ok(table));
        }
        return;
    }
    let Ok(log) = CcelLog::parse(data) else {
        return;
    };
    assert_eq!(CcelLog::parse(log.as_bytes()).as_ref(), Ok(&log));
    let rtmrs = log.replay();
    assert_eq!(log.check_replay(&rtmrs), Ok(()));
    for rtmr in 0..4 {
        assert_eq!(log.explain(rtmr, &log), None);
    }
    let _ = log.lines();
}

/// TDX evidence (the quote and the CCEL log) through the production
/// validator with a test policy: whatever the bytes, no panic, and never
/// admitted (no genuine quote is bound to the fuzzer's extra data).
pub fn tdx_evidence(data: &[u8]) {
    use confboot_attest::Validator;
    use confboot_tdx::{TdxEvidence, TdxPolicy, TdxRoots, TdxValidator};
    let Ok(evidence) = TdxEvidence::decode(data) else {
        return;
    };
    assert_eq!(
        TdxEvidence::decode(&evidence.encode().expect("decoded evidence encodes")).as_ref(),
        Ok(&evidence)
    );
    let policy = TdxPolicy {
        insecure_any_image: true,
        ..TdxPolicy::default()
    };
    let validator = TdxValidator::with_roots(policy, TdxRoots::intel());
    assert!(validator.validate(data, &[0x5a; 32]).is_err());
}

/// Intel's TCB info JSON: parsed (bounded, no panic); its signature checked
/// with the built-in TCB signing certificate, which verifies only Intel's
/// documents as they are; the TCB status computed for each genuine
/// quote's platform.
pub fn tdx_tcb_info(data: &[u8]) {
    use confboot_tdx::{INTEL_SGX_TCB_SIGNING_2018_DER, IntelCert, Quote, SignedTcbInfo, TdxRoots};
    let Ok(signed) = SignedTcbInfo::parse(data) else {
        return;
    };
    let signer = IntelCert::from_der(INTEL_SGX_TCB_SIGNING_2018_DER).expect("built-in signer");
    // Only a checked TCB info has a TCB status.
    let Ok(info) = signed.verify(&signer) else {
        return;
    };
    assert!(
        fixtures::TDX_TCB_INFOS
            .iter()
            .any(|g| SignedTcbInfo::parse(g).ok().as_ref() == Some(&signed)),
        "a TCB info verified that Intel never signed"
    );
    for f in fixtures::TDX_QUOTES {
        let q = Quote::parse(f.quote).expect("fixture quote");
        let chain = TdxRoots::intel()
            .verify_pck_chain(&q.pck_chain_pem)
            .expect("fixture chain");
        let sgx = chain.leaf.sgx_extensions().expect("fixture extensions");
        let _ = info.tcb_status(&sgx, &q.report.tee_tcb_svn);
        let _ = info
            .module_for(&q.report.tee_tcb_svn)
            .map(|m| m.matches(&q.report.mr_signer_seam, &q.report.seam_attributes));
    }
}

/// Intel's QE identity JSON: parsed (bounded, no panic); its signature
/// checked with the built-in TCB signing certificate (only Intel's
/// document verifies); compared with each genuine quote's QE report.
pub fn tdx_qe_identity(data: &[u8]) {
    use confboot_tdx::{INTEL_SGX_TCB_SIGNING_2018_DER, IntelCert, Quote, SignedQeIdentity};
    let Ok(signed) = SignedQeIdentity::parse(data) else {
        return;
    };
    let signer = IntelCert::from_der(INTEL_SGX_TCB_SIGNING_2018_DER).expect("built-in signer");
    // Only a checked QE identity is compared with a QE report.
    let Ok(identity) = signed.verify(&signer) else {
        return;
    };
    assert_eq!(
        SignedQeIdentity::parse(fixtures::TDX_QE_IDENTITY)
            .ok()
            .as_ref(),
        Some(&signed),
        "a QE identity verified that Intel never signed"
    );
    for f in fixtures::TDX_QUOTES {
        let q = Quote::parse(f.quote).expect("fixture quote");
        let _ = identity.mismatches(&q.qe_report);
        let _ = identity.tcb_level(q.qe_report.isv_svn());
    }
}

/// Intel's certificates, the PCK certificate's SGX extensions and CRLs,
/// each read from the same bytes: no panic; a CRL that verifies under the
/// genuine PCK Platform CA or root is Intel's own.
pub fn tdx_certs(data: &[u8]) {
    use confboot_tdx::{
        Crl, IntelCert, Quote, SgxExtensions, TdxRoots, certificates_from_pem_or_der,
    };
    let _ = SgxExtensions::parse(data);
    if let Ok(ders) = certificates_from_pem_or_der(data) {
        for der in ders {
            if let Ok(cert) = IntelCert::from_der(&der) {
                let _ = (cert.sgx_extensions(), cert.validity(), cert.serial());
            }
        }
    }
    let Ok(crl) = Crl::parse(data) else {
        return;
    };
    static CAS: OnceLock<Vec<IntelCert>> = OnceLock::new();
    let cas = CAS.get_or_init(|| {
        let q = Quote::parse(fixtures::TDX_QUOTES[0].quote).expect("fixture quote");
        let chain = TdxRoots::intel()
            .verify_pck_chain(&q.pck_chain_pem)
            .expect("fixture chain");
        vec![chain.intermediate, chain.root]
    });
    let at = fixtures::TDX_QUOTES[0].at;
    for ca in cas {
        if crl.check(ca, at).is_ok() {
            assert!(
                fixtures::TDX_CRLS
                    .iter()
                    .any(|g| Crl::parse(g).ok().as_ref() == Some(&crl)),
                "a CRL verified that Intel never signed"
            );
        }
        let _ = crl.check_not_revoked(ca);
    }
}

/// A node's kubelet CSR as the join service checks it: what passes names a
/// valid node with 1 to 8 distinct IP addresses, and the certificate signed
/// for it carries exactly those names and server authentication only.
pub fn kubelet_csr(data: &[u8]) {
    use confboot_cluster::kubelet_cert::{KubeletCsr, MAX_KUBELET_CERT_IPS, check_node_name};
    let Ok(csr) = KubeletCsr::parse(data) else {
        return;
    };
    check_node_name(&csr.node_name).unwrap();
    assert!((1..=MAX_KUBELET_CERT_IPS).contains(&csr.ips.len()));
    let cert = fixtures::kubelet_cert_signer()
        .sign_checked(&csr, std::time::SystemTime::now())
        .unwrap();
    let (_, parsed) = x509_parser::parse_x509_certificate(&cert).unwrap();
    let cn: Vec<_> = parsed.subject().iter_common_name().collect();
    assert_eq!(cn.len(), 1);
    assert_eq!(
        cn[0].as_str().unwrap(),
        format!("system:node:{}", csr.node_name)
    );
    let san = parsed.subject_alternative_name().unwrap().unwrap();
    assert_eq!(san.value.general_names.len(), csr.ips.len());
    assert!(!parsed.is_ca());
}

/// The admin's SSH users configuration: what parses is bounded, every name
/// is a portable user name, every key one line that parses back the same,
/// and the list written back as a configuration parses to the same users,
/// also as a node keeps it on its state disk (`ssh_users_config`, which
/// `read_stored_ssh_users` reads back with the same parser).
pub fn ssh_users_config(data: &[u8]) {
    use confboot_sys::ssh_users::{
        AuthorizedKey, MAX_SSH_USERS, parse_ssh_users_config, ssh_users_config,
    };
    let Ok(users) = parse_ssh_users_config(data) else {
        return;
    };
    assert!(users.len() <= MAX_SSH_USERS);
    let mut entries = Vec::new();
    for u in &users {
        let name = u.name.as_str();
        assert!(!name.is_empty() && name.len() <= 32);
        assert!(!name.contains([':', '/', '\n']));
        let line = u.key.to_line();
        assert_eq!(line.matches('\n').count(), 1);
        assert_eq!(AuthorizedKey::parse(line.trim_end()).as_ref(), Ok(&u.key));
        entries.push(serde_json::json!({"username": name, "publicKey": line.trim_end()}));
    }
    let again = serde_json::json!({ "sshUsers": entries }).to_string();
    assert_eq!(parse_ssh_users_config(again.as_bytes()).unwrap(), users);
    let kept = ssh_users_config(&users);
    assert_eq!(parse_ssh_users_config(kept.as_bytes()).unwrap(), users);
}

/// The disk key the `vpn_own_record` target proves records with.
pub const VPN_OWN_RECORD_DISK_KEY: [u8; 32] = [0x42; 32];

/// A member's `vpn.API/GetUpdate` request as joinsvc reads it: the own
/// record's proof verifies exactly when it is the proof the disk key makes
/// over the record's fields, a verified record is the same record made
/// again, and the field checks joinsvc applies never panic.
pub fn vpn_own_record(data: &[u8]) {
    use confboot_proto::vpn::GetUpdateRequest;
    use confboot_vpn::{OwnRecordKey, VpnPublicKey, check_peer_name, parse_public_endpoint};
    let Ok(request) = GetUpdateRequest::decode(data) else {
        return;
    };
    let Some(own) = request.own else {
        return;
    };
    let key = OwnRecordKey::from_disk_key(&VPN_OWN_RECORD_DISK_KEY);
    let verified = key.verify(&own);
    if let Some(peer) = &own.peer {
        let _ = check_peer_name(&peer.name);
        let _ = parse_public_endpoint(&peer.public_endpoint);
        if let Ok(public) = VpnPublicKey::from_bytes(&peer.vpn_pub_key) {
            let again = key.record(&peer.name, &peer.public_endpoint, &public, &own.disk_uuid);
            assert_eq!(verified, again.proof == own.proof);
        }
    } else {
        assert!(!verified);
    }
}

/// The VPN range the `vpn_update` target checks peers against.
pub const VPN_UPDATE_NETWORK: &str = "10.118.0.0/16";

/// The master secret of the control-plane role key the `vpn_update`
/// target checks signatures with (its salt is the same bytes).
pub const VPN_UPDATE_MASTER_SECRET: [u8; 32] = [0x5a; 32];

/// The session binding and request the `vpn_update` target checks
/// signatures for: a session of these bytes, a request from version 1.
pub const VPN_UPDATE_SESSION: [u8; 32] = [0x3c; 32];

/// A control plane's peer update as a node checks it (`vpn.API/GetUpdate`
/// response): its signature verifies with the role key for the session
/// and request exactly when it is the signature the role key makes
/// (Ed25519 signs deterministically); over a node that already holds a
/// good list, an answer is either taken whole (bounded, every peer valid
/// and inside the range, no two sharing a name, address or key, and the
/// list written back reads the same) or refused; checking leaves the
/// node's version and list as they were.
pub fn vpn_update(data: &[u8]) {
    use confboot_cluster::role::ControlPlaneKey;
    use confboot_proto::GET_UPDATE;
    use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse, Peer};
    use confboot_vpn::{MAX_PEERS, PeerList, PeerUpdates, VpnNetwork};
    let Ok(response) = GetUpdateResponse::decode(data) else {
        return;
    };
    let role = ControlPlaneKey::derive(
        &confboot_kms::MasterSecret::new(
            VPN_UPDATE_MASTER_SECRET.to_vec(),
            VPN_UPDATE_MASTER_SECRET.to_vec(),
        )
        .unwrap(),
    );
    let request = GetUpdateRequest {
        resource_version: 1,
        own: None,
    };
    let verified = role
        .public_key()
        .verify_answer(GET_UPDATE, &VPN_UPDATE_SESSION, &request, &response)
        .is_ok();
    let mut signed = response.clone();
    role.sign_answer(GET_UPDATE, &VPN_UPDATE_SESSION, &request, &mut signed);
    assert_eq!(verified, signed.signature == response.signature);
    let network: VpnNetwork = VPN_UPDATE_NETWORK.parse().unwrap();
    let mut updates = PeerUpdates::new(network);
    let good = GetUpdateResponse {
        resource_version: 1,
        peers: vec![Peer {
            name: "control-plane-0".into(),
            public_endpoint: "192.0.2.1:51820".into(),
            vpn_ip: "10.118.0.1".into(),
            vpn_pub_key: vec![1; 32],
        }],
        signature: Vec::new(),
    };
    let first = updates.check(&good).unwrap().unwrap();
    updates.commit(good.resource_version, first);
    let before = updates.peers().clone();
    match updates.check(&response) {
        Ok(None) => assert_eq!(response.resource_version, 1),
        Ok(Some(list)) => {
            assert_ne!(response.resource_version, 1);
            assert!(list.peers().len() <= MAX_PEERS);
            assert_eq!(list.peers().len(), response.peers.len());
            assert_eq!(list.vpn_ips().len(), list.peers().len());
            for p in list.peers() {
                assert!(network.is_host(p.vpn_ip));
                assert_ne!(p.public_endpoint.port(), 0);
            }
            assert_eq!(
                PeerList::from_update(&list.to_wire(), &network).unwrap(),
                list
            );
        }
        Err(_) => {}
    }
    // Checking never changes what the node has.
    assert_eq!(updates.resource_version(), 1);
    assert_eq!(updates.peers(), &before);
}

/// A DHCP reply from the network (the node's PID 1 parses OFFER/ACK/NAK
/// before it has an address): what parses is a server's message type, and
/// the parser never looks past [`confboot_sys::dhcp::MAX_MESSAGE_LEN`] bytes.
pub fn dhcp_reply(data: &[u8]) {
    use confboot_sys::dhcp::{DhcpMessageType, DhcpReply, MAX_MESSAGE_LEN, prefix_len};
    if let Ok(r) = DhcpReply::parse(data) {
        assert!(matches!(
            r.kind,
            DhcpMessageType::Offer | DhcpMessageType::Ack | DhcpMessageType::Nak
        ));
        if let Some(m) = r.netmask {
            let _ = prefix_len(m);
        }
        if data.len() > MAX_MESSAGE_LEN {
            assert_eq!(DhcpReply::parse(&data[..MAX_MESSAGE_LEN]), Ok(r));
        }
    }
}

/// What the kernel answers on a netlink socket (a host that controls the
/// guest's kernel could lie): a datagram collected as the answer to a
/// request, then each message body read as a WireGuard device dump, a
/// generic netlink family answer and a link; and the input itself as each
/// of those bodies. Nothing read exceeds its bound.
pub fn netlink_reply(data: &[u8]) {
    use confboot_sys::netlink::{MAX_REPLY_BYTES, NetlinkReply, parse_family_id, parse_link};
    use confboot_vpn::{MAX_ALLOWED_IPS_PER_PEER, MAX_DEVICE_PEERS, parse_device};
    let check_device = |bodies: Vec<&[u8]>| {
        if let Ok(d) = parse_device(bodies) {
            assert!(d.index != 0);
            assert!(d.peers.len() <= MAX_DEVICE_PEERS);
            assert!(d.peers.iter().all(|p| {
                p.allowed_ips.len() <= MAX_ALLOWED_IPS_PER_PEER
                    && p.allowed_ips
                        .iter()
                        .all(|a| a.prefix <= if a.address.is_ipv4() { 32 } else { 128 })
            }));
        }
    };
    let mut reply = NetlinkReply::new(1);
    let _ = reply.take(data);
    let bodies: Vec<&[u8]> = reply.bodies().map(|(_, b)| b).collect();
    assert!(bodies.iter().map(|b| b.len()).sum::<usize>() <= MAX_REPLY_BYTES.min(data.len()));
    for b in &bodies {
        let _ = parse_family_id(b, "wireguard");
        let _ = parse_link(b);
    }
    check_device(bodies);
    if let Ok(id) = parse_family_id(data, "wireguard") {
        assert!(id > 0x10);
    }
    if let Ok(link) = parse_link(data) {
        assert!(link.name.len() < data.len());
    }
    check_device(vec![data]);
}

/// The kms and storage URIs of Init and Recover: a master secret read from
/// a URI has usable lengths and writes back to a URI that reads the same;
/// the only storage URI is `storage://no-store`.
pub fn kms_uri(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = MasterSecret::from_kms_uri(text) {
        assert!(m.key().expose().len() >= MIN_MASTER_SECRET_LEN);
        assert!(m.salt().expose().len() >= MIN_SALT_LEN);
        assert_eq!(MasterSecret::from_kms_uri(&m.to_kms_uri()).as_ref(), Ok(&m));
    }
    if StorageUri::parse(text).is_ok() {
        assert_eq!(text, "storage://no-store");
    }
}

/// The init-secret hash a node is configured with: what parses has the
/// `pbkdf2-sha256$N$salt$hash` shape with N within bounds. (Verifying runs
/// at least 10 000 PBKDF2 rounds, too slow to fuzz; the shape is what the
/// configuration controls.)
pub fn init_secret_hash(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if InitSecretHash::parse(text).is_ok() {
        let parts: Vec<&str> = text.trim().split('$').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], "pbkdf2-sha256");
        let n: u32 = parts[1].parse().expect("iterations");
        assert!((MIN_ITERATIONS..=MAX_ITERATIONS).contains(&n));
    }
}

/// The admin's master-secret file: what parses writes back to a file that
/// reads the same.
pub fn master_secret_file(data: &[u8]) {
    let path = Path::new("master-secret.json");
    if let Ok(m) = MasterSecret::from_file_bytes(data, path) {
        let again = MasterSecret::from_file_bytes(m.to_file_text().as_bytes(), path);
        assert_eq!(again.ok().as_ref(), Some(&m), "the file does not read back");
    }
}

/// A disk backend whose header metadata is the fuzz input; it changes
/// nothing.
struct MetadataDisk(HeaderMetadata);

impl DiskBackend for MetadataDisk {
    fn inspect(&self) -> Result<DiskState, DiskError> {
        Ok(DiskState::Luks {
            uuid: "0a1b2c3d-0000-4000-8000-000000000001".into(),
        })
    }
    fn format(&mut self, _: &str, _: &SecretBytes) -> Result<(), DiskError> {
        Err(DiskError::Config("read-only".into()))
    }
    fn open(&mut self, _: &SecretBytes) -> Result<(), DiskError> {
        Err(DiskError::Config("read-only".into()))
    }
    fn check_key(&self, _: &SecretBytes) -> Result<(), DiskError> {
        Err(DiskError::WrongKey)
    }
    fn describe(&self) -> String {
        "fuzzed header".into()
    }
    fn store_measurement_salt(&mut self, _: &[u8]) -> Result<(), DiskError> {
        Err(DiskError::Config("read-only".into()))
    }
    fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
        self.0.measurement_salt()
    }
    fn record_filesystem(&mut self, _: &str) -> Result<(), DiskError> {
        Err(DiskError::Config("read-only".into()))
    }
    fn filesystem(&self) -> Result<Option<String>, DiskError> {
        self.0.filesystem()
    }
    fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
        Err(DiskError::Config("read-only".into()))
    }
    fn bootstrapped(&self) -> Result<bool, DiskError> {
        self.0.bootstrapped()
    }
}

/// What a LUKS2 header tells the node, as cryptsetup prints it: the UUID
/// (`luksUUID`) and the JSON metadata with confboot's tokens (`luksDump
/// --dump-json-metadata`), read through the state disk. A UUID is taken
/// only canonical and lowercase; a salt only of a length a header may keep,
/// exactly as its one token says; a first boot is complete only if its one
/// token says `"complete": true`.
pub fn luks2_metadata(data: &[u8]) {
    if let Ok(uuid) = parse_luks_uuid(data) {
        assert!(is_uuid(&uuid) && uuid == uuid.to_ascii_lowercase());
    }
    let Ok(meta) = HeaderMetadata::parse(data) else {
        return;
    };
    let disk = StateDisk::new(MetadataDisk(meta.clone()));
    if let Ok(salt) = disk.measurement_salt() {
        assert!(MEASUREMENT_SALT_LEN.contains(&salt.as_bytes().len()));
        let (_, token) = meta
            .token(SALT_TOKEN_TYPE)
            .ok()
            .flatten()
            .expect("a salt from no token");
        let hex = token["salt"].as_str().expect("a salt that is no string");
        assert_eq!(confboot_util::hex::decode(hex).ok(), Some(salt.to_vec()));
    }
    if disk.bootstrapped() == Ok(true) {
        let (_, token) = meta
            .token(BOOTSTRAPPED_TOKEN_TYPE)
            .ok()
            .flatten()
            .expect("complete without a token");
        assert_eq!(token["complete"], serde_json::Value::Bool(true));
    }
    if let Ok(Some(fs)) = disk.backend().filesystem() {
        assert!(fs.len() <= data.len());
    }
}

/// A device-mapper ioctl buffer as the kernel leaves it: the reply header
/// is read with every size and offset bounded by the buffer, the version
/// checked and the name printable, or refused; read as a table status
/// reply, at most a bounded number of targets whose lines lie inside the
/// data the kernel reports and are printable.
pub fn dm_reply(data: &[u8]) {
    use confboot_disk::dm::wire::{
        DM_IOCTL_DATA, MAX_TABLE_TARGETS, NAME_LEN, Reply, table_targets,
    };
    if let Ok(targets) = table_targets(data) {
        assert!(targets.len() <= MAX_TABLE_TARGETS as usize);
        for t in &targets {
            assert!(t.params.len() < data.len());
            assert!(t.params.bytes().all(|b| b == b' ' || b.is_ascii_graphic()));
        }
    }
    let Ok(reply) = Reply::parse(data) else {
        return;
    };
    let within = DM_IOCTL_DATA..=data.len();
    assert!(within.contains(&(reply.data_size as usize)));
    assert!(within.contains(&(reply.data_start as usize)));
    assert_eq!(reply.version[0], 4);
    assert!(reply.name.len() < NAME_LEN);
    assert!(reply.name.bytes().all(|b| b.is_ascii_graphic()));
}

/// A veritysetup superblock as the host may have rewritten it: parsed
/// with every field checked, or refused; what is read writes back to
/// bytes that read the same.
pub fn verity_superblock(data: &[u8]) {
    use confboot_disk::verity::{MAX_BLOCK_SIZE, MAX_SALT_LEN, MIN_BLOCK_SIZE, Superblock};
    let Ok(sb) = Superblock::parse(data) else {
        return;
    };
    assert!(sb.salt.len() <= MAX_SALT_LEN);
    for size in [sb.data_block_size, sb.hash_block_size] {
        assert!((MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&size) && size.is_power_of_two());
    }
    assert!(sb.data_blocks > 0);
    let bytes = sb.encode();
    assert_eq!(Superblock::parse(&bytes).as_ref(), Ok(&sb));
    // Everything but the padding (not read) comes back as it was.
    assert_eq!(bytes[..82], data[..82]);
    assert_eq!(bytes[88..88 + sb.salt.len()], data[88..88 + sb.salt.len()]);
}

/// A kernel command line with `confboot.root*` words: parameters come out
/// only checked, write back to words that read the same, and a line that
/// carries them twice is refused.
pub fn verity_cmdline(data: &[u8]) {
    use confboot_disk::verity::VerityParams;
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(Some(params)) = VerityParams::from_cmdline(line) else {
        return;
    };
    params.validate().expect("parsed parameters are valid");
    let words = params.cmdline_words();
    assert_eq!(VerityParams::from_cmdline(&words), Ok(Some(params)));
    assert!(VerityParams::from_cmdline(&format!("{words} {words}")).is_err());
}

/// A device for [`luks2_header`]: the input at its start, zeros after it,
/// [`LUKS2_DEVICE_SIZE`] bytes in all (without allocating them).
struct ZeroPadded<'a> {
    data: &'a [u8],
    len: u64,
    pos: u64,
}

/// The size of [`luks2_header`]'s device: room for cryptsetup's default
/// layout (16 MiB of headers and key slots) and a little data.
pub const LUKS2_DEVICE_SIZE: u64 = (16 << 20) + (1 << 20);

impl std::io::Read for ZeroPadded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.len.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        let from_data = usize::try_from(self.pos)
            .ok()
            .and_then(|at| self.data.get(at..))
            .unwrap_or_default();
        let copied = from_data.len().min(n);
        buf[..copied].copy_from_slice(&from_data[..copied]);
        buf[copied..n].fill(0);
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for ZeroPadded<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.pos = match to {
            std::io::SeekFrom::Start(p) => p,
            std::io::SeekFrom::End(d) => self.len.saturating_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.saturating_add_signed(d),
        };
        Ok(self.pos)
    }
}

/// The passphrase [`luks2_header`] unlocks with (its seeds were formatted
/// with it).
pub const LUKS2_FUZZ_PASSPHRASE: &[u8] = b"fuzz-passphrase";

/// A LUKS2 device whose first bytes are the input (a header as the host
/// may write it), read by the pure-Rust LUKS2: what parses has a UUID, at
/// most 32 key slots, segments, digests and tokens, key-slot areas inside
/// the device and the key-slot region; its primary copy written back
/// reads back the same; unlocking with a fixed passphrase under tiny cost
/// limits ends in a key of the slot's size or an error, never a panic,
/// and never runs a KDF above the limits.
pub fn luks2_header(data: &[u8]) {
    let _ = luks2_header_outcome(data);
    // The same input with the primary's checksum made right (as the host
    // can): mutations then reach the JSON checks, not only the checksum.
    if let Some(fixed) = luks2_with_checksum(data) {
        let _ = luks2_header_outcome(&fixed);
    }
}

/// `data` zero-padded to a 16 KiB primary header area with its checksum
/// recomputed, if it starts with a primary binary header of that size.
pub fn luks2_with_checksum(data: &[u8]) -> Option<Vec<u8>> {
    use confboot_disk::luks2::{HeaderCopy, binary};
    const SIZE: usize = 16 << 10;
    if binary::announced_size(data, HeaderCopy::Primary) != Ok(SIZE as u64) || data.len() > SIZE {
        return None;
    }
    let mut area = data.to_vec();
    area.resize(SIZE, 0);
    let sum = binary::checksum(&area);
    area[448..480].copy_from_slice(&sum);
    Some(area)
}

/// What [`luks2_header`] made of `data`: `None` if no header copy is
/// valid, else the unlock's outcome (the volume key's length, or why not),
/// after the target's checks.
pub fn luks2_header_outcome(
    data: &[u8],
) -> Option<Result<usize, confboot_disk::luks2::Luks2Error>> {
    use confboot_disk::luks2::{
        HeaderCopy, KdfLimits, Luks2Error, binary, header, metadata, unlock,
    };
    let mut dev = ZeroPadded {
        data,
        len: LUKS2_DEVICE_SIZE,
        pos: 0,
    };
    let Ok((h, _health)) = header::read(&mut dev) else {
        return None;
    };
    assert!(is_uuid(&h.binary.uuid));
    let m = &h.metadata;
    for count in [
        m.keyslots.len(),
        m.segments.len(),
        m.digests.len(),
        m.tokens().len(),
    ] {
        assert!(count <= metadata::MAX_ENTRIES);
    }
    let region = 2 * h.binary.hdr_size..2 * h.binary.hdr_size + m.keyslots_size;
    for k in &m.keyslots {
        assert!(region.start <= k.area_offset && k.area_offset + k.area_size <= region.end);
        assert!(k.area_offset + k.area_size <= LUKS2_DEVICE_SIZE);
        assert!(k.material_len() as u64 <= k.area_size);
    }
    let json = m.to_text();
    if json.len() < h.binary.hdr_size as usize - binary::BINARY_SIZE {
        let area = binary::serialize(&h.binary, json.as_bytes(), &[0; 64], HeaderCopy::Primary, 0)
            .expect("a parsed header's size is held");
        let again = binary::parse(&area, HeaderCopy::Primary, 0).expect("our copy parses");
        assert_eq!(again, h.binary);
        let meta = metadata::Metadata::parse(
            &area[binary::BINARY_SIZE..],
            again.hdr_size,
            LUKS2_DEVICE_SIZE,
        )
        .expect("our JSON parses");
        assert_eq!(&meta, m);
    }
    // What a node opens: only its own header, or a refusal naming a field
    // with a short, printable quote of what the host wrote there.
    let node = confboot_disk::luks2::FormatOptions::default();
    match confboot_disk::luks2::ExpectedHeader::written_with(&node).check(&h) {
        Ok(()) => {
            let [segment] = m.segments.as_slice() else {
                panic!("a node's header with {} data segments", m.segments.len())
            };
            assert_eq!(
                (segment.offset, segment.size, segment.iv_tweak),
                (confboot_disk::luks2::format::DATA_OFFSET, None, 0)
            );
            assert_eq!(
                (segment.encryption.as_str(), segment.sector_size),
                ("aes-xts-plain64", node.sector_size)
            );
            let [slot] = m.keyslots.as_slice() else {
                panic!("a node's header with {} key slots", m.keyslots.len())
            };
            assert!(matches!(
                slot.kdf,
                confboot_disk::luks2::kdf::Kdf::Pbkdf2 {
                    iterations: 1000,
                    ..
                }
            ));
            assert!(m.requirements.is_empty() && m.digests.len() == 1);
        }
        Err(Luks2Error::NotAsWritten { field, found, .. }) => {
            assert!(!field.is_empty() && found.chars().count() <= 41, "{found}");
            assert!(!found.chars().any(char::is_control), "{found:?}");
        }
        Err(other) => panic!("a check that is no refusal by name: {other:?}"),
    }
    let limits = KdfLimits {
        pbkdf2_iterations: 2000,
        argon2_time: 4,
        argon2_memory_kib: 1024,
        argon2_cpus: 4,
        keyslot_attempts: 2,
    };
    let outcome = unlock::unlock(&mut dev, &h, LUKS2_FUZZ_PASSPHRASE, &limits).map(|k| k.len());
    match &outcome {
        Ok(len) => assert!(m.keyslots.iter().any(|k| k.key_size == *len)),
        Err(Luks2Error::CostTooHigh { value, limit, .. }) => assert!(value > limit),
        Err(_) => {}
    }
    Some(outcome)
}

// ---- Firmware ----

/// The TCG event log a node's firmware leaves (crypto-agile; the host's
/// firmware writes it): what parses has at most [`MAX_EVENTS`] events, each
/// on a PCR 0 to 23; every description is at most 64 printable characters;
/// replaying it gives a value only for PCRs an extending event names; its
/// event list writes to JSON that reads back the same and replays the same
/// (from locality 0).
pub fn tpm_event_log(data: &[u8]) {
    let Ok(log) = EventLog::parse(data) else {
        return;
    };
    assert!(log.events().len() <= MAX_EVENTS);
    for e in log.events() {
        assert!((e.pcr as usize) < confboot_tpm::structures::PCR_COUNT);
        let d = e.description();
        assert!(
            d.chars().count() <= 64 && !d.chars().any(char::is_control),
            "{d:?}"
        );
        let _ = e.type_name();
    }
    let replayed = log.replay();
    for pcr in replayed.keys() {
        assert!(log.events().iter().any(|e| e.pcr == *pcr && e.extends()));
    }
    let list = log.to_event_list();
    assert_eq!(
        EventList::from_json(&list.to_json()).as_ref(),
        Ok(&list),
        "the event list does not read back"
    );
    if log.startup_locality() == 0 {
        assert_eq!(list.replay(), replayed);
    }
}

/// An expected event list (JSON; a verifier's configuration): what parses
/// has PCRs 0 to 23, writes back to JSON that reads the same, and explains
/// every PCR against itself (nothing) and against an empty list.
pub fn tpm_event_list(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(list) = EventList::from_json(text) else {
        return;
    };
    assert!(list.events.len() <= MAX_EVENTS);
    assert_eq!(
        EventList::from_json(&list.to_json()).as_ref(),
        Ok(&list),
        "the event list does not read back"
    );
    let empty = EventList::default();
    for pcr in list.replay().keys() {
        assert!((*pcr as usize) < confboot_tpm::structures::PCR_COUNT);
        assert_eq!(list.explain(*pcr, &list), None);
        assert!(list.explain(*pcr, &empty).is_some());
        assert!(empty.explain(*pcr, &list).is_some());
    }
}

// ---- Boot prediction ----

/// A firmware file given to `confboot measure --variant sev-snp` (an
/// admin's input, which may come from anywhere), its end as the input's
/// end, padded in front to whole pages: the footer table, the reset block
/// and the SEV metadata never panic or read out of bounds, and a firmware
/// that parses gives one launch digest per launch, refuses a direct boot
/// exactly when it has no kernel hashes section, and moves the digest with
/// the vCPU count.
pub fn ovmf_firmware(data: &[u8]) {
    use confboot_measure::snp::{KernelHashes, PAGE_LEN, SnpFirmware, SnpLaunch, SnpMeasureError};
    let pages = data.len().div_ceil(PAGE_LEN).max(1);
    let mut fw = vec![0u8; pages * PAGE_LEN];
    let pad = fw.len() - data.len();
    fw[pad..].copy_from_slice(data);
    let Ok(firmware) = SnpFirmware::parse(fw) else {
        return;
    };
    let hashes = KernelHashes::of(b"kernel", Some(b"initrd"), "console=ttyS0");
    let launch = |hashes: Option<KernelHashes>, vcpus: u32| {
        SnpLaunch {
            firmware: &firmware,
            hashes,
            vcpus,
            vcpu_signature: 0x00a0_0f11,
            guest_features: 1,
        }
        .launch_digest()
    };
    let one = launch(None, 1).expect("a parsed firmware measures alone");
    assert_eq!(Ok(one), launch(None, 1), "the digest is a function");
    assert_ne!(Ok(one), launch(None, 2), "each vCPU is measured");
    match launch(Some(hashes), 1) {
        Err(SnpMeasureError::NoKernelHashesSection) => assert!(!firmware.has_kernel_hashes()),
        Err(SnpMeasureError::HashesTableOutside(_)) => assert!(firmware.has_kernel_hashes()),
        Err(e) => panic!("a direct boot refused for {e}"),
        Ok(direct) => {
            assert!(firmware.has_kernel_hashes());
            assert_ne!(direct, one, "the hashes page is measured");
        }
    }
}

/// A kernel file given to `confboot measure` (an admin's input, which may
/// come from anywhere): the setup header QEMU patches and the Authenticode
/// digest never panic, and the same bytes predict the same events, PCRs 3,
/// 4, 5, 6 and 9 each, the initrd last in PCR 9.
pub fn kernel_image(data: &[u8]) {
    use confboot_measure::authenticode::authenticode_sha256;
    use confboot_measure::{DirectBoot, InitrdDigest};
    let first = authenticode_sha256(data);
    assert_eq!(
        first,
        authenticode_sha256(data),
        "Authenticode is a function"
    );
    let boot = DirectBoot {
        kernel: data,
        initrd: Some(InitrdDigest::of(b"an initrd")),
        cmdline: "console=ttyS0 quiet",
        memory_mib: 1024,
    };
    let Ok(events) = boot.predict() else {
        return;
    };
    assert_eq!(
        boot.predict().as_ref(),
        Ok(&events),
        "the prediction is a function"
    );
    let pcrs: Vec<u32> = events.replay().keys().copied().collect();
    assert_eq!(pcrs, [3, 4, 5, 6, 9]);
    let last_in_9 = events.events.iter().rev().find(|e| e.pcr == 9);
    assert_eq!(
        last_in_9.map(|e| e.sha256),
        Some(InitrdDigest::of(b"an initrd").sha256)
    );
}

// ---- The verify service ----

/// What a verify service sends `confboot verify` after the handshake (the
/// node's attestation frame, read as the admin's client reads it), and
/// `confboot verify`'s check of it against the fixture AK (pinned), a
/// policy, an expected event list and a cluster id. A report comes only
/// for a quote the fixture AK signed, bound to the session's
/// `extra_data`; every report has the cluster's mark as its PCR 15 row.
pub fn verify_document(data: &[u8]) {
    use confboot_verifier::verify::{AttestationDocument, check_node};
    use confboot_vtpm::{AkTrust, VtpmValidator};

    let f = fixtures::vtpm();
    static CHECK: OnceLock<(VtpmValidator, MeasurementPolicy, EventList)> = OnceLock::new();
    let (validator, policy, events) = CHECK.get_or_init(|| {
        let mut policy = MeasurementPolicy::new(Default::default());
        policy.set(POLICY_PCR, vec![POLICY_PCR as u8; 32], false);
        policy.set(0, vec![0; 32], true);
        let events = EventLog::parse(&fixtures::event_log())
            .expect("fixture event log")
            .to_event_list();
        let validator = VtpmValidator::new(
            AkTrust::Pinned(vec![f.ak_point.clone()]),
            MeasurementPolicy::new(Default::default()),
        )
        .require_unmarked(false);
        (validator, policy, events)
    });
    let Ok(message) = confboot_atls::message::read(&mut &data[..]) else {
        return;
    };
    let extra = fixtures::session_extra(message.sealing_key.as_ref());
    let Some((variant, evidence)) = message.evidence else {
        return;
    };
    let doc = AttestationDocument { variant, evidence };
    let Ok(report) = check_node(
        &doc,
        &extra,
        validator,
        policy,
        Some(events),
        b"fixture cluster",
    ) else {
        return;
    };
    let e = QuoteEvidence::decode(doc.evidence.as_slice()).expect("checked evidence decodes");
    assert!(
        f.signed_attests.contains(&e.attest),
        "a report for a quote the AK never signed"
    );
    assert!(
        e.attest.windows(32).any(|w| w == extra),
        "a report for a quote bound to another session"
    );
    let pcr15 = report
        .rows
        .iter()
        .find(|r| r.pcr == CLUSTER_ID_PCR)
        .expect("PCR 15 is always a row");
    assert_eq!(pcr15.expected, marked_pcr15(b"fixture cluster").to_vec());
    let _ = report.to_json();
}

/// The cluster step's parameters (`cluster-step.json`) a node's OS reads
/// from the handoff directory: nothing over the limit parses, and what
/// parses writes back to what parses the same.
pub fn cluster_handoff(data: &[u8]) {
    use confboot_cluster::handoff::{MAX_STEP_FILE_BYTES, StepDocument};
    if let Ok(doc) = StepDocument::parse(data) {
        assert!(data.len() as u64 <= MAX_STEP_FILE_BYTES);
        assert_eq!(StepDocument::parse(&doc.to_json()), Ok(doc));
    }
}

// ---- joinsvc's registry ConfigMap ----

/// The VPN range the registry targets check peers against.
pub const REGISTRY_NETWORK: &str = "10.118.0.0/16";

/// joinsvc's registry ConfigMap as the API server returns it (any writer
/// with access to the object may have written it): what parses is bounded
/// (peers, removed disks, pending joins, generations), every disk is a
/// UUID, every bound or pending name is a peer's, and what joinsvc writes
/// for it reads back the same. Without a VPN range, a registry that holds
/// peers is refused.
pub fn registry_configmap(data: &[u8]) {
    use joinsvc::configmap::{MAX_REMOVED_DISKS, Written, data_json, parse_stored};
    use joinsvc::ledger::{MAX_DISK_GENERATIONS, MAX_PENDING_JOINS};
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let network: confboot_vpn::VpnNetwork = REGISTRY_NETWORK.parse().unwrap();
    if let Ok(stored) = parse_stored(body, None) {
        assert!(stored.peers.peers().is_empty());
    }
    let Ok(stored) = parse_stored(body, Some(&network)) else {
        return;
    };
    assert!(stored.peers.peers().len() <= confboot_vpn::MAX_PEERS);
    assert!(stored.removed.len() <= MAX_REMOVED_DISKS);
    assert!(stored.ledger.pending.len() <= MAX_PENDING_JOINS);
    assert!(stored.ledger.generations.len() <= MAX_DISK_GENERATIONS);
    let disks = stored
        .disks
        .values()
        .chain(&stored.removed)
        .chain(stored.ledger.pending.keys())
        .chain(stored.ledger.generations.keys());
    for disk in disks {
        assert!(confboot_kms::is_uuid(disk), "{disk:?}");
    }
    for name in stored.disks.keys().chain(stored.pending_peers.keys()) {
        assert!(stored.peers.get(name).is_some(), "{name:?}");
    }
    let written = Written {
        list: &stored.peers,
        disks: &stored.disks,
        removed: &stored.removed,
        pending_peers: &stored.pending_peers,
        ledger: &stored.ledger,
    };
    let again = serde_json::json!({
        "metadata": {"resourceVersion": stored.resource_version},
        "data": data_json(stored.version, &written),
    })
    .to_string();
    // A filter an older joinsvc kept here is read, and never written back.
    let mut without_legacy = stored.clone();
    without_legacy.legacy_filter = Default::default();
    assert_eq!(
        parse_stored(&again, Some(&network)).unwrap(),
        without_legacy
    );
}

/// The ledger's parts of a registry ConfigMap's `data` (pending joins and
/// disk generations; the filter of issued tickets, which has an object of
/// its own): what parses is bounded, its disks are UUIDs, a filter is
/// empty or exactly its size, and what joinsvc writes for each reads back
/// the same.
pub fn registry_ledger(data: &[u8]) {
    use joinsvc::configmap::{
        MAX_CONFIGMAP_BYTES, Written, data_json, filter_data_json, parse_filter_data, parse_ledger,
    };
    use joinsvc::ledger::{FILTER_BITS, MAX_DISK_GENERATIONS, MAX_PENDING_JOINS};
    if data.len() as u64 > MAX_CONFIGMAP_BYTES {
        return;
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(filter) = parse_filter_data(&value) {
        let bits = filter.bits().len();
        assert!(bits == 0 || bits == FILTER_BITS / 8, "{bits}");
        assert_eq!(
            parse_filter_data(&filter_data_json(&filter)).unwrap(),
            filter
        );
    }
    let Ok(ledger) = parse_ledger(&value) else {
        return;
    };
    assert!(ledger.pending.len() <= MAX_PENDING_JOINS);
    assert!(ledger.generations.len() <= MAX_DISK_GENERATIONS);
    for disk in ledger.pending.keys().chain(ledger.generations.keys()) {
        assert!(confboot_kms::is_uuid(disk), "{disk:?}");
    }
    assert!(ledger.issued.bits().is_empty());
    let written = Written {
        list: &confboot_vpn::PeerList::default(),
        disks: &Default::default(),
        removed: &[],
        pending_peers: &Default::default(),
        ledger: &ledger,
    };
    assert_eq!(parse_ledger(&data_json(0, &written)).unwrap(), ledger);
}

// ---- Azure ----

/// The recorded Azure SEV-SNP sample (HCL report, vTPM quote, VCEK chain).
const AZURE_HCL_REPORT: &[u8] =
    include_bytes!("../../crates/azure/testdata/azure-snp/hcl-report.bin");
const AZURE_TPM_QUOTE: &[u8] =
    include_bytes!("../../crates/azure/testdata/azure-snp/tpm-quote-v1.json");
const AZURE_VCEK: &[u8] = include_bytes!("../../crates/azure/testdata/azure-snp/vcek.pem");

/// A validator of the recorded sample: its measurement, PCRs 4 and 9, the
/// built-in AMD roots, at 2026-12-01; and the sample's quote and VCEK chain.
fn azure_fixture() -> &'static (
    confboot_azure::AzureValidator,
    confboot_azure::AzureEvidence,
) {
    static F: OnceLock<(
        confboot_azure::AzureValidator,
        confboot_azure::AzureEvidence,
    )> = OnceLock::new();
    F.get_or_init(|| {
        let quote = confboot_azure::TpmQuote::from_json(AZURE_TPM_QUOTE).expect("recorded quote");
        let mut pcrs = MeasurementPolicy::default();
        for i in [4u32, 9] {
            pcrs.set(i, quote.pcrs[i as usize].to_vec(), false);
        }
        let mut policy = SnpPolicy::default();
        policy.measurement.set(
            0,
            AZURE_HCL_REPORT[0x20 + 0x90..0x20 + 0xC0].to_vec(),
            false,
        );
        let snp = confboot_snp::SnpValidator::with_roots(policy, TrustRoots::builtin())
            .as_of(1_796_083_200);
        let validator = confboot_azure::AzureValidator::new(
            confboot_azure::Hardware::SevSnp(Box::new(snp)),
            pcrs,
        );
        let evidence = confboot_azure::AzureEvidence {
            hcl_report: AZURE_HCL_REPORT.to_vec(),
            tpm_quote: quote,
            vcek_chain: certificates_from_pem_or_der(AZURE_VCEK).expect("recorded chain"),
            td_quote: None,
        };
        (validator, evidence)
    })
}

/// An HCL report: its layout parsed (every size within the bytes), its
/// runtime claims and attestation key read, and, with the recorded
/// sample's quote and VCEK, verified: admitted only if its signed SNP
/// report and its runtime claims are the recorded ones.
pub fn azure_hcl_report(data: &[u8]) {
    let Ok(r) = confboot_azure::HclReport::parse(data) else {
        return;
    };
    assert!(data.len() <= confboot_azure::MAX_HCL_REPORT_LEN);
    assert!(r.runtime_claims.len() <= data.len() - confboot_azure::VARIABLE_DATA_OFFSET);
    let _ = r.claims_digest();
    if let Ok(c) = confboot_azure::RuntimeClaims::parse(r.runtime_claims) {
        let _ = c.attestation_key();
    }
    if r.kind != confboot_azure::HardwareKind::SevSnp {
        return;
    }
    let (validator, genuine) = azure_fixture();
    let evidence = confboot_azure::AzureEvidence {
        hcl_report: data.to_vec(),
        ..genuine.clone()
    };
    let nonce = confboot_azure::Nonce::Expected(b"challenge".to_vec());
    if validator.verify(&evidence, &nonce).is_ok() {
        let g = confboot_azure::HclReport::parse(AZURE_HCL_REPORT).expect("recorded report");
        assert_eq!(
            &r.hardware_report[..confboot_snp::SIGNED_LEN],
            &g.hardware_report[..confboot_snp::SIGNED_LEN]
        );
        assert_eq!(r.runtime_claims, g.runtime_claims);
    }
}

/// Runtime claims JSON: strictly read, and its attestation key, when there
/// is one, an RSA key within the bounds.
pub fn azure_runtime_claims(data: &[u8]) {
    let Ok(c) = confboot_azure::RuntimeClaims::parse(data) else {
        return;
    };
    assert!(data.len() <= confboot_azure::MAX_CLAIMS_LEN);
    assert!(c.keys.len() <= confboot_azure::MAX_KEYS);
    if let Ok(k) = c.attestation_key() {
        assert!(k.n.len() >= confboot_azure::MIN_RSA_MODULUS_LEN);
        assert!(k.n.len() <= confboot_azure::MAX_RSA_MODULUS_LEN);
        assert!((1..=4).contains(&k.e.len()));
    }
}

/// Recorded Azure evidence: the evidence JSON, the quote JSON and the
/// length-prefixed quote readers, each output within its bounds.
pub fn azure_evidence(data: &[u8]) {
    let bounded = |q: &confboot_azure::TpmQuote| {
        assert!(q.message.len() <= confboot_azure::MAX_QUOTE_PART_LEN);
        assert!(q.signature.len() <= confboot_azure::MAX_QUOTE_PART_LEN);
        assert!(q.pcrs.len() <= confboot_azure::MAX_PCRS);
    };
    if let Ok(e) = confboot_azure::read_evidence_json(data) {
        bounded(&e.tpm_quote);
        assert!(e.hcl_report.len() <= confboot_azure::MAX_HCL_REPORT_LEN);
        assert!(
            e.td_quote
                .is_none_or(|q| q.len() <= confboot_azure::MAX_BLOB_LEN)
        );
    }
    if let Ok(q) = confboot_azure::TpmQuote::from_json(data) {
        bounded(&q);
    }
    if let Ok(q) = confboot_azure::TpmQuote::from_length_prefixed(data) {
        bounded(&q);
    }
}

// ---- cloud variants ----

/// The recorded NitroTPM evidence (JSON).
pub const NITRO_EVIDENCE: &str = include_str!("../../crates/aws/testdata/test-nitro-fixture.json");
/// A time inside the recorded NitroTPM chain's window (2026-02-03T11:00:00Z).
pub const NITRO_AT: i64 = 1_770_116_400;
/// The recorded GCE attestations (nonce `9009`, and none).
pub const GCP_ATTESTATIONS: [&[u8]; 2] = [
    include_bytes!("../../crates/gcp/testdata/gce-cos-85-nonce9009.pb"),
    include_bytes!("../../crates/gcp/testdata/gce-cos-85-no-nonce.pb"),
];
/// A time inside the recorded GCE chain's window.
pub const GCP_AT: i64 = 1_780_000_000;

/// The NSM attestation document's envelope and payload (COSE_Sign1 and
/// CBOR): decoded within bounds or refused; a decoded envelope's
/// `Sig_structure` is a four-element array.
pub fn aws_document(data: &[u8]) {
    use confboot_aws::{CoseSign1, NsmDocument};
    let limits = confboot_aws::cbor::Limits {
        max_bytes: 1 << 16,
        max_depth: 8,
        max_items: 1024,
    };
    let _ = confboot_aws::cbor::decode(data, limits);
    let Ok(cose) = CoseSign1::parse(data) else {
        return;
    };
    assert_eq!(cose.sig_structure().first(), Some(&0x84));
    if let Ok(doc) = NsmDocument::parse(cose.payload) {
        assert!(doc.cabundle.len() <= confboot_aws::document::MAX_CABUNDLE);
        assert!(doc.pcrs.len() <= confboot_aws::document::MAX_PCRS);
    }
}

/// NitroTPM evidence (JSON) through every check at a time the recorded
/// chain is valid, with the nonce it records: verified only if the signed
/// parts are the recorded ones (the document's payload and the quote).
pub fn aws_nitro_evidence(data: &[u8]) {
    use confboot_aws::{CoseSign1, NitroEvidence, NitroRoots};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(evidence) = NitroEvidence::from_json(text) else {
        return;
    };
    let roots = NitroRoots::aws();
    let _ = confboot_aws::run_checks(&evidence, None, &roots, NITRO_AT);
    if confboot_aws::verify::verify(&evidence, &evidence.nonce, &roots, NITRO_AT).is_ok() {
        let genuine = NitroEvidence::from_json(NITRO_EVIDENCE).expect("the fixture reads");
        let payload = |e: &NitroEvidence| {
            CoseSign1::parse(&e.document)
                .map(|c| c.payload.to_vec())
                .ok()
        };
        assert_eq!(
            payload(&evidence),
            payload(&genuine),
            "verified another payload"
        );
        assert_eq!(evidence.attest, genuine.attest, "verified another quote");
    }
}

/// A GCE vTPM attestation (protobuf) through every check, with the
/// recorded nonces: verified only if every quote is one of the recorded
/// ones.
pub fn gcp_attestation(data: &[u8]) {
    use confboot_gcp::{GcpAttestation, GcpRoots};
    let roots = GcpRoots::google();
    let _ = confboot_gcp::run_checks(data, None, &roots, GCP_AT);
    for nonce in [&[0x90, 0x09][..], &[][..]] {
        if confboot_gcp::verify::verify(data, nonce, &roots, GCP_AT).is_ok() {
            let att = GcpAttestation::decode(data).expect("verified, so decoded");
            let genuine: Vec<Vec<u8>> = GCP_ATTESTATIONS
                .iter()
                .flat_map(|a| {
                    GcpAttestation::decode(a)
                        .expect("the fixture decodes")
                        .quotes
                })
                .map(|q| q.attest)
                .collect();
            assert!(
                att.quotes.iter().all(|q| genuine.contains(&q.attest)),
                "verified another quote"
            );
        }
    }
}

// ---- The ledger's anchor in joinsvc's --state-dir ----

/// joinsvc's ledger anchor file (`--state-dir/ledger-anchor.json`), which
/// a host that restores old sectors of the disk may have spoilt: bounded,
/// and what reads writes back the same.
pub fn ledger_anchor(data: &[u8]) {
    use joinsvc::ledger::{LedgerAnchor, MAX_ANCHOR_BYTES, MAX_ANCHOR_JOINS, MAX_DISK_GENERATIONS};
    let Ok(anchor) = LedgerAnchor::from_json(data) else {
        return;
    };
    assert!(data.len() <= MAX_ANCHOR_BYTES);
    assert!(anchor.generations.len() <= 2 * MAX_DISK_GENERATIONS);
    assert!(anchor.joins.len() <= MAX_ANCHOR_JOINS);
    assert!(anchor.joins.keys().all(|d| !d.is_empty() && d.len() <= 64));
    assert!(
        anchor
            .generations
            .keys()
            .all(|d| !d.is_empty() && d.len() <= 64)
    );
    assert_eq!(LedgerAnchor::from_json(&anchor.to_json()).unwrap(), anchor);
}

/// The admin's `confboot recover --generations-file` (seeded from the
/// ledger's ConfigMap): bounded, UUID keys, and what reads writes back
/// the same.
pub fn admin_generations(data: &[u8]) {
    use confboot_cluster::generation::{
        MAX_ADMIN_GENERATIONS, admin_generations_json, parse_admin_generations,
    };
    let Ok(generations) = parse_admin_generations(data) else {
        return;
    };
    assert!(generations.len() <= MAX_ADMIN_GENERATIONS);
    assert!(generations.keys().all(|d| confboot_kms::is_uuid(d)));
    assert_eq!(
        parse_admin_generations(admin_generations_json(&generations).as_bytes()).unwrap(),
        generations
    );
}

/// A state file the node trusts, MAC trailer and all
/// ([`confboot_kms::state_mac`]): never opened unless its bytes are what
/// the disk's key sealed, and what opens seals back to the same bytes.
pub fn state_mac_file(data: &[u8]) {
    use confboot_kms::state_mac::{StateMacKey, TRAILER_LEN, split};
    let Ok((body, generation, _)) = split(data) else {
        return;
    };
    assert_eq!(body.len() + TRAILER_LEN, data.len());
    let key = StateMacKey::derive(&[0x42; 32]);
    for name in ["ssh-users.json", "vpn-private-key", "state-generation"] {
        if let Ok((opened, at)) = key.open(name, data, generation..=generation.saturating_add(1)) {
            assert_eq!(key.seal(name, at, opened), data);
        }
    }
}
