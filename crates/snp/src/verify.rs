//! The SEV-SNP checks, one by one, so that a command can print each and a
//! validator can stop at the first failure.

use std::collections::BTreeMap;

use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};

use super::certs::{AmdCert, CertRole, TrustRoots, VekInfo, VerifiedChain};
use super::evidence::{CertKind, SnpEvidence};
use super::policy::{MinimumTcb, SnpPolicy};
use super::report::{Product, SigningKey, SnpReport, TcbVersion};
use super::vek_lookup::find_vek;
use crate::SnpRefusal;
use confboot_attest::check::{
    CheckOutcome, CheckResult, ReportDataCheck, WARNING_MARK, first_failure,
};
use confboot_attest::{AttestationError, Attested, Detail, EXTRA_DATA_LEN, Variant};
use confboot_util::hex;

/// Names of the checks, in the order they run.
pub mod check {
    /// The VCEK/VLEK was found (evidence or cache) and parses.
    pub const VEK: &str = "endorsement key";
    /// VCEK → ASK → ARK (or VLEK → ASVK → ARK), ARK pinned.
    pub const CHAIN: &str = "certificate chain";
    /// Every certificate of the chain is within its validity window.
    pub const VALIDITY: &str = "certificate validity";
    /// The report's ECDSA P-384 signature over bytes 0..0x2A0.
    pub const SIGNATURE: &str = "report signature";
    /// The report version is one confboot reads (2 to 5).
    pub const VERSION: &str = "report version";
    /// `KEY_INFO` names the kind of key that signed.
    pub const SIGNING_KEY: &str = "signing key";
    /// The kind of key `KEY_INFO` names is one the policy accepts
    /// (`signingKeys`).
    pub const ACCEPTED_SIGNING_KEY: &str = "accepted signing key";
    /// The report's CPUID names the chain's product.
    pub const PRODUCT: &str = "product";
    /// The VCEK's hwID is the report's chip id.
    pub const CHIP_ID: &str = "chip id";
    /// The report's chip id is one the policy allows (run only when the
    /// policy names `allowedChipIds`).
    pub const ALLOWED_CHIP: &str = "allowed chip";
    /// The VEK's TCB extensions are the report's `REPORTED_TCB`.
    pub const REPORTED_TCB: &str = "reported TCB";
    /// `REPORT_DATA` binding.
    pub const REPORT_DATA: &str = "report data";
    /// The DEBUG guest policy bit.
    pub const DEBUG: &str = "debug";
    /// The VMPL.
    pub const VMPL: &str = "VMPL";
    /// The SMT guest policy bit.
    pub const SMT: &str = "SMT";
    /// The migration-agent guest policy bit.
    pub const MIGRATION_AGENT: &str = "migration agent";
    /// The firmware ABI version ≥ minimum.
    pub const MIN_ABI: &str = "minimum ABI";
    /// `REPORTED_TCB` ≥ minimum.
    pub const MIN_REPORTED_TCB: &str = "minimum TCB (reported)";
    /// `LAUNCH_TCB` ≥ minimum.
    pub const MIN_LAUNCH_TCB: &str = "minimum TCB (launch)";
    /// The launch measurement.
    pub const MEASUREMENT: &str = "measurement";
    /// `HOST_DATA`.
    pub const HOST_DATA: &str = "host data";
    /// `ID_KEY_DIGEST`.
    pub const ID_KEY: &str = "ID key digest";
}

