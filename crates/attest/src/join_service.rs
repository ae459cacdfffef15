//! How a node checks the control plane it asks (a join service for its
//! ticket, in the bootstrapper; `vpn.API` for peer updates, in the node
//! agent): one set of options, one validator set, shared by both binaries.
//!
//! By default a control plane must run this node's own image (its PCRs,
//! PCR 15 and IMA's PCR 10 aside) with an attestation key that
//! `--joinsvc-ak-trust` trusts; `--joinsvc-measurements` names other
//! measurements (a rolling upgrade). PCR 15 is left to the caller: the
//! bootstrapper checks it against each ticket's cluster, the node agent
//! against the cluster it is a member of.

use std::sync::Arc;

use crate::options::{
    DEFAULT_VARIANTS, InsecureAnyAk, SNP_POLICY_HELP, VARIANTS_HELP, ValidatorOptions,
    VariantOptions,
};
use crate::tpm::{CLUSTER_ID_PCR, IMA_PCR};
use crate::vtpm::{VtpmIssuer, quoted_pcrs};
use crate::{MeasurementPolicy, Validator, Variant};
use confboot_util::args::{Matches, Opt};

/// Where a node image keeps the CA of its platform's attestation keys.
pub const DEFAULT_JOINSVC_AK_TRUST: &str = "ca:/etc/confboot/ak-ca.pem";

/// `--joinsvc-measurements`.
pub const JOINSVC_MEASUREMENTS_OPT: Opt = Opt::value(
    "joinsvc-measurements",
    "FILE",
    "Measurements join services must attest to (Constellation's JSON format; default: this node's own PCRs but 15 (the cluster mark) and 10 (IMA, run time): the same image)",
)
.aliases(&["joinsvc-policy"]);
/// `--joinsvc-ak-trust`.
pub const JOINSVC_AK_TRUST_OPT: Opt = Opt::value(
    "joinsvc-ak-trust",
    "MODE",
    "AK trust for join services: ca:FILE, pinned:FILE|HEX, insecure-any-ak",
)
.default(DEFAULT_JOINSVC_AK_TRUST);
/// `--joinsvc-variants`.
pub const JOINSVC_VARIANTS_OPT: Opt =
    Opt::value("joinsvc-variants", "LIST", VARIANTS_HELP).default(DEFAULT_VARIANTS);
/// `--joinsvc-snp-policy`.
pub const JOINSVC_SNP_POLICY_OPT: Opt = Opt::value("joinsvc-snp-policy", "FILE", SNP_POLICY_HELP);

/// How join services are checked: `--joinsvc-measurements`, `--joinsvc-ak-trust`.
pub const JOINSVC_VALIDATOR_OPTIONS: ValidatorOptions = ValidatorOptions {
    measurements: "joinsvc-measurements",
    ak_trust: "joinsvc-ak-trust",
    expected_events: None,
    insecure_any_ak: InsecureAnyAk::Warn,
};

/// Which variants join services may attest with: `--joinsvc-variants`,
/// and `--joinsvc-snp-policy` for `sev-snp`.
pub const JOINSVC_VARIANT_OPTIONS: VariantOptions = VariantOptions {
    variants: "joinsvc-variants",
    snp_policy: "joinsvc-snp-policy",
};

/// One validator per variant `--joinsvc-variants` accepts, from the
/// options above; `issuer` is this node's vTPM (its own image is the
/// default policy).
pub fn join_service_validators(
    m: &Matches,
    issuer: &VtpmIssuer,
) -> Result<Vec<Arc<dyn Validator>>, String> {
    let mut validators = Vec::new();
    for variant in JOINSVC_VARIANT_OPTIONS
        .accepted(m)
        .map_err(|e| e.to_string())?
    {
        validators.push(match variant {
            Variant::QemuVtpm => join_service_vtpm_validator(m, issuer)?,
            Variant::SevSnp => Arc::new(
                JOINSVC_VARIANT_OPTIONS
                    .snp_validator(m)
                    .map_err(|e| e.to_string())?,
            ),
        });
    }
    Ok(validators)
}

/// The validator of vTPM join services: `--joinsvc-measurements` (default:
/// this node's own image) and `--joinsvc-ak-trust`.
fn join_service_vtpm_validator(
    m: &Matches,
    issuer: &VtpmIssuer,
) -> Result<Arc<dyn Validator>, String> {
    let opts = JOINSVC_VALIDATOR_OPTIONS;
    let policy = match opts.measurements(m).map_err(|e| e.to_string())? {
        Some(policy) => policy,
        None => own_image_policy(issuer)?,
    };
    let builder = opts.builder(m).map_err(|e| {
        format!(
            "{e} (join services are attested by default: say which attestation keys they may use)"
        )
    })?;
    // A running join service is a bootstrapped node: its PCR 15 is marked,
    // and the caller checks the mark.
    Ok(builder.require_unmarked(false).build(policy))
}

/// This node's own measurements as the policy for join services: every
/// quoted PCR, enforced, but PCR 15 (the cluster mark, checked per ticket)
/// and PCR 10 (IMA's run-time measurements: a control plane that has run
/// for a while differs there from a node in its initramfs, whatever image
/// both booted).
pub fn own_image_policy(issuer: &VtpmIssuer) -> Result<MeasurementPolicy, String> {
    let pcrs: Vec<u32> = quoted_pcrs()
        .into_iter()
        .filter(|&i| i != CLUSTER_ID_PCR && i != IMA_PCR)
        .collect();
    let values = issuer
        .with_tpm(|tpm| tpm.pcr_read(&pcrs))
        .map_err(|e| format!("reading this node's PCRs: {e}"))?;
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
