//! `confboot verify-report`: verifies an AMD SEV-SNP attestation report
//! offline and prints each check (✓ passed, ✗ failed, - skipped), one line
//! each. Exits 0 when no check failed, 1 when one did, 2 on bad arguments
//! or unreadable inputs. The checks themselves live in the library
//! (`SnpValidator::verify_report_detailed`); this only reads files and prints.

use std::path::Path;

use confboot_attest::AttestationError;
use confboot_attest::measurements::MAX_POLICY_BYTES;
use confboot_attest::snp::{
    AmdCert, CertEntry, CertKind, CertRole, CheckOutcome, KDS_BASE_URL, Product, ProductRoot,
    ReportDataCheck, SnpEvidence, SnpPolicy, SnpReport, SnpValidator, TrustRoots,
    certificates_from_pem_or_der, check, kds_vcek_url,
};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot_util::fs::{MAX_CONFIG_FILE_BYTES, read_bounded, read_bounded_text};

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot verify-report",
    about: "Verifies an AMD SEV-SNP attestation report offline, like `snpguest verify`, and \
prints every check on its own line (✓ passed, ✗ failed, - skipped). The report's VCEK or VLEK \
comes from --vcek, --certs, the evidence, or a VCEK cache; the AMD root (ARK) is pinned: the \
Milan, Genoa and Turin roots built in, or --roots / the policy's rootBundles. Without --policy \
the measurement is not checked, VMPL 0 is required, debug is refused and the safe default minimum TCB applies (Milan: bootloader 3, TEE 0, SNP 8, microcode 115; other products need a policy that names one). \
Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments or unreadable input.",
    usage: "confboot verify-report --report FILE [--vcek FILE | --certs DIR] [--chain FILE] [--policy FILE] [OPTIONS]",
    opts: &[
        Opt::value(
            "report",
            "FILE",
            "The raw 1184-byte attestation report (as snpguest report writes it)",
        ),
        Opt::value(
            "evidence",
            "FILE",
            "Instead of --report: confboot sev-snp evidence (confboot.snp.Evidence, as carried in aTLS)",
        ),
        Opt::value(
            "vcek",
            "FILE",
            "The VCEK or VLEK that signed the report (DER or PEM)",
        ),
        Opt::value(
            "certs",
            "DIR",
            "A certificate-table directory (snpguest certificates): vcek/vlek/ask/asvk/ark .der or .pem",
        ),
        Opt::value(
            "chain",
            "FILE",
            "PEM with the ASK and/or ASVK (and ARK, which is ignored: roots are pinned)",
        ),
        Opt::value(
            "roots",
            "FILE",
            "Pin this PEM bundle (ARK, optional ASK/ASVK) instead of the built-in roots (repeatable)",
        ),
        Opt::value(
            "policy",
            "FILE",
            "SEV-SNP policy JSON (measurement, minimumTcb, vmpl, ...); also --snp-policy, its name \
             on init, recover and verify",
        )
        .aliases(&["snp-policy"]),
        Opt::value(
            "extra-data",
            "HEX",
            "Expect confboot's binding: report_data = these 32 bytes, then 32 zero bytes",
        ),
        Opt::value(
            "report-data",
            "HEX",
            "Expect report_data to equal these 64 bytes exactly",
        ),
        Opt::value("vmpl", "N", "Require this VMPL (overrides the policy's)"),
        Opt::value(
            "at",
            "TIME",
            "Check certificate validity at TIME (Unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ) instead of now, to examine an old report",
        ),
        Opt::value(
            "vcek-cache",
            "DIR",
            "Look the VCEK up in DIR/<chip_id hex>/<reported_tcb hex>.der (overrides the policy's)",
        ),
        VERBOSITY,
    ],
};

/// Runs the command on the arguments that follow `verify-report`; returns
/// the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify-report", verbosity);
    match run_matches(&m) {
        Ok(status) => status,
        Err(e) => usage_error(&e),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("verify-report: {msg}\nTry 'confboot verify-report --help'.");
    2
}

/// Reads an input file (at most [`MAX_CONFIG_FILE_BYTES`]).
fn read(path: &str, what: &str) -> Result<Vec<u8>, String> {
    read_bounded(Path::new(path), MAX_CONFIG_FILE_BYTES)
        .map(|mut bytes| std::mem::take(&mut *bytes))
        .map_err(|e| format!("{what}: {e}"))
}

/// Certificates from a file (DER or PEM), each with the kind its subject names.
fn certs_from_file(path: &str, what: &str) -> Result<Vec<CertEntry>, String> {
    let bytes = read(path, what)?;
    let ders = certificates_from_pem_or_der(&bytes).map_err(|e| format!("{what} {path}: {e}"))?;
    ders.into_iter()
        .map(|der| {
            let cert = AmdCert::from_der(&der).map_err(|e| format!("{what} {path}: {e}"))?;
            let kind = match cert.role() {
                CertRole::Vcek => CertKind::Vcek,
                CertRole::Vlek => CertKind::Vlek,
                CertRole::Ask => CertKind::Ask,
                CertRole::Asvk => CertKind::Asvk,
                CertRole::Ark => CertKind::Ark,
            };
            Ok(CertEntry { kind, der })
        })
        .collect()
}