/// Runs every check on `evidence` at time `now` (Unix seconds), in the order
/// of [`check`] ([`check::ALLOWED_CHIP`] only when the policy pins chips). Checks that depend on the endorsement key still run on an
/// untrusted one (their text then says so); the overall verdict comes from
/// [`first_failure`].
pub fn run_checks(
    evidence: &SnpEvidence,
    report_data: &ReportDataCheck,
    policy: &SnpPolicy,
    roots: &TrustRoots,
    now: i64,
) -> Vec<CheckResult> {
    let report = &evidence.report;
    let (vek_outcome, vek) = check_vek(evidence, policy, roots);
    let (chain_outcome, chain) = check_chain(evidence, vek.as_ref(), roots);
    let product = tcb_product(report, chain, vek.as_ref());
    [
        (check::VEK, vek_outcome),
        (check::CHAIN, chain_outcome),
        (check::VALIDITY, check_validity(chain, now)),
        (
            check::SIGNATURE,
            check_signature(report, vek.as_ref(), chain),
        ),
        (check::VERSION, check_version(report)),
        (check::SIGNING_KEY, check_signing_key(report, vek.as_ref())),
        (
            check::ACCEPTED_SIGNING_KEY,
            check_accepted_signing_key(report, policy),
        ),
        (check::PRODUCT, check_product(report, chain, product)),
        (check::CHIP_ID, check_chip_id(report, vek.as_ref())),
        (check::ALLOWED_CHIP, check_allowed_chip(report, policy)),
        (
            check::REPORTED_TCB,
            check_reported_tcb(report, vek.as_ref(), product),
        ),
        (check::REPORT_DATA, check_report_data(report, report_data)),
        (check::DEBUG, check_debug(report, policy)),
        (check::VMPL, check_vmpl(report, policy)),
        (check::SMT, check_smt(report, policy)),
        (
            check::MIGRATION_AGENT,
            check_migration_agent(report, policy),
        ),
        (check::MIN_ABI, check_minimum_abi(report, policy)),
        (
            check::MIN_REPORTED_TCB,
            check_minimum_tcb(
                &SnpRefusal::MinimumReportedTcb,
                "reported",
                product,
                |p| report.reported_tcb(p),
                policy,
            ),
        ),
        (
            check::MIN_LAUNCH_TCB,
            check_minimum_tcb(
                &SnpRefusal::MinimumLaunchTcb,
                "launch",
                product,
                |p| report.launch_tcb(p),
                policy,
            ),
        ),
        (check::MEASUREMENT, check_measurement(report, policy)),
        (check::HOST_DATA, check_host_data(report, policy)),
        (check::ID_KEY, check_id_key(report, policy)),
    ]
    .into_iter()
    .filter(|(name, _)| *name != check::ALLOWED_CHIP || policy.allowed_chip_ids.is_some())
    .map(|(name, outcome)| CheckResult { name, outcome })
    .collect()
}

/// The endorsement key that signed the report, as found and parsed.
struct Vek {
    cert: AmdCert,
    info: VekInfo,
}

/// The outcome of a check that needs the endorsement key when there is none.
fn no_vek() -> CheckOutcome {
    CheckOutcome::Skipped("no endorsement key".into())
}

/// What a passing text adds when the key is not anchored in a verified chain.
fn untrusted(chain: Option<VerifiedChain>) -> &'static str {
    if chain.is_some() {
        ""
    } else {
        " (by an untrusted key)"
    }
}

/// [`check::VEK`]: the VCEK/VLEK is found ([`find_vek`]) and its
/// extensions parse.
fn check_vek(
    evidence: &SnpEvidence,
    policy: &SnpPolicy,
    roots: &TrustRoots,
) -> (CheckOutcome, Option<Vek>) {
    match find_vek(evidence, policy, roots)
        .and_then(|(cert, source)| VekInfo::from_der(cert.der()).map(|info| (cert, source, info)))
    {
        Ok((cert, source, info)) => (
            CheckOutcome::Passed(format!("{} from {source}", cert.role())),
            Some(Vek { cert, info }),
        ),
        Err(e) => (CheckOutcome::Failed(e), None),
    }
}

/// [`check::CHAIN`]: VCEK → ASK → ARK (or VLEK → ASVK → ARK), the ARK
/// pinned, with the intermediates the evidence carries.
fn check_chain(
    evidence: &SnpEvidence,
    vek: Option<&Vek>,
    roots: &TrustRoots,
) -> (CheckOutcome, Option<VerifiedChain>) {
    let Some(vek) = vek else {
        return (no_vek(), None);
    };
    match roots.verify_vek(&vek.cert, &evidence_intermediates(evidence)) {
        Ok(c) => {
            let via = if c.vek_role == CertRole::Vlek {
                "ASVK"
            } else {
                "ASK"
            };
            (
                CheckOutcome::Passed(format!(
                    "{} → {} {via} → {} ARK (pinned)",
                    c.vek_role, c.product, c.product
                )),
                Some(c),
            )
        }
        Err(e) => (CheckOutcome::Failed(e), None),
    }
}

