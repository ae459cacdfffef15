//! joinsvc's library part: the plain data the service keeps in the
//! Kubernetes API, its [`ledger`] (what each SEV-SNP launch and each disk
//! was given) and the registry ConfigMap's stored form ([`configmap`]),
//! so that fuzz targets reach the parsers of an object that any writer
//! with access to it may have spoilt; and its client of the Kubernetes API
//! ([`kube_api`]) with what it keeps there through it: bootstrap tokens
//! ([`token`]) and the VPN peer registry ([`vpn`]), so that integration
//! tests drive them against a real API server. The service itself is the
//! binary (`main.rs`), which uses these modules from here.

#![deny(missing_docs)]

pub mod configmap;
pub mod kube_api;
pub mod ledger;
pub mod token;
pub mod vpn;
