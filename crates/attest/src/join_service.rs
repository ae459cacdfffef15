//! How a node checks the control plane it asks (a join service for its
//! ticket, in the bootstrapper; `vpn.API` for peer updates, in the node
//! agent): one set of settings, one validator set, shared by both.
//!
//! By default a control plane must run this node's own image (its PCRs,
//! PCR 15 and IMA's PCR 10 aside) with an attestation key the AK trust
//! trusts; a measurement-policy file names other measurements (a rolling
//! upgrade). PCR 15 is left to the caller: the bootstrapper checks it
//! against each ticket's cluster, the node agent against the cluster it is
//! a member of.

use std::fmt;
use std::sync::Arc;

use crate::config::{
    AttestationSettings, ConfigError, Setting, load_measurement_policy, load_snp_validator,
    load_tdx_validator,
};
use crate::tpm::{CLUSTER_ID_PCR, IMA_PCR, TpmError};
use crate::vtpm::{VtpmIssuer, quoted_pcrs};
use crate::{MeasurementPolicy, Validator, Variant};

/// Why the validators of join services could not be built.
#[derive(Debug)]
pub enum JoinServiceError {
    /// A setting is unusable.
    Config(ConfigError),
    /// The AK trust is unusable: join services are attested by default,
    /// so it must say which attestation keys they may use.
    AkTrust(ConfigError),
    /// This node's PCRs, the default policy, could not be read.
    OwnImage(TpmError),
}

impl JoinServiceError {
    /// The message, each setting named by `name` (as
    /// [`ConfigError::describe`]).
    pub fn describe(&self, name: &dyn Fn(Setting) -> String) -> String {
        match self {
            JoinServiceError::Config(e) => e.describe(name),
            JoinServiceError::AkTrust(e) => format!(
                "{} (join services are attested by default: say which attestation keys they may use)",
                e.describe(name)
            ),
            JoinServiceError::OwnImage(e) => format!("reading this node's PCRs: {e}"),
        }
    }
}

impl fmt::Display for JoinServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&|setting| setting.to_string()))
    }
}

impl std::error::Error for JoinServiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JoinServiceError::Config(e) | JoinServiceError::AkTrust(e) => Some(e),
            JoinServiceError::OwnImage(e) => Some(e),
        }
    }
}

/// One validator per variant `settings` accepts, in order; `issuer` is
/// this node's vTPM (its own image is the policy when the settings name
/// no measurement-policy file). A vTPM validator built with
/// `insecure-any-ak` is announced by `announce_insecure`
/// ([`ValidatorBuilder::announce_insecure_with`](crate::config::ValidatorBuilder::announce_insecure_with)).
pub fn join_service_validators(
    settings: &AttestationSettings,
    issuer: &VtpmIssuer,
    announce_insecure: fn(),
) -> Result<Vec<Arc<dyn Validator>>, JoinServiceError> {
    let mut validators = Vec::new();
    for variant in &settings.variants {
        validators.push(match variant {
            Variant::QemuVtpm => {
                let vtpm = settings
                    .vtpm
                    .as_ref()
                    .expect("settings have their variants'");
                let policy = match &vtpm.measurements {
                    Some(path) => {
                        load_measurement_policy(path).map_err(JoinServiceError::Config)?
                    }
                    None => own_image_policy(issuer).map_err(JoinServiceError::OwnImage)?,
                };
                let builder = vtpm
                    .validator_builder()
                    .map_err(JoinServiceError::AkTrust)?;
                // A running join service is a bootstrapped node: its PCR 15
                // is marked, and the caller checks the mark.
                builder
                    .announce_insecure_with(announce_insecure)
                    .require_unmarked(false)
                    .build(policy)
                    .map_err(|e| JoinServiceError::Config(ConfigError::Policy(e)))?
            }
            Variant::SevSnp => {
                let path = settings
                    .snp_policy
                    .as_deref()
                    .expect("settings have their variants'");
                Arc::new(load_snp_validator(path).map_err(JoinServiceError::Config)?)
            }
            Variant::Tdx => {
                let path = settings
                    .tdx_policy
                    .as_deref()
                    .expect("settings have their variants'");
                Arc::new(load_tdx_validator(path).map_err(JoinServiceError::Config)?)
            }
        });
    }
    Ok(validators)
}

/// This node's own measurements as the policy for join services: every
/// quoted PCR, enforced, but PCR 15 (the cluster mark, checked per ticket)
/// and PCR 10 (IMA's run-time measurements: a control plane that has run
/// for a while differs there from a node in its initramfs, whatever image
/// both booted).
pub fn own_image_policy(issuer: &VtpmIssuer) -> Result<MeasurementPolicy, TpmError> {
    let pcrs: Vec<u32> = quoted_pcrs()
        .into_iter()
        .filter(|&i| i != CLUSTER_ID_PCR && i != IMA_PCR)
        .collect();
    let values = issuer.with_tpm(|tpm| tpm.pcr_read(&pcrs))?;
    let mut policy = MeasurementPolicy::default();
    for (index, value) in values {
        policy.set(index, value.to_vec(), false);
    }
    log::info!(
        "join services must run this node's image: {} PCRs enforced",
        policy.entries().len()
    );
    Ok(policy)
}
