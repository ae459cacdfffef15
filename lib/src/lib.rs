//! confboot's core: the hand-framed RPC, attestation and its policy, and the
//! small pieces every binary shares (argument parsing, logging).
//!
//! The core does not know the transport: servers and clients are thin wiring
//! around plain functions and types that are tested without sockets.
#![warn(missing_docs)]
// The one exception: the device-mapper ioctl (`disk::dm::ioctl`).
#![deny(unsafe_code)]

pub mod args;
pub mod atls;
pub mod attestation;
pub mod backoff;
pub mod base64;
pub mod cluster;
pub mod dhcp;
pub mod disk;
pub mod fs;
pub mod hex;
pub mod http;
pub mod kms;
pub mod logging;
pub mod measure;
pub mod netlink;
pub mod nodelock;
pub mod process;
pub mod rpc;
pub mod signals;
pub mod ssh_users;
pub mod stop;
pub mod ticket;
pub mod time;
pub mod tpm;
pub mod verify;
pub mod vpn;