fn run_matches(m: &Matches) -> Result<i32, String> {
    if !m.positional().is_empty() {
        return Err(format!("unexpected argument {:?}", m.positional()[0]));
    }
    let mut evidence = match (m.value("report"), m.value("evidence")) {
        (Some(_), Some(_)) => return Err("give --report or --evidence, not both".into()),
        (None, None) => return Err("--report FILE (or --evidence FILE) is required".into()),
        (Some(path), None) => {
            let bytes = read(path, "report")?;
            SnpEvidence {
                report: SnpReport::from_bytes(&bytes).map_err(|e| format!("{path}: {e}"))?,
                certificates: Vec::new(),
            }
        }
        (None, Some(path)) => {
            SnpEvidence::decode(&read(path, "evidence")?).map_err(|e| format!("{path}: {e}"))?
        }
    };

    // Certificates given on the command line come first, so they are the
    // ones used when the evidence also carries some.
    let mut given = Vec::new();
    if let Some(path) = m.value("vcek") {
        given.extend(certs_from_file(path, "VCEK")?);
    }
    if let Some(dir) = m.value("certs") {
        let mut found = 0;
        for name in ["vcek", "vlek", "ask", "asvk", "ark", "cert_chain"] {
            for ext in ["der", "pem"] {
                let path = Path::new(dir).join(format!("{name}.{ext}"));
                if path.is_file() {
                    given.extend(certs_from_file(&path.to_string_lossy(), "certificate")?);
                    found += 1;
                }
            }
        }
        if found == 0 {
            return Err(format!(
                "no certificates (vcek.der, vlek.pem, ...) in {dir}"
            ));
        }
    }
    if let Some(path) = m.value("chain") {
        given.extend(certs_from_file(path, "chain")?);
    }
    given.append(&mut evidence.certificates);
    evidence.certificates = given;

    let mut policy = match m.value("policy") {
        Some(path) => {
            let path = Path::new(path);
            let text = read_bounded_text(path, MAX_POLICY_BYTES).map_err(|e| e.to_string())?;
            // Relative paths in the policy are relative to its file.
            SnpPolicy::from_json_at(&text, path.parent())
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => SnpPolicy::default(),
    };
    if let Some(v) = m.parsed::<u32>("vmpl").map_err(|e| e.to_string())? {
        if v > 3 {
            return Err(format!("--vmpl {v}: VMPL is 0 to 3"));
        }
        policy.vmpl = v;
    }
    if let Some(dir) = m.value("vcek-cache") {
        policy.vcek_cache_dir = Some(dir.into());
    }
    let roots_given = m.values("roots");
    let validator = if roots_given.is_empty() {
        SnpValidator::new(policy).map_err(|e| e.to_string())?
    } else {
        let mut roots = Vec::new();
        for path in roots_given {
            let pem = read(path, "roots")?;
            roots.push(ProductRoot::from_pem_bundle(&pem).map_err(|e| format!("{path}: {e}"))?);
        }
        SnpValidator::with_roots(policy, TrustRoots::new(roots))
    };
    let validator = match m.value("at") {
        Some(at) => validator
            .as_of(confboot_util::time::parse_instant(at).map_err(|e| format!("--at {e}"))?),
        None => validator,
    };

    let report_data = match (m.value("extra-data"), m.value("report-data")) {
        (Some(_), Some(_)) => return Err("give --extra-data or --report-data, not both".into()),
        (Some(h), None) => ReportDataCheck::ExtraData(hex_array(h, "--extra-data")?),
        (None, Some(h)) => ReportDataCheck::Exact(hex_array(h, "--report-data")?),
        (None, None) => ReportDataCheck::NotChecked,
    };

    let report = &evidence.report;
    println!(
        "SEV-SNP report: version {}, VMPL {}, measurement {}",
        report.version(),
        report.vmpl(),
        confboot_util::hex::encode(report.measurement())
    );
    let checks = validator.verify_report_detailed(&evidence, &report_data);
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for c in &checks {
        println!("{c}");
        match c.outcome {
            CheckOutcome::Passed(_) => passed += 1,
            CheckOutcome::Failed(_) => failed += 1,
            CheckOutcome::Skipped(_) => skipped += 1,
        }
    }
    let vek_missing = checks.iter().any(|c| {
        c.name == check::VEK
            && matches!(&c.outcome, CheckOutcome::Failed(AttestationError::Trust(m)) if m.contains("no VCEK or VLEK"))
    });
    if vek_missing {
        print_kds_hint(report);
    }
    if failed == 0 {
        println!("VERIFIED: {passed} checks passed, {skipped} skipped");
        Ok(0)
    } else {
        println!("FAILED: {failed} of {} checks failed", checks.len());
        Ok(1)
    }
}

/// Where to fetch the missing VCEK (this command itself never goes online).
fn print_kds_hint(report: &SnpReport) {
    let products: Vec<Product> = match report.product_from_cpuid() {
        Some(p) => vec![p],
        // Version 2 names no CPU: a Turin chip id has only 8 bytes.
        None if report.chip_id()[8..].iter().all(|b| *b == 0) => vec![Product::Turin],
        None => vec![Product::Milan, Product::Genoa],
    };
    for p in products {
        if let Some(url) = kds_vcek_url(KDS_BASE_URL, p, report) {
            println!("hint: if this is a {p} chip, its VCEK is at {url} (pass it with --vcek)");
        }
    }
}

fn hex_array<const N: usize>(text: &str, what: &str) -> Result<[u8; N], String> {
    let bytes = confboot_util::hex::decode(text).map_err(|e| format!("{what}: {e}"))?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| format!("{what}: {} bytes, want {N}", bytes.len()))
}
