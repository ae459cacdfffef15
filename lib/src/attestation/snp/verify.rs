//! The SEV-SNP checks, one by one, so that a command can print each and a
//! validator can stop at the first failure.

use std::collections::BTreeMap;
use std::fmt;

use ring::signature::{ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};

use super::certs::{AmdCert, CertRole, TrustRoots, VekInfo, VerifiedChain};
use super::evidence::{CertKind, SnpEvidence};
use super::policy::SnpPolicy;
use super::report::{Product, SigningKey, SnpReport};
use super::vek_lookup::find_vek;
use crate::attestation::{AttestationError, Attested, EXTRA_DATA_LEN, Variant};
use crate::hex;

/// What `REPORT_DATA` must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportDataCheck {
    /// confboot's binding: the first 32 bytes are `extra_data`, the rest zero.
    ExtraData([u8; EXTRA_DATA_LEN]),
    /// All 64 bytes, exactly (reports made by other tools).
    Exact([u8; 64]),
    /// Not checked (an offline look at a report): reported as skipped.
    NotChecked,
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The check passed; the text says what was established.
    Passed(String),
    /// The check failed.
    Failed(AttestationError),
    /// The check could not run (an input or a prerequisite is missing).
    Skipped(String),
}

/// One named check and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// Short name of the check, e.g. `"report signature"`.
    pub name: &'static str,
    /// What happened.
    pub outcome: CheckOutcome,
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            CheckOutcome::Passed(d) => write!(f, "✓ {}: {d}", self.name),
            CheckOutcome::Failed(e) => write!(f, "✗ {}: {e}", self.name),
            CheckOutcome::Skipped(d) => write!(f, "- {}: skipped, {d}", self.name),
        }
    }
}

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
    /// The report's CPUID names the chain's product.
    pub const PRODUCT: &str = "product";
    /// The VCEK's hwID is the report's chip id.
    pub const CHIP_ID: &str = "chip id";
    /// The VEK's TCB extensions are the report's `REPORTED_TCB`.
    pub const REPORTED_TCB: &str = "reported TCB";
    /// `REPORT_DATA` binding.
    pub const REPORT_DATA: &str = "report data";
    /// The DEBUG guest policy bit.
    pub const DEBUG: &str = "debug";
    /// The VMPL.
    pub const VMPL: &str = "VMPL";
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