/// The ASKs and ASVKs the evidence carries (those that parse as one).
fn evidence_intermediates(evidence: &SnpEvidence) -> Vec<AmdCert> {
    evidence
        .certificates
        .iter()
        .filter(|c| matches!(c.kind, CertKind::Ask | CertKind::Asvk))
        .filter_map(|c| AmdCert::from_der(&c.der).ok())
        .filter(|c| matches!(c.role(), CertRole::Ask | CertRole::Asvk))
        .collect()
}

/// The product that decides the TCB layout: the verified chain's, else the
/// report's CPUID; without either, the certificate's own productName serves
/// the remaining (informative) checks, the verdict having failed already.
fn tcb_product(
    report: &SnpReport,
    chain: Option<VerifiedChain>,
    vek: Option<&Vek>,
) -> Option<Product> {
    chain
        .map(|c| c.product)
        .or(report.product_from_cpuid())
        .or_else(|| vek.and_then(|v| v.info.product))
}

/// [`check::VALIDITY`]: every certificate of the chain is valid at `now`.
fn check_validity(chain: Option<VerifiedChain>, now: i64) -> CheckOutcome {
    match chain {
        None => CheckOutcome::Skipped("no verified chain".into()),
        Some(c) if now < c.not_before || now > c.not_after => {
            CheckOutcome::Failed(AttestationError::Trust(Detail::with(
                &SnpRefusal::Validity,
                format!(
                    "the chain is valid from {} to {} (Unix seconds), not at {now}",
                    c.not_before, c.not_after
                ),
            )))
        }
        Some(c) => CheckOutcome::Passed(format!(
            "valid for {} more days",
            (c.not_after - now) / 86_400
        )),
    }
}

/// [`check::SIGNATURE`]: the signature over the raw signed bytes.
fn check_signature(
    report: &SnpReport,
    vek: Option<&Vek>,
    chain: Option<VerifiedChain>,
) -> CheckOutcome {
    let Some(vek) = vek else {
        return no_vek();
    };
    match verify_signature(report, &vek.info.public_key) {
        Ok(()) => CheckOutcome::Passed(format!(
            "ECDSA P-384 SHA-384 by the {}{}",
            vek.cert.role(),
            untrusted(chain)
        )),
        Err(e) => CheckOutcome::Failed(e),
    }
}

/// [`check::VERSION`]: a report version confboot reads (2 to 5).
fn check_version(report: &SnpReport) -> CheckOutcome {
    let version = report.version();
    if (2..=5).contains(&version) {
        CheckOutcome::Passed(format!("{version}"))
    } else {
        CheckOutcome::Failed(AttestationError::Decode(Detail::with(
            &SnpRefusal::Version,
            format!("unsupported SNP report version {version} (2 to 5 are read)"),
        )))
    }
}

/// [`check::SIGNING_KEY`]: `KEY_INFO` names the kind of key found.
fn check_signing_key(report: &SnpReport, vek: Option<&Vek>) -> CheckOutcome {
    let Some(vek) = vek else {
        return no_vek();
    };
    let said = report.signing_key();
    let matches = matches!(
        (said, vek.cert.role()),
        (SigningKey::Vcek, CertRole::Vcek) | (SigningKey::Vlek, CertRole::Vlek)
    );
    if matches {
        CheckOutcome::Passed(format!("{said}"))
    } else {
        CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &SnpRefusal::SigningKey,
            format!(
                "the report says it was signed by {said}, the certificate is a {}",
                vek.cert.role()
            ),
        )))
    }
}

