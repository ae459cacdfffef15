//! aTLS: attestation inside the TLS handshake (TLS 1.3 only, ALPN
//! `confboot/1`, rustls with the ring provider), in either or both
//! directions, compatible with Constellation's scheme.
//!
//! - **The server attests** when it has an
//!   [`Issuer`](confboot_attest::Issuer): the client draws a nonce and
//!   sends it in the SNI; per handshake the server makes a fresh P-256 key
//!   and a self-signed certificate whose non-critical extension (OID = the
//!   variant's) carries evidence bound to that key and nonce. The client
//!   checks it inside the handshake with its validators.
//! - **The client attests** when the server has client validators: the
//!   server draws a nonce per handshake and sends it as the only acceptable-CA
//!   name of its CertificateRequest (so each connection gets its own
//!   `ServerConfig`); the client answers with an attested certificate of its
//!   own, which the server checks inside the handshake. The handlers of the
//!   connection see the result as [`confboot_wire::CallContext::peer`].
//!
//! Encodings of the nonces and of the binding: [`nonce`]. The certificate and
//! its checks: [`cert`]. Every failure aborts the handshake and comes back as
//! an [`AtlsError`] that says which check failed. Handshake signatures are
//! checked by rustls' own functions; session resumption and 0-RTT are off,
//! so every connection is attested afresh.
//!
//! Validators are `Arc<dyn Validator>`; pass a
//! [`confboot_attest::SwappableValidator`] to change the policy at run
//! time: each handshake validates with one call, hence one policy, and a swap
//! applies from the next handshake on.
//!
//! One-line wiring: [`serve`] and [`connect`]. Pieces: [`AtlsServer`] and
//! [`AtlsClient`] over any [`Transport`](confboot_wire::Transport); both build
//! their rustls configs from the same attesting resolver and verifier.
//!
//! ```
//! use std::net::TcpListener;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use confboot_atls as atls;
//! use confboot_attest::{Attested, AttestationError, Issuer, Validator, Variant};
//! use confboot_net::PoolConfig;
//! use confboot_wire::{Router, ServerLimits, Status};
//! use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
//!
//! // Stand-ins for a real issuer and validator (vTPM, SEV-SNP): evidence is
//! // just the extra_data, which is NOT secure and only shows the wiring.
//! struct Echo;
//! impl Issuer for Echo {
//!     fn variant(&self) -> Variant { Variant::QemuVtpm }
//!     fn issue(&self, extra: &[u8; 32]) -> Result<Vec<u8>, AttestationError> { Ok(extra.to_vec()) }
//! }
//! impl Validator for Echo {
//!     fn variant(&self) -> Variant { Variant::QemuVtpm }
//!     fn validate(&self, ev: &[u8], extra: &[u8; 32]) -> Result<Attested, AttestationError> {
//!         if ev != extra { return Err(AttestationError::Binding("other handshake".into())); }
//!         Ok(Attested { variant: Variant::QemuVtpm, measurements: Default::default() })
//!     }
//! }
//!
//! let router = Router::new().unary(confboot_proto::HEALTH_CHECK, |ctx, _: HealthCheckRequest| {
//!     // The server required client attestation, so the caller is known here.
//!     assert!(ctx.peer::<Attested>().is_some());
//!     Ok(HealthCheckResponse { status: 1 })
//! });
//! let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//! let server = atls::serve(
//!     listener, PoolConfig::default(), ServerLimits::default(), router,
//!     Some(Arc::new(Echo)),                 // the server attests
//!     &[Arc::new(Echo) as Arc<dyn Validator>], // and requires the client to
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

pub mod cert;
mod client;
mod error;
mod handshake;
mod net;
pub mod nonce;
mod server;

pub use client::{AtlsClient, Connected};
pub use error::AtlsError;
pub use handshake::{ALPN, provider};
pub use net::{AtlsRpcClient, connect, serve};
pub use nonce::Nonce;
pub use server::{
    Accepted, AtlsServer, DEFAULT_GATE_CAPACITY, DEFAULT_GATE_TIMEOUT, ServerHandshake,
    client_hello_gate, client_hello_opening,
};