/// Runs every check on `evidence` at time `now` (Unix seconds). Checks that
/// depend on the endorsement key still run on an untrusted one (their text
/// then says so); the overall verdict comes from [`first_failure`].
pub fn run_checks(
    evidence: &SnpEvidence,
    report_data: &ReportDataCheck,
    policy: &SnpPolicy,
    roots: &TrustRoots,
    now: i64,
) -> Vec<CheckResult> {
    let report = &evidence.report;
    let mut out = Vec::with_capacity(16);
    let mut push = |name: &'static str, outcome: CheckOutcome| {
        out.push(CheckResult { name, outcome });
    };

    // The endorsement key and its chain.
    let vek_parsed = match find_vek(evidence, policy, roots)
        .and_then(|(cert, source)| VekInfo::from_der(cert.der()).map(|info| (cert, source, info)))
    {
        Ok((cert, source, info)) => {
            push(
                check::VEK,
                CheckOutcome::Passed(format!("{} from {source}", cert.role())),
            );
            Some((cert, info))
        }
        Err(e) => {
            push(check::VEK, CheckOutcome::Failed(e));
            None
        }
    };
    let chain: Option<VerifiedChain> = match &vek_parsed {
        None => {
            push(
                check::CHAIN,
                CheckOutcome::Skipped("no endorsement key".into()),
            );
            None
        }
        Some((cert, _)) => {
            let intermediates = evidence_intermediates(evidence);
            match roots.verify_vek(cert, &intermediates) {
                Ok(c) => {
                    let via = if c.vek_role == CertRole::Vlek {
                        "ASVK"
                    } else {
                        "ASK"
                    };
                    push(
                        check::CHAIN,
                        CheckOutcome::Passed(format!(
                            "{} → {} {via} → {} ARK (pinned)",
                            c.vek_role, c.product, c.product
                        )),
                    );
                    Some(c)
                }
                Err(e) => {
                    push(check::CHAIN, CheckOutcome::Failed(e));
                    None
                }
            }
        }
    };
    match chain {
        None => push(
            check::VALIDITY,
            CheckOutcome::Skipped("no verified chain".into()),
        ),
        Some(c) if now < c.not_before || now > c.not_after => push(
            check::VALIDITY,
            CheckOutcome::Failed(AttestationError::Trust(format!(
                "the chain is valid from {} to {} (Unix seconds), not at {now}",
                c.not_before, c.not_after
            ))),
        ),
        Some(c) => push(
            check::VALIDITY,
            CheckOutcome::Passed(format!(
                "valid for {} more days",
                (c.not_after - now) / 86_400
            )),
        ),
    }
    let untrusted = if chain.is_some() {
        ""
    } else {
        " (by an untrusted key)"
    };

    // The signature over the raw signed bytes.
    match &vek_parsed {
        None => push(
            check::SIGNATURE,
            CheckOutcome::Skipped("no endorsement key".into()),
        ),
        Some((cert, info)) => match verify_signature(report, &info.public_key) {
            Ok(()) => push(
                check::SIGNATURE,
                CheckOutcome::Passed(format!(
                    "ECDSA P-384 SHA-384 by the {}{untrusted}",
                    cert.role()
                )),
            ),
            Err(e) => push(check::SIGNATURE, CheckOutcome::Failed(e)),
        },
    }

    let version = report.version();
    if (2..=5).contains(&version) {
        push(check::VERSION, CheckOutcome::Passed(format!("{version}")));
    } else {
        push(
            check::VERSION,
            CheckOutcome::Failed(AttestationError::Decode(format!(
                "unsupported SNP report version {version} (2 to 5 are read)"
            ))),
        );
    }

    match &vek_parsed {
        None => push(
            check::SIGNING_KEY,
            CheckOutcome::Skipped("no endorsement key".into()),
        ),
        Some((cert, _)) => {
            let said = report.signing_key();
            let matches = matches!(
                (said, cert.role()),
                (SigningKey::Vcek, CertRole::Vcek) | (SigningKey::Vlek, CertRole::Vlek)
            );
            if matches {
                push(check::SIGNING_KEY, CheckOutcome::Passed(format!("{said}")));
            } else {
                push(
                    check::SIGNING_KEY,
                    CheckOutcome::Failed(AttestationError::Trust(format!(
                        "the report says it was signed by {said}, the certificate is a {}",
                        cert.role()
                    ))),
                );
            }
        }
    }

    // The product decides the TCB layout: the chain's, else the report's CPUID.
    let cpuid_product = report.product_from_cpuid();
    // Without a verified chain the certificate's own productName serves the
    // remaining (informative) checks; the verdict has failed already then.
    let product: Option<Product> = chain
        .map(|c| c.product)
        .or(cpuid_product)
        .or_else(|| vek_parsed.as_ref().and_then(|(_, info)| info.product));
    match (chain, report.cpuid(), cpuid_product) {
        (Some(c), Some(_), Some(p)) if p != c.product => push(
            check::PRODUCT,
            CheckOutcome::Failed(AttestationError::Trust(format!(
                "the report's CPUID names {p}, the certificate chain {}",
                c.product
            ))),
        ),
        (_, Some((fam, model)), None) => push(
            check::PRODUCT,
            CheckOutcome::Failed(AttestationError::Decode(format!(
                "the report's CPUID family {fam:#04x} model {model:#04x} is not a known SEV-SNP product"
            ))),
        ),
        (Some(c), _, _) => push(
            check::PRODUCT,
            CheckOutcome::Passed(format!(
                "{}{}",
                c.product,
                if cpuid_product.is_some() {
                    " (chain and CPUID agree)"
                } else {
                    ""
                }
            )),
        ),
        (None, _, Some(p)) => push(
            check::PRODUCT,
            CheckOutcome::Passed(format!("{p} (from CPUID only){untrusted}")),
        ),
        (None, _, None) => match product {
            Some(p) => push(
                check::PRODUCT,
                CheckOutcome::Passed(format!("{p} (from an untrusted certificate)")),
            ),
            None => push(
                check::PRODUCT,
                CheckOutcome::Skipped("neither a verified chain nor CPUID names it".into()),
            ),
        },
    }

    // Chip id.
    match &vek_parsed {
        None => push(
            check::CHIP_ID,
            CheckOutcome::Skipped("no endorsement key".into()),
        ),
        Some((cert, info)) => push(check::CHIP_ID, check_chip_id(report, cert.role(), info)),
    }

    // TCB extensions vs REPORTED_TCB.
    match (&vek_parsed, product) {
        (None, _) => push(
            check::REPORTED_TCB,
            CheckOutcome::Skipped("no endorsement key".into()),
        ),
        (_, None) => push(
            check::REPORTED_TCB,
            CheckOutcome::Skipped("unknown product, unknown TCB layout".into()),
        ),
        (Some((cert, info)), Some(p)) => {
            let reported = report.reported_tcb(p);
            let diffs = info.tcb_mismatches(&reported);
            if diffs.is_empty() {
                push(
                    check::REPORTED_TCB,
                    CheckOutcome::Passed(format!("{reported} (matches the {})", cert.role())),
                );
            } else {
                push(
                    check::REPORTED_TCB,
                    CheckOutcome::Failed(AttestationError::Trust(format!(
                        "the {}'s TCB differs from the report's reported TCB: {}",
                        cert.role(),
                        diffs.join(", ")
                    ))),
                );
            }
        }
    }

    push(check::REPORT_DATA, check_report_data(report, report_data));

    if report.debug_allowed() && !policy.allow_debug {
        push(
            check::DEBUG,
            CheckOutcome::Failed(AttestationError::Policy(format!(
                "the guest policy {:#x} allows debugging",
                report.guest_policy()
            ))),
        );
    } else {
        push(
            check::DEBUG,
            CheckOutcome::Passed(if report.debug_allowed() {
                "debugging allowed (the policy permits it)".into()
            } else {
                "debugging disallowed".into()
            }),
        );
    }

    if report.vmpl() == policy.vmpl {
        push(
            check::VMPL,
            CheckOutcome::Passed(format!("{}", report.vmpl())),
        );
    } else {
        push(
            check::VMPL,
            CheckOutcome::Failed(AttestationError::Policy(format!(
                "report VMPL {}, policy requires {}",
                report.vmpl(),
                policy.vmpl
            ))),
        );
    }

    for (name, which) in [
        (check::MIN_REPORTED_TCB, "reported"),
        (check::MIN_LAUNCH_TCB, "launch"),
    ] {
        let Some(p) = product else {
            push(
                name,
                CheckOutcome::Skipped("unknown product, unknown TCB layout".into()),
            );
            continue;
        };
        let tcb = if which == "reported" {
            report.reported_tcb(p)
        } else {
            report.launch_tcb(p)
        };
        let short = policy.minimum_tcb.shortfalls(&tcb);
        if short.is_empty() {
            push(name, CheckOutcome::Passed(format!("{tcb}")));
        } else {
            push(
                name,
                CheckOutcome::Failed(AttestationError::Policy(format!(
                    "{which} TCB below the minimum: {}",
                    short.join(", ")
                ))),
            );
        }
    }

    let measured = BTreeMap::from([(0u32, report.measurement().to_vec())]);
    if !policy.measurement.entries().contains_key(&0) {
        push(
            check::MEASUREMENT,
            CheckOutcome::Skipped(format!(
                "no expected measurement in the policy (actual {})",
                hex::encode(report.measurement())
            )),
        );
    } else {
        match policy.measurement.check(&measured) {
            Ok(w) if w.is_empty() => push(
                check::MEASUREMENT,
                CheckOutcome::Passed(hex::encode(report.measurement())),
            ),
            Ok(w) => push(
                check::MEASUREMENT,
                CheckOutcome::Passed(format!("warning: {}", w.join("; "))),
            ),
            Err(e) => push(check::MEASUREMENT, CheckOutcome::Failed(e)),
        }
    }

    match &policy.host_data {
        None => push(
            check::HOST_DATA,
            CheckOutcome::Passed(format!(
                "{} (not constrained by the policy)",
                hex::encode(report.host_data())
            )),
        ),
        Some(want) if want.as_slice() == report.host_data() => push(
            check::HOST_DATA,
            CheckOutcome::Passed(hex::encode(report.host_data())),
        ),
        Some(want) => push(
            check::HOST_DATA,
            CheckOutcome::Failed(AttestationError::Policy(format!(
                "host data {}, policy requires {}",
                hex::encode(report.host_data()),
                hex::encode(want)
            ))),
        ),
    }

    if policy.id_key_digests.is_empty() {
        push(
            check::ID_KEY,
            CheckOutcome::Passed(format!(
                "{} (not constrained by the policy)",
                hex::encode(report.id_key_digest())
            )),
        );
    } else if policy
        .id_key_digests
        .iter()
        .any(|d| d.as_slice() == report.id_key_digest())
    {
        push(
            check::ID_KEY,
            CheckOutcome::Passed(hex::encode(report.id_key_digest())),
        );
    } else {
        push(
            check::ID_KEY,
            CheckOutcome::Failed(AttestationError::Policy(format!(
                "ID key digest {} is not one the policy accepts",
                hex::encode(report.id_key_digest())
            ))),
        );
    }

    out
}