/// [`check::ACCEPTED_SIGNING_KEY`]: the policy accepts the kind of key
/// the report names (whether that key signed is [`check::SIGNING_KEY`]'s).
fn check_accepted_signing_key(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    let said = report.signing_key();
    if policy.signing_keys.contains(&said) {
        CheckOutcome::Passed(format!("{said} (the policy accepts it)"))
    } else {
        let accepted: Vec<String> = policy.signing_keys.iter().map(|k| k.to_string()).collect();
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::SigningKeyNotAccepted,
            format!(
                "the report is signed by a {said}, the policy accepts {}",
                accepted.join(" and ")
            ),
        )))
    }
}

/// [`check::PRODUCT`]: the report's CPUID names the chain's product.
/// `product` is [`tcb_product`]'s answer.
fn check_product(
    report: &SnpReport,
    chain: Option<VerifiedChain>,
    product: Option<Product>,
) -> CheckOutcome {
    let cpuid_product = report.product_from_cpuid();
    match (chain, report.cpuid(), cpuid_product) {
        (Some(c), Some(_), Some(p)) if p != c.product => {
            CheckOutcome::Failed(AttestationError::Trust(Detail::with(
                &SnpRefusal::Product,
                format!(
                    "the report's CPUID names {p}, the certificate chain {}",
                    c.product
                ),
            )))
        }
        (_, Some((fam, model)), None) => {
            CheckOutcome::Failed(AttestationError::Decode(Detail::with(
                &SnpRefusal::Product,
                format!(
                    "the report's CPUID family {fam:#04x} model {model:#04x} is not a known SEV-SNP product"
                ),
            )))
        }
        (Some(c), _, _) => CheckOutcome::Passed(format!(
            "{}{}",
            c.product,
            if cpuid_product.is_some() {
                " (chain and CPUID agree)"
            } else {
                ""
            }
        )),
        (None, _, Some(p)) => {
            CheckOutcome::Passed(format!("{p} (from CPUID only){}", untrusted(chain)))
        }
        (None, _, None) => match product {
            Some(p) => CheckOutcome::Passed(format!("{p} (from an untrusted certificate)")),
            None => CheckOutcome::Skipped("neither a verified chain nor CPUID names it".into()),
        },
    }
}

/// [`check::CHIP_ID`]: the VCEK's hwID is the report's chip id.
fn check_chip_id(report: &SnpReport, vek: Option<&Vek>) -> CheckOutcome {
    let Some(Vek { cert, info }) = vek else {
        return no_vek();
    };
    if cert.role() == CertRole::Vlek {
        return CheckOutcome::Passed("not bound to a chip (VLEK)".into());
    }
    if report.chip_id_masked() {
        return CheckOutcome::Passed("masked by the host (all zero); not compared".into());
    }
    let Some(hw_id) = &info.hw_id else {
        return CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &SnpRefusal::ChipId,
            "the VCEK has no hwID extension",
        )));
    };
    let chip_id = report.chip_id();
    // Before Turin the hwID is the full 64-byte chip id; from Turin on it is
    // the first 8 bytes and the rest of the chip id is zero.
    let equal = !hw_id.is_empty()
        && hw_id.len() <= chip_id.len()
        && chip_id[..hw_id.len()] == hw_id[..]
        && chip_id[hw_id.len()..].iter().all(|b| *b == 0);
    if equal {
        CheckOutcome::Passed(format!(
            "{}… matches the VCEK's hwID",
            hex::encode(&chip_id[..8])
        ))
    } else {
        CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &SnpRefusal::ChipId,
            format!(
                "the VCEK's hwID {} is not the report's chip id {}",
                hex::encode(hw_id),
                hex::encode(chip_id)
            ),
        )))
    }
}

