//! aTLS: attestation right after a TLS 1.3 handshake, bound to the
//! session's exporter (ALPN `confboot/2`, rustls with the ring provider),
//! in either or both directions.
//!
//! - **The handshake** is ordinary TLS 1.3: the server shows a self-signed
//!   P-256 certificate (a new one in every handshake when it attests), the
//!   client takes any and shows none. Session resumption and 0-RTT are
//!   off, so every connection is attested afresh.
//! - **Then each side sends one attestation message** ([`message`]): the
//!   client first, the server once it has checked the client's. A side
//!   that attests puts in evidence whose `extra_data` is the session's TLS
//!   exporter under confboot's label, with the sender's role (and the
//!   sealing key it offers) as context ([`binding`]). The peer checks it
//!   with its validators before anything else moves: a server that refuses
//!   the client answers with a `PERMISSION_DENIED` trailer and closes; a
//!   client that refuses the server returns an error before any call. The
//!   handlers of the connection see what the client's evidence established
//!   as [`confboot_wire::CallContext::peer`], typed by the server
//!   ([`AtlsServer<P>`]): for a server that requires client attestation an
//!   [`AttestedPeer`], its [`confboot_attest::Attested`] (with the
//!   validator's appraisal) and the [`SealingKey`] it offered, if any, which
//!   a server seals secrets to (a join ticket's, with `confboot_kms::seal`);
//!   `()` for a server whose clients do not attest, whose handlers cannot
//!   ask about a caller at all.
//! - **Why after the handshake**: evidence bound to a session's exporter is
//!   worthless on any other session, so an attacker who terminates TLS on
//!   both sides and relays every message of a genuine attester is refused;
//!   the scheme this replaced bound evidence to the certificate's key and a
//!   nonce inside the handshake, which holds only as long as no key of an
//!   attested machine ever leaks. No binding tells two genuine instances
//!   with the same measurements apart (SECURITY.md, "Not covered").
//!
//! The exporter's label is [`binding::EXPORTER_LABEL`]
//! (`EXPORTER-confboot-attestation`, RFC 8446 §7.5). The message is
//! `confboot.atls.Attestation` (`confboot_proto::atls`): the variant's
//! name, its evidence, and the X25519 sealing key the sender offers, if
//! any; its evidence is at most [`message::MAX_EVIDENCE_LEN`] (64 KiB).
//! There is one scheme: every binary that speaks aTLS is released
//! together, and a peer that offers the old in-handshake ALPN
//! (`confboot/1`) fails the handshake.
//!
//! # Tickets sealed to the attested VM
//!
//! A node's join client makes a fresh X25519 key pair for every attempt
//! and offers its public key in its attestation message, so its evidence
//! binds it. joinsvc's handlers find it beside the caller's attestation
//! (the [`SealingKey`] above) and seal the ticket's secrets (state disk key,
//! measurement secret, bootstrap token, control-plane files) into the
//! ticket's `sealed_secrets` (`confboot_kms::seal`), leaving their plain
//! fields empty; a caller that offered no key gets no ticket. The node
//! opens them with its private key and refuses a ticket that is not
//! sealed or does not open, so whoever reads the answer outside the VM
//! reads no secret.
//!
//! # Evidence without a call: the verify service
//!
//! The node agent's verify service (port 8080) is an aTLS server that
//! attests and requires nothing of its client; no call follows, the
//! attestation message is the answer. A verifier that must show every
//! check, as `confboot verify` does, connects with
//! [`AtlsClient::connect_unverified`], which returns the server's message
//! unchecked together with the value its evidence must bind (this
//! session's exporter for the server's role); evidence made on any other
//! session (a relay's, a recorded answer) fails that check as "evidence not
//! bound to this handshake".
//!
//! Every failure comes back as an [`AtlsError`] that says which check
//! failed. The handshake and the exchange share one absolute deadline.
//!
//! Validators are `Arc<dyn Validator>`; pass a
//! [`confboot_attest::SwappableValidator`] to change the policy at run
//! time: each connection validates with one call, hence one policy, and a
//! swap applies from the next connection on.
//!
//! One-line wiring: [`serve`] and [`connect`]. Pieces: [`AtlsServer`] and
//! [`AtlsClient`] over any [`Transport`](confboot_wire::Transport); both build
//! their rustls configs once and run the same attestation exchange.
//!
//! ```
//! use std::net::TcpListener;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use confboot_atls as atls;
//! use confboot_attest::{Attested, AttestationError, Detail, Issuer, Validator, Variant};
//! use confboot_net::PoolConfig;
//! use confboot_wire::{Router, ServerLimits, Status};
//! use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
//!
//! // Stand-ins for a real issuer and validator (vTPM, SEV-SNP): evidence is
//! // just the extra_data (the session's exporter), which is NOT secure and
//! // only shows the wiring.
//! struct Echo;
//! #[derive(PartialEq)]
//! struct OtherHandshake;
//! impl Issuer for Echo {
//!     fn variant(&self) -> Variant { Variant::QemuVtpm }
//!     fn issue(&self, extra: &[u8; 32]) -> Result<Vec<u8>, AttestationError> { Ok(extra.to_vec()) }
//! }
//! impl Validator for Echo {
//!     fn variant(&self) -> Variant { Variant::QemuVtpm }
//!     fn validate(&self, ev: &[u8], extra: &[u8; 32]) -> Result<Attested, AttestationError> {
//!         if ev != extra {
//!             return Err(AttestationError::Binding(Detail::with(&OtherHandshake, "other handshake")));
//!         }
//!         Ok(Attested { variant: Variant::QemuVtpm, measurements: Default::default(), warnings: Vec::new(), set_verdict: None })
//!     }
//! }
//!
//! // The server requires client attestation, so the caller is known here.
//! let router = Router::<atls::AttestedPeer>::new().unary(
//!     confboot_proto::HEALTH_CHECK,
//!     |ctx, _: HealthCheckRequest| {
//!         assert_eq!(ctx.peer().attested().variant, Variant::QemuVtpm);
//!         Ok(HealthCheckResponse { status: 1 })
//!     },
//! );
//! let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//! let server = atls::serve(
//!     listener, PoolConfig::default(), ServerLimits::default(), router,
//!     atls::AtlsServer::requiring_clients(
//!         Some(Arc::new(Echo)),                     // the server attests
//!         vec![Arc::new(Echo) as Arc<dyn Validator>], // and requires the client to
//!     ).unwrap(),
//! ).unwrap();
//!
//! let (mut client, server_attested) = atls::connect(
//!     server.local_addr(), Duration::from_secs(10),
//!     &[Arc::new(Echo) as Arc<dyn Validator>], // require server attestation
//!     Some(Arc::new(Echo)),                 // and attest ourselves
//! ).unwrap();
//! assert_eq!(server_attested.unwrap().variant, Variant::QemuVtpm);
//! let resp: HealthCheckResponse = client
//!     .unary(confboot_proto::HEALTH_CHECK, &HealthCheckRequest::default(), Duration::from_secs(10))
//!     .unwrap();
//! assert_eq!(resp.status, 1);
//! server.stop();
//! ```

mod attestation;
pub mod binding;
pub mod cert;
mod client;
mod error;
mod handshake;
pub mod message;
mod net;
mod server;

pub use binding::Role;
pub use client::{AtlsClient, Connected, Unverified};
pub use error::{AtlsError, AtlsIo, MessageFault};
pub use handshake::{ALPN, SERVER_NAME, provider};
pub use message::AttestationMessage;
pub use net::{AtlsRpcClient, connect, connect_sealing, serve};
pub use server::{
    Accepted, AtlsServer, AttestedPeer, ClientPeer, DEFAULT_GATE_CAPACITY, DEFAULT_GATE_TIMEOUT,
    SealingKey, ServerHandshake, client_hello_gate, client_hello_opening,
};