/// The verdict of a list of checks, failing closed: the first failure, or
/// a [`AttestationError::Policy`] error naming the first skipped check.
pub fn first_failure(checks: &[CheckResult]) -> Option<AttestationError> {
    if let Some(e) = checks.iter().find_map(|c| match &c.outcome {
        CheckOutcome::Failed(e) => Some(e.clone()),
        _ => None,
    }) {
        return Some(e);
    }
    checks.iter().find_map(|c| match &c.outcome {
        CheckOutcome::Skipped(why) => Some(AttestationError::Policy(format!(
            "check {:?} was not performed: {why}",
            c.name
        ))),
        _ => None,
    })
}

/// The verdict as a validator gives it at time `now`: every check must pass.
pub fn verify(
    evidence: &SnpEvidence,
    report_data: &ReportDataCheck,
    policy: &SnpPolicy,
    roots: &TrustRoots,
    now: i64,
) -> Result<Attested, AttestationError> {
    let checks = run_checks(evidence, report_data, policy, roots, now);
    if let Some(e) = first_failure(&checks) {
        return Err(e);
    }
    Ok(Attested {
        variant: Variant::SevSnp,
        measurements: BTreeMap::from([(0, evidence.report.measurement().to_vec())]),
    })
}

fn evidence_intermediates(evidence: &SnpEvidence) -> Vec<AmdCert> {
    evidence
        .certificates
        .iter()
        .filter(|c| matches!(c.kind, CertKind::Ask | CertKind::Asvk))
        .filter_map(|c| AmdCert::from_der(&c.der).ok())
        .filter(|c| matches!(c.role(), CertRole::Ask | CertRole::Asvk))
        .collect()
}