/// [`check::ALLOWED_CHIP`]: the report's chip id is one the policy lists
/// (passed when it lists none). A masked chip id (all zero) names no chip
/// and is refused while the policy pins chips. What proves the chip id
/// genuine is the report's signature ([`check::SIGNATURE`]) and, for a
/// VCEK, its hwID ([`check::CHIP_ID`]); this check only compares.
fn check_allowed_chip(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    let Some(allowed) = &policy.allowed_chip_ids else {
        return CheckOutcome::Passed("any chip (the policy pins none)".into());
    };
    let chip_id = report.chip_id();
    if report.chip_id_masked() {
        return CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::AllowedChip,
            "chip id not allowed: masked by the host (all zero), and the policy admits only \
             the chips it lists",
        )));
    }
    if allowed.iter().any(|id| id.as_slice() == chip_id) {
        CheckOutcome::Passed(format!(
            "{}… is listed ({} allowed)",
            hex::encode(&chip_id[..8]),
            allowed.len()
        ))
    } else {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::AllowedChip,
            format!("chip id not allowed: {}…", hex::encode(&chip_id[..8])),
        )))
    }
}

/// [`check::REPORTED_TCB`]: the VEK's TCB extensions are the report's
/// `REPORTED_TCB` (read in `product`'s layout).
fn check_reported_tcb(
    report: &SnpReport,
    vek: Option<&Vek>,
    product: Option<Product>,
) -> CheckOutcome {
    let Some(vek) = vek else {
        return no_vek();
    };
    let Some(p) = product else {
        return CheckOutcome::Skipped("unknown product, unknown TCB layout".into());
    };
    let reported = report.reported_tcb(p);
    let diffs = vek.info.tcb_mismatches(&reported);
    if diffs.is_empty() {
        CheckOutcome::Passed(format!("{reported} (matches the {})", vek.cert.role()))
    } else {
        CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &SnpRefusal::ReportedTcb,
            format!(
                "the {}'s TCB differs from the report's reported TCB: {}",
                vek.cert.role(),
                diffs.join(", ")
            ),
        )))
    }
}

/// [`check::REPORT_DATA`]: the `REPORT_DATA` binding.
fn check_report_data(report: &SnpReport, want: &ReportDataCheck) -> CheckOutcome {
    let got = report.report_data();
    match want {
        ReportDataCheck::NotChecked => CheckOutcome::Skipped(format!(
            "no expected value given (actual {})",
            hex::encode(got)
        )),
        ReportDataCheck::ExtraData(extra) => {
            if got[..EXTRA_DATA_LEN] != extra[..] {
                CheckOutcome::Failed(AttestationError::Binding(Detail::with(
                    &SnpRefusal::ReportData,
                    format!(
                        "report data starts with {}, expected extra data {}",
                        hex::encode(&got[..EXTRA_DATA_LEN]),
                        hex::encode(extra)
                    ),
                )))
            } else if got[EXTRA_DATA_LEN..].iter().any(|b| *b != 0) {
                CheckOutcome::Failed(AttestationError::Binding(Detail::with(
                    &SnpRefusal::ReportData,
                    format!(
                        "report data bytes 32..64 are not zero: {}",
                        hex::encode(&got[EXTRA_DATA_LEN..])
                    ),
                )))
            } else {
                CheckOutcome::Passed("extra data, zero-padded".into())
            }
        }
        ReportDataCheck::Exact(bytes) => {
            if got == bytes.as_slice() {
                CheckOutcome::Passed("equals the expected 64 bytes".into())
            } else {
                CheckOutcome::Failed(AttestationError::Binding(Detail::with(
                    &SnpRefusal::ReportData,
                    format!(
                        "report data {}, expected {}",
                        hex::encode(got),
                        hex::encode(bytes)
                    ),
                )))
            }
        }
    }
}

/// [`check::DEBUG`]: the guest policy disallows debugging unless the policy
/// permits it.
fn check_debug(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    if report.debug_allowed() && !policy.allow_debug {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::Debug,
            format!(
                "the guest policy {:#x} allows debugging",
                report.guest_policy()
            ),
        )))
    } else if report.debug_allowed() {
        CheckOutcome::Passed("debugging allowed (the policy permits it)".into())
    } else {
        CheckOutcome::Passed("debugging disallowed".into())
    }
}

