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
//!
//! During a rolling upgrade a node and its join service may run different
//! images. With release keys pinned in the node's measured configuration
//! (`--joinsvc-release-key`, a file of the initramfs, so PCR 9 covers
//! it), a join service that does not run the node's image is accepted
//! when it presents, in its attestation message, a reference-value set
//! signed by one of those keys, valid now, whose PCRs its evidence matches
//! ([`PresentedSetValidator`]). The set is public; what a host could
//! present instead (nothing, an unsigned set, a set signed by another key,
//! an expired or forged one) is refused.
//!
//! A node applies the rule joinsvc applies to its directory
//! (`confboot_appraisal::reference::history`): a presented set it has
//! retired, whatever its envelope, or an older signing of a set name and
//! version of which it has seen a newer one (the release re-signs a set
//! with a later not-before to end it sooner) is refused. A node never
//! sees a set's file removed, so what retires a set for it is a newer
//! signing. The window is read against a time floor, the latest time
//! this validator has seen, not the guest's clock alone (which the host
//! sets). Both last as long as the validator (one boot of the
//! bootstrapper, one run of the node agent) unless it is given a history
//! file and a floor file ([`PresentedSetValidator::with_history`],
//! [`PresentedSetValidator::with_time_floor`]).

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::VerifierRefusal;
use crate::config::{
    AttestationSettings, ConfigError, Setting, VariantSettings, load_azure_validator,
    load_measurement_policy, load_snp_validator, load_tdx_validator,
};
use confboot_appraisal::reference::history::SetHistory;
use confboot_appraisal::reference::{ReleaseKey, open};
use confboot_attest::SetName;
use confboot_attest::{
    AttestationError, Attested, Detail, EXTRA_DATA_LEN, MeasurementPolicy, Validator, Variant,
};
use confboot_tpm::{CLUSTER_ID_PCR, IMA_PCR, TpmError};
use confboot_util::floor::TimeFloor;
use confboot_vtpm::{VtpmIssuer, quoted_pcrs};

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
/// With `release_keys`, the vTPM validator also accepts a join service
/// that presents a set they signed and matches it
/// ([`PresentedSetValidator`]).
pub fn join_service_validators(
    settings: &AttestationSettings,
    issuer: &VtpmIssuer,
    announce_insecure: fn(),
    release_keys: &[ReleaseKey],
) -> Result<Vec<Arc<dyn Validator>>, JoinServiceError> {
    let mut validators = Vec::new();
    for variant in settings.settings() {
        validators.push(match variant {
            VariantSettings::QemuVtpm(vtpm) => {
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
                let builder = builder
                    .announce_insecure_with(announce_insecure)
                    .require_unmarked(false);
                let own = builder
                    .build(policy)
                    .map_err(|e| JoinServiceError::Config(ConfigError::Policy(e)))?;
                if release_keys.is_empty() {
                    own
                } else {
                    Arc::new(PresentedSetValidator::new(
                        own,
                        builder.build_evidence_only(),
                        release_keys.to_vec(),
                    ))
                }
            }
            VariantSettings::SevSnp(snp) => {
                Arc::new(load_snp_validator(&snp.policy).map_err(JoinServiceError::Config)?)
            }
            VariantSettings::Tdx(tdx) => {
                Arc::new(load_tdx_validator(&tdx.policy).map_err(JoinServiceError::Config)?)
            }
            // The policy drops PCR 15: the caller checks the mark, as for
            // a vTPM join service.
            VariantSettings::AzureSevSnp(azure) => {
                Arc::new(load_azure_validator(&azure.policy).map_err(JoinServiceError::Config)?)
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

/// A join service's validator that also accepts the image of a signed
/// reference-value set the join service presents: its evidence is first
/// checked under the node's own policy (`own`); when that refuses it, and
/// a set was presented, the set is read with the pinned `release_keys`
/// ([`open`]: signed by one of them, well formed, valid now) and the
/// evidence, checked by `evidence` (its AK, quote and binding), must match
/// the set's `qemu-vtpm` PCRs, PCR 15 (the cluster mark, which the caller
/// checks) and PCR 10 (IMA, run time) aside.
pub struct PresentedSetValidator {
    own: Arc<dyn Validator>,
    evidence: Arc<dyn Validator>,
    release_keys: Vec<ReleaseKey>,
    history: Mutex<SetHistory>,
    floor: Arc<TimeFloor>,
}

impl PresentedSetValidator {
    /// `own` first, then a presented set signed by `release_keys`.
    pub fn new(
        own: Arc<dyn Validator>,
        evidence: Arc<dyn Validator>,
        release_keys: Vec<ReleaseKey>,
    ) -> PresentedSetValidator {
        PresentedSetValidator {
            own,
            evidence,
            release_keys,
            history: Mutex::new(SetHistory::in_memory()),
            floor: Arc::new(TimeFloor::in_memory(0)),
        }
    }

    /// Keeps the signings it sees in `history` (by default, for as long
    /// as the validator lives).
    pub fn with_history(mut self, history: SetHistory) -> PresentedSetValidator {
        self.history = Mutex::new(history);
        self
    }

    /// Reads the time from `floor` (by default a floor of its own).
    pub fn with_time_floor(mut self, floor: Arc<TimeFloor>) -> PresentedSetValidator {
        self.floor = floor;
        self
    }

    fn by_set(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
        presented: &[u8],
    ) -> Result<Attested, AttestationError> {
        let refused = |why: String| {
            AttestationError::Policy(Detail::with(
                &VerifierRefusal::PresentedSet,
                format!("the join service's set: {why}"),
            ))
        };
        let opened = open(presented, &self.release_keys, self.floor.now())
            .map_err(|e| refused(e.to_string()))?;
        let set = opened.set;
        let name = SetName {
            name: set.name.clone(),
            version: set.version.clone(),
        };
        {
            let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
            history
                .check(&opened.digest, &name, set.not_before)
                .map_err(|e| refused(e.to_string()))?;
            if let Err(e) = history.seen(&name, set.not_before) {
                log::error!("{e}; the signing is remembered for this run only");
            }
        }
        let reference = set.variant(Variant::QemuVtpm).ok_or_else(|| {
            refused(format!(
                "{} {} has no qemu-vtpm values",
                set.name, set.version
            ))
        })?;
        let mut policy = reference.policy.clone();
        policy.remove(CLUSTER_ID_PCR);
        policy.remove(IMA_PCR);
        let attested = self.evidence.validate(evidence, extra_data)?;
        policy.check(&attested.measurements)?;
        log::info!(
            "the join service runs {} {}, signed by a pinned release key",
            set.name,
            set.version
        );
        Ok(attested)
    }
}

impl Validator for PresentedSetValidator {
    fn variant(&self) -> Variant {
        self.own.variant()
    }

    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        self.own.validate(evidence, extra_data)
    }

    fn validate_presented(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
        presented: Option<&[u8]>,
    ) -> Result<Attested, AttestationError> {
        let own = self.own.validate(evidence, extra_data);
        match (own, presented) {
            (Ok(attested), _) => Ok(attested),
            (Err(e), None) => Err(e),
            (Err(own), Some(set)) => self.by_set(evidence, extra_data, set).map_err(|e| {
                AttestationError::Policy(Detail::with(
                    &VerifierRefusal::NotOwnImageNorPresentedSet,
                    format!("not this node's image ({own}), nor the set it presents ({e})"),
                ))
            }),
        }
    }
}