/// Verifies the report's signature over its raw signed bytes with the
/// endorsement key (`public_key`: SEC1 uncompressed P-384 point).
pub fn verify_signature(report: &SnpReport, public_key: &[u8]) -> Result<(), AttestationError> {
    let algo = report.signature_algo();
    if algo != 1 {
        return Err(AttestationError::Signature(format!(
            "report signature: algorithm {algo} is not ECDSA P-384 with SHA-384 (1)"
        )));
    }
    let sig = report.signature_fixed()?;
    UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, public_key)
        .verify(report.signed_bytes(), &sig)
        .map_err(|_| {
            AttestationError::Signature(
                "report signature does not verify with the endorsement key".into(),
            )
        })
}

fn check_chip_id(report: &SnpReport, role: CertRole, info: &VekInfo) -> CheckOutcome {
    if role == CertRole::Vlek {
        return CheckOutcome::Passed("not bound to a chip (VLEK)".into());
    }
    if report.chip_id_masked() {
        return CheckOutcome::Passed("masked by the host (all zero); not compared".into());
    }
    let Some(hw_id) = &info.hw_id else {
        return CheckOutcome::Failed(AttestationError::Trust(
            "the VCEK has no hwID extension".into(),
        ));
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
        CheckOutcome::Failed(AttestationError::Trust(format!(
            "the VCEK's hwID {} is not the report's chip id {}",
            hex::encode(hw_id),
            hex::encode(chip_id)
        )))
    }
}

fn check_report_data(report: &SnpReport, want: &ReportDataCheck) -> CheckOutcome {
    let got = report.report_data();
    match want {
        ReportDataCheck::NotChecked => CheckOutcome::Skipped(format!(
            "no expected value given (actual {})",
            hex::encode(got)
        )),
        ReportDataCheck::ExtraData(extra) => {
            if got[..EXTRA_DATA_LEN] != extra[..] {
                CheckOutcome::Failed(AttestationError::Binding(format!(
                    "report data starts with {}, expected extra data {}",
                    hex::encode(&got[..EXTRA_DATA_LEN]),
                    hex::encode(extra)
                )))
            } else if got[EXTRA_DATA_LEN..].iter().any(|b| *b != 0) {
                CheckOutcome::Failed(AttestationError::Binding(format!(
                    "report data bytes 32..64 are not zero: {}",
                    hex::encode(&got[EXTRA_DATA_LEN..])
                )))
            } else {
                CheckOutcome::Passed("extra data, zero-padded".into())
            }
        }
        ReportDataCheck::Exact(bytes) => {
            if got == bytes.as_slice() {
                CheckOutcome::Passed("equals the expected 64 bytes".into())
            } else {
                CheckOutcome::Failed(AttestationError::Binding(format!(
                    "report data {}, expected {}",
                    hex::encode(got),
                    hex::encode(bytes)
                )))
            }
        }
    }
}