/// [`check::SMT`]: a guest that lets the host run SMT only if the policy
/// accepts it.
fn check_smt(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    match (report.smt_allowed(), policy.allow_smt) {
        (true, false) => CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::Smt,
            format!(
                "the guest policy {:#x} allows SMT, the policy requires it off",
                report.guest_policy()
            ),
        ))),
        (true, true) => CheckOutcome::Passed("SMT allowed (the policy permits it)".into()),
        (false, _) => CheckOutcome::Passed("SMT disallowed".into()),
    }
}

/// [`check::MIGRATION_AGENT`]: a guest that allows a migration agent only if
/// the policy accepts it.
fn check_migration_agent(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    match (report.migrate_ma_allowed(), policy.allow_migration_agent) {
        (true, false) => CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::MigrationAgent,
            format!(
                "the guest policy {:#x} allows a migration agent",
                report.guest_policy()
            ),
        ))),
        (true, true) => {
            CheckOutcome::Passed("migration agent allowed (the policy permits it)".into())
        }
        (false, _) => CheckOutcome::Passed("no migration agent".into()),
    }
}

/// [`check::MIN_ABI`]: the firmware's ABI version is at least the policy's.
fn check_minimum_abi(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    let (major, minor) = report.firmware_abi();
    let (min_major, min_minor) = policy.minimum_abi;
    if (major, minor) >= (min_major, min_minor) {
        CheckOutcome::Passed(format!("{major}.{minor}"))
    } else {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::MinimumAbi,
            format!("firmware ABI {major}.{minor} is below the minimum {min_major}.{min_minor}"),
        )))
    }
}

/// [`check::VMPL`]: the report's VMPL is the policy's.
fn check_vmpl(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    if report.vmpl() == policy.vmpl {
        CheckOutcome::Passed(format!("{}", report.vmpl()))
    } else {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::Vmpl,
            format!(
                "report VMPL {}, policy requires {}",
                report.vmpl(),
                policy.vmpl
            ),
        )))
    }
}

/// [`check::MIN_REPORTED_TCB`] and [`check::MIN_LAUNCH_TCB`]: the `which`
/// TCB (skipped when the product, hence its layout, is unknown) is at least
/// the policy's minimum, or the product's safe default when the policy names
/// none (refused when there is no default for the product).
fn check_minimum_tcb(
    reason: &'static SnpRefusal,
    which: &str,
    product: Option<Product>,
    tcb_of: impl Fn(Product) -> TcbVersion,
    policy: &SnpPolicy,
) -> CheckOutcome {
    let Some(product) = product else {
        return CheckOutcome::Skipped("unknown product, unknown TCB layout".into());
    };
    let tcb = tcb_of(product);
    let Some(minimum) = policy
        .minimum_tcb
        .or_else(|| MinimumTcb::default_for(product))
    else {
        return CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            reason,
            format!(
                "no minimum TCB is known for {product:?}: the policy must name one (minimumTcb)"
            ),
        )));
    };
    let short = minimum.shortfalls(&tcb);
    if short.is_empty() {
        let near = minimum.near(&tcb, policy.tcb_warning_margin);
        if near.is_empty() {
            return CheckOutcome::Passed(format!("{tcb}"));
        }
        let warning = format!(
            "{which} TCB within {} SVNs of the minimum: {}",
            policy.tcb_warning_margin,
            near.join(", ")
        );
        log::warn!("SEV-SNP report admitted with a warning: {warning}");
        CheckOutcome::Passed(format!("{tcb}; {WARNING_MARK}{warning}"))
    } else {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            reason,
            format!("{which} TCB below the minimum: {}", short.join(", ")),
        )))
    }
}

