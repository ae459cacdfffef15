//! A relay against the real joinsvc: an attacker on the path terminates
//! TLS on both sides and relays every message of a genuine peer, in each
//! direction. Both are refused, because each side's evidence is bound to
//! the exporter of its own TLS session (`confboot_atls::binding`), and the
//! relay has two sessions.
//!
//! The same relay against the in-handshake scheme this replaced (evidence
//! in the certificate, bound to the certificate's key and a nonce the
//! verifier sent in the SNI or the CertificateRequest) failed too, but for
//! another reason: the relay could pass the verifier's nonce on and get a
//! genuine certificate with evidence for it back, yet it could not sign
//! the handshake with that certificate's key, which never left the
//! attested VM. That defence rested on the key alone: anyone holding the
//! key of any machine passing verification (a key leaked from a VM, by a
//! hardware attack on one of them or a bug in its TLS stack) could relay
//! the evidence and complete the handshake (CVE-2026-33697). Here the relay
//! needs no key: it has its own TLS sessions and still gets nowhere.
//!
//! Needs the static musl release binaries (`scripts/test.sh` builds them).

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use confboot_atls::{AtlsClient, AtlsError};
use confboot_attest::{AttestationError, Issuer, MeasurementPolicy, Validator};
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_tests::relay;
use confboot_tpm::swtpm::Swtpm;
use confboot_vtpm::{AkTrust, VtpmIssuer, VtpmValidator};

const T: Duration = Duration::from_secs(20);

/// A refusal for the binding, and nothing else.
fn binding_refused(e: &AtlsError) -> bool {
    matches!(e, AtlsError::Attestation(AttestationError::Binding(_)))
}

#[test]
fn a_genuine_node_relayed_to_joinsvc_is_refused() {
    let node = Node::start("node", b"kernel");
    let joinsvc = Joinsvc::start(
        &confboot_tests::musl_binary("joinsvc"),
        &node.policy(),
        &[&node],
    );
    // The control: the node itself, on its own session, gets through.
    let issuer: Arc<dyn Issuer> = node.issuer.clone();
    AtlsClient::new(vec![], Some(Arc::clone(&issuer)))
        .connect(TcpStream::connect(joinsvc.rpc_addr).unwrap(), T)
        .expect("the genuine node on its own session is accepted");

    // The relay: the node connects to the attacker (the host redirects
    // it), which passes the node's attestation message on unchanged over
    // its own session with joinsvc, and joinsvc's answer back.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let genuine = std::thread::spawn(move || {
        AtlsClient::new(vec![], Some(issuer))
            .connect(TcpStream::connect(at).unwrap(), T)
            .map(|c| c.peer)
    });
    let relayed = relay::relay_one(&listener, joinsvc.rpc_addr, |_, m| m).unwrap();
    assert!(
        relayed.from_client.as_ref().unwrap().evidence.is_some(),
        "the node attested to the relay"
    );
    assert!(
        matches!(relayed.from_target, Err(AtlsError::Refused(_))),
        "joinsvc took the relayed attestation: {:?}",
        relayed.from_target
    );
    assert!(matches!(
        genuine.join().unwrap(),
        Err(AtlsError::Refused(_))
    ));
    // joinsvc says why: the evidence is not bound to its session.
    joinsvc
        .process
        .wait_for_line("evidence not bound to this handshake", 100);
    assert!(joinsvc.tokens().is_empty(), "no token was made");
}

#[test]
fn a_genuine_joinsvc_relayed_to_a_node_is_refused() {
    // joinsvc attests with its control-plane node's TPM.
    let cp_tpm = Swtpm::start().unwrap();
    let (cp_ak, cp_policy) = {
        let issuer = VtpmIssuer::new(cp_tpm.connect().unwrap()).unwrap();
        let pcrs = issuer.with_tpm(|t| t.pcr_read_all()).unwrap();
        let mut policy = MeasurementPolicy::default();
        for (i, v) in pcrs.into_iter().filter(|(i, _)| *i <= 9) {
            policy.set(i, v.to_vec(), false);
        }
        (issuer.ak_public_key(), policy)
        // The issuer's connection closes here: swtpm serves one client at a time.
    };
    let node = Node::start("node", b"kernel");
    // The attacker's insider: a machine joinsvc trusts, in the attacker's
    // hands, so that joinsvc accepts the relay's own session and attests
    // on it.
    let insider = Node::start("insider", b"kernel");
    let tpm_arg = cp_tpm.addr().to_string();
    let joinsvc = Joinsvc::start_with(
        &confboot_tests::musl_binary("joinsvc"),
        &node.policy(),
        &[&node, &insider],
        &["--tpm", &tpm_arg],
    );
    joinsvc.process.wait_for_line("attesting with the TPM", 100);
    let joinsvc_validator: Arc<dyn Validator> = Arc::new(
        VtpmValidator::new(AkTrust::Pinned(vec![cp_ak]), cp_policy).require_unmarked(false),
    );
    let node_client = AtlsClient::new(
        vec![Arc::clone(&joinsvc_validator)],
        Some(node.issuer.clone() as Arc<dyn Issuer>),
    );

    // The control: on its own session the node accepts joinsvc.
    node_client
        .connect(TcpStream::connect(joinsvc.rpc_addr).unwrap(), T)
        .expect("joinsvc's own attestation is accepted");

    // The relay: joinsvc's genuine attestation, made for the relay's
    // session with it, passed on to the node.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let genuine = std::thread::spawn(move || {
        node_client
            .connect(TcpStream::connect(at).unwrap(), T)
            .map(|c| c.peer)
    });
    let insider_issuer = insider.issuer.clone();
    let relayed = relay::relay_one(&listener, joinsvc.rpc_addr, move |session, _| {
        relay::own_attestation(session, insider_issuer.as_ref()).unwrap()
    })
    .unwrap();
    let from_joinsvc = relayed.from_target.expect("joinsvc attested to the relay");
    assert!(from_joinsvc.evidence.is_some());
    let err = genuine.join().unwrap().unwrap_err();
    assert!(binding_refused(&err), "{err:?}");
    assert!(joinsvc.tokens().is_empty(), "no token was made");
}