/// [`check::MEASUREMENT`]: the launch measurement against the policy's
/// (skipped when the policy names none).
fn check_measurement(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    if policy.image_by_reference_values {
        return CheckOutcome::Passed(format!(
            "{} (matched against the signed reference-value sets by the caller)",
            hex::encode(report.measurement())
        ));
    }
    if !policy.measurement.entries().contains_key(&0) {
        return CheckOutcome::Skipped(format!(
            "no expected measurement in the policy (actual {})",
            hex::encode(report.measurement())
        ));
    }
    let measured = BTreeMap::from([(0u32, report.measurement().to_vec())]);
    match policy.measurement.check(&measured) {
        Ok(w) if w.is_empty() => CheckOutcome::Passed(hex::encode(report.measurement())),
        Ok(w) => CheckOutcome::Passed(format!("{WARNING_MARK}{}", w.join("; "))),
        Err(e) => CheckOutcome::Failed(e),
    }
}

/// [`check::HOST_DATA`]: `HOST_DATA` is the policy's, when it names one.
fn check_host_data(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    match &policy.host_data {
        None => CheckOutcome::Passed(format!(
            "{} (not constrained by the policy)",
            hex::encode(report.host_data())
        )),
        Some(want) if want.as_slice() == report.host_data() => {
            CheckOutcome::Passed(hex::encode(report.host_data()))
        }
        Some(want) => CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::HostData,
            format!(
                "host data {}, policy requires {}",
                hex::encode(report.host_data()),
                hex::encode(want)
            ),
        ))),
    }
}

/// [`check::ID_KEY`]: `ID_KEY_DIGEST` is one the policy accepts, when it
/// names any.
fn check_id_key(report: &SnpReport, policy: &SnpPolicy) -> CheckOutcome {
    let digest = report.id_key_digest();
    if policy.id_key_digests.is_empty() {
        CheckOutcome::Passed(format!(
            "{} (not constrained by the policy)",
            hex::encode(digest)
        ))
    } else if policy.id_key_digests.iter().any(|d| d.as_slice() == digest) {
        CheckOutcome::Passed(hex::encode(digest))
    } else {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &SnpRefusal::IdKey,
            format!(
                "ID key digest {} is not one the policy accepts",
                hex::encode(digest)
            ),
        )))
    }
}

/// The verdict as a validator gives it at time `now`: every check must pass.
pub fn verify(
    evidence: &SnpEvidence,
    report_data: &ReportDataCheck,
    policy: &SnpPolicy,
    roots: &TrustRoots,
    now: i64,
) -> Result<Attested, AttestationError> {
    // A report bound to another handshake (replayed, or made for another
    // nonce) is refused before any certificate or signature is verified:
    // the outcome is the same, as every check must pass, for the price of
    // a comparison instead of a chain of RSA and P-384 verifications.
    if let CheckOutcome::Failed(e) = check_report_data(&evidence.report, report_data) {
        return Err(e);
    }
    let checks = run_checks(evidence, report_data, policy, roots, now);
    if let Some(e) = first_failure(&checks) {
        return Err(e);
    }
    let report = &evidence.report;
    let launch = [report.chip_id(), report.report_id()].concat();
    Ok(Attested {
        set_verdict: None,
        warnings: checks
            .iter()
            .filter_map(|c| Some(format!("{}: {}", c.name, c.warning()?)))
            .collect(),
        variant: Variant::SevSnp,
        measurements: BTreeMap::from([
            (0, report.measurement().to_vec()),
            (super::LAUNCH_IDENTITY_INDEX, launch),
        ]),
    })
}

/// Verifies the report's signature over its raw signed bytes with the
/// endorsement key (`public_key`: SEC1 uncompressed P-384 point).
pub fn verify_signature(report: &SnpReport, public_key: &[u8]) -> Result<(), AttestationError> {
    let algo = report.signature_algo();
    if algo != 1 {
        return Err(AttestationError::Signature(Detail::with(
            &SnpRefusal::ReportSignature,
            format!("report signature: algorithm {algo} is not ECDSA P-384 with SHA-384 (1)"),
        )));
    }
    let sig = report.signature_fixed()?;
    UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, public_key)
        .verify(report.signed_bytes(), &sig)
        .map_err(|_| {
            AttestationError::Signature(Detail::with(
                &SnpRefusal::ReportSignature,
                "report signature does not verify with the endorsement key",
            ))
        })
}
