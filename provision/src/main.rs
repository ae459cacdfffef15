//! `confboot-tpm-provision`: plays the cloud provider for a (software) TPM.
//!
//! It creates the attestation key (AK) in the owner hierarchy and persists it
//! at a handle (default 0x81000003), issues an AK certificate signed by a CA
//! (given as files, or generated into the output directory) and writes it
//! (DER) to NV index 0x01C101D0, as Azure does. It uses tss-esapi (the C
//! tpm2-tss stack), which makes it an independent cross-check of confboot's
//! own pure-Rust TPM layer. It links dynamically and is a test/dev tool,
//! never part of a node image.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use confboot_util::args::{Command, Matches, Opt, VERBOSITY, exit_usage, parse_or_exit};
use tss_esapi::{
    Context, TctiNameConf,
    attributes::{NvIndexAttributesBuilder, ObjectAttributesBuilder},
    handles::{NvIndexTpmHandle, ObjectHandle, PersistentTpmHandle, TpmHandle},
    interface_types::{
        algorithm::{HashingAlgorithm, PublicAlgorithm},
        dynamic_handles::Persistent,
        ecc::EccCurve,
        resource_handles::{Hierarchy, NvAuth, Provision},
        session_handles::AuthSession,
    },
    structures::{
        EccPoint, EccScheme, HashScheme, KeyDerivationFunctionScheme, MaxNvBuffer, NvPublicBuilder,
        Public, PublicBuilder, PublicEccParameters, SymmetricDefinitionObject,
    },
};

const TCTI: Opt = Opt::value(
    "tcti",
    "TCTI",
    "tpm2-tss TCTI of the TPM, e.g. swtpm:host=127.0.0.1,port=2321",
)
.env("CONFBOOT_TCTI");
const AK_HANDLE: Opt =
    Opt::value("ak-handle", "HANDLE", "Persistent handle of the AK (hex)").default("0x81000003");
const NV_INDEX: Opt =
    Opt::value("nv-index", "INDEX", "NV index of the AK certificate (hex)").default("0x01c101d0");
const CA_CERT: Opt = Opt::value(
    "ca-cert",
    "FILE",
    "CA certificate (PEM) that signs the AK certificate",
);
const CA_KEY: Opt = Opt::value(
    "ca-key",
    "FILE",
    "CA private key (PEM, PKCS#8) of --ca-cert",
);
const OUT_DIR: Opt = Opt::value(
    "out-dir",
    "DIR",
    "Where ak-cert.der, ak-pubkey.hex (and a generated CA) go",
);
const SUBJECT: Opt =
    Opt::value("subject", "CN", "Common name of the AK certificate").default("confboot vTPM AK");
const FORCE: Opt = Opt::flag("force", "Replace an AK or NV index that already exists");

const CMD: Command = Command {
    name: "confboot-tpm-provision",
    about: "Provisions a TPM as a cloud provider would: creates a restricted ECDSA P-256 \
attestation key (AK) in the owner hierarchy, persists it, issues an AK certificate signed by a CA \
and writes the certificate (DER) to an NV index. Talks to the TPM through tss-esapi, e.g. \
--tcti swtpm:host=127.0.0.1,port=2321. Without --ca-cert/--ca-key a CA is generated into \
--out-dir (ca.pem, ca-key.pem; reused when already there). Writes ak-cert.der and ak-pubkey.hex \
(the AK as a SEC1 point, the form pinned AK lists take) into --out-dir and prints the AK key.",
    usage: "confboot-tpm-provision --tcti TCTI --out-dir DIR [--ca-cert FILE --ca-key FILE] [OPTIONS]",
    opts: &[
        TCTI, AK_HANDLE, NV_INDEX, CA_CERT, CA_KEY, OUT_DIR, SUBJECT, FORCE, VERBOSITY,
    ],
};

/// Why the options cannot be used (exit 2).
#[derive(Debug, thiserror::Error)]
enum OptionsError {
    /// A positional argument.
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    /// An option is missing.
    #[error(transparent)]
    Args(#[from] confboot_util::args::ArgsError),
    /// A handle option is not hex.
    #[error("--{option} {text:?}: {error}")]
    Handle {
        /// The option.
        option: &'static str,
        /// Its value.
        text: String,
        /// Why.
        error: std::num::ParseIntError,
    },
}

/// Why the TPM was not provisioned (exit 1).
#[derive(Debug, thiserror::Error)]
enum ProvisionError {
    /// A TPM call or structure failed.
    #[error("{what}: {error}")]
    Tss {
        /// The step.
        what: &'static str,
        /// What tss-esapi said.
        error: tss_esapi::Error,
    },
    /// The CA could not be generated.
    #[error("{what}: {error}")]
    Ca {
        /// The step.
        what: &'static str,
        /// What rcgen said.
        error: rcgen::Error,
    },
    /// The created AK is not an ECC key.
    #[error("the created AK is not an ECC key")]
    NotEcc,
    /// The AK's point is longer than P-256's.
    #[error("AK point coordinates longer than 32 bytes")]
    PointTooLong,
    /// Only one of the CA's files is given.
    #[error("give both --ca-cert and --ca-key, or neither")]
    CaHalf,
    /// A file cannot be read.
    #[error("read {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The CA key file is not a PEM private key.
    #[error("{}: not a PEM private key: {error}", path.display())]
    CaKey {
        /// The file.
        path: PathBuf,
        /// Why.
        error: rcgen::Error,
    },
    /// The CA certificate file is not a PEM CA certificate.
    #[error("{}: not a PEM CA certificate: {error}", path.display())]
    CaCert {
        /// The file.
        path: PathBuf,
        /// Why.
        error: rcgen::Error,
    },
    /// A file cannot be written.
    #[error("write {}: {error}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The output directory cannot be created.
    #[error("create {}: {error}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// An AK exists at the handle and `--force` is not given.
    #[error("an object already exists at {0:#010x}; use --force to replace it")]
    AkExists(u32),
    /// The NV index exists and `--force` is not given.
    #[error("NV index {0:#010x} already exists; use --force to replace it")]
    NvIndexExists(u32),
    /// The certificate does not fit the NV index.
    #[error("certificate of {0} bytes is too large")]
    CertificateTooLarge(usize),
    /// The AK certificate cannot be issued (the attestation library's
    /// error, held whole: this crate does not link the library itself).
    #[error("{0}")]
    Certificate(Box<dyn std::error::Error + Send + Sync>),
}

type Result<T> = std::result::Result<T, ProvisionError>;

fn tss(what: &'static str) -> impl Fn(tss_esapi::Error) -> ProvisionError {
    move |error| ProvisionError::Tss { what, error }
}

fn ca(what: &'static str) -> impl Fn(rcgen::Error) -> ProvisionError {
    move |error| ProvisionError::Ca { what, error }
}

fn parse_hex_u32(option: &Opt, text: &str) -> std::result::Result<u32, OptionsError> {
    u32::from_str_radix(text.trim_start_matches("0x").trim_start_matches("0X"), 16).map_err(
        |error| OptionsError::Handle {
            option: option.long,
            text: text.to_string(),
            error,
        },
    )
}

/// What the provisioning runs with: every option read once.
#[derive(Debug)]
struct Config {
    /// The TPM's tpm2-tss TCTI.
    tcti: String,
    /// Where the outputs (and a generated CA) go.
    out_dir: PathBuf,
    /// The AK's persistent handle.
    ak_handle: u32,
    /// The NV index of the AK certificate.
    nv_index: u32,
    /// Whether an AK or NV index that exists is replaced.
    force: bool,
    /// The CA's certificate and key files (`None`: generated or reused in
    /// the output directory).
    ca_cert: Option<String>,
    /// The CA's private key file.
    ca_key: Option<String>,
    /// The AK certificate's common name.
    subject: String,
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> std::result::Result<Config, OptionsError> {
        let tcti = m.required(&TCTI).map(str::to_string);
        let out_dir = m.required(&OUT_DIR).map(PathBuf::from);
        let ak_handle = m.value(&AK_HANDLE).unwrap_or_default();
        let nv_index = m.value(&NV_INDEX).unwrap_or_default();
        let force = m.flag(&FORCE);
        let ca_cert = m.value(&CA_CERT).map(str::to_string);
        let ca_key = m.value(&CA_KEY).map(str::to_string);
        let subject = m.value(&SUBJECT).unwrap_or("confboot vTPM AK").to_string();
        if let Some(extra) = m.positional().first() {
            return Err(OptionsError::Unexpected(extra.to_string()));
        }
        Ok(Config {
            tcti: tcti?,
            out_dir: out_dir?,
            ak_handle: parse_hex_u32(&AK_HANDLE, ak_handle)?,
            nv_index: parse_hex_u32(&NV_INDEX, nv_index)?,
            force,
            ca_cert,
            ca_key,
            subject,
        })
    }
}

/// The AK template: the same as confboot's own (`confboot_tpm::structures::ak_template`),
/// so both stacks derive the same primary key from the owner seed.
fn ak_public_template() -> Result<Public> {
    let attributes = ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_sensitive_data_origin(true)
        .with_user_with_auth(true)
        .with_no_da(true)
        .with_restricted(true)
        .with_sign_encrypt(true)
        .build()
        .map_err(tss("AK attributes"))?;
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::Ecc)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(attributes)
        .with_ecc_parameters(PublicEccParameters::new(
            SymmetricDefinitionObject::Null,
            EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)),
            EccCurve::NistP256,
            KeyDerivationFunctionScheme::Null,
        ))
        .with_ecc_unique_identifier(EccPoint::default())
        .build()
        .map_err(tss("AK template"))
}

/// The AK's public key as a SEC1 uncompressed point.
fn ak_point(public: &Public) -> Result<Vec<u8>> {
    let Public::Ecc { unique, .. } = public else {
        return Err(ProvisionError::NotEcc);
    };
    let (x, y) = (unique.x().value(), unique.y().value());
    if x.len() > 32 || y.len() > 32 {
        return Err(ProvisionError::PointTooLong);
    }
    let mut point = vec![0u8; 65];
    point[0] = 4;
    point[33 - x.len()..33].copy_from_slice(x);
    point[65 - y.len()..].copy_from_slice(y);
    Ok(point)
}

/// Loads the CA from files, or generates one into `out_dir` (reusing it there).
fn load_or_generate_ca(
    ca_cert: Option<&str>,
    ca_key: Option<&str>,
    out_dir: &Path,
) -> Result<rcgen::Issuer<'static, rcgen::KeyPair>> {
    let (cert_path, key_path) = match (ca_cert, ca_key) {
        (Some(c), Some(k)) => (PathBuf::from(c), PathBuf::from(k)),
        (None, None) => {
            let c = out_dir.join("ca.pem");
            let k = out_dir.join("ca-key.pem");
            if !c.exists() {
                let key = rcgen::KeyPair::generate().map_err(ca("generate CA key"))?;
                let mut params = rcgen::CertificateParams::default();
                params
                    .distinguished_name
                    .push(rcgen::DnType::CommonName, "confboot test AK CA");
                params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                params.key_usages = vec![
                    rcgen::KeyUsagePurpose::KeyCertSign,
                    rcgen::KeyUsagePurpose::CrlSign,
                ];
                let cert = params.self_signed(&key).map_err(ca("self-sign CA"))?;
                write_file(&k, key.serialize_pem().as_bytes(), true)?;
                write_file(&c, cert.pem().as_bytes(), false)?;
                log::info!("generated a CA: {}", c.display());
            } else {
                log::info!("reusing the CA in {}", c.display());
            }
            (c, k)
        }
        _ => return Err(ProvisionError::CaHalf),
    };
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|error| ProvisionError::Read {
            path: path.to_path_buf(),
            error,
        })
    };
    let cert_pem = read(&cert_path)?;
    let key_pem = read(&key_path)?;
    let key = rcgen::KeyPair::from_pem(&key_pem).map_err(|error| ProvisionError::CaKey {
        path: key_path.clone(),
        error,
    })?;
    rcgen::Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|error| ProvisionError::CaCert {
        path: cert_path.clone(),
        error,
    })
}

fn write_file(path: &Path, bytes: &[u8], secret: bool) -> Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|error| ProvisionError::Write {
            path: path.to_path_buf(),
            error,
        })
}

/// Looks up an object by TPM handle. Without sessions: tpm2-tss 3.2's
/// Esys_TR_FromTPMPublic crashes when handed the password session.
fn find_object(context: &mut Context, handle: TpmHandle) -> tss_esapi::Result<ObjectHandle> {
    context.execute_without_session(|ctx| ctx.tr_from_tpm_public(handle))
}

/// Creates the AK and persists it at `ak_handle`; returns its public area.
fn provision_ak(context: &mut Context, ak_handle: u32, force: bool) -> Result<Public> {
    let persistent = PersistentTpmHandle::new(ak_handle).map_err(tss("--ak-handle"))?;
    if let Ok(existing) = find_object(context, TpmHandle::Persistent(persistent)) {
        if !force {
            return Err(ProvisionError::AkExists(ak_handle));
        }
        context
            .evict_control(
                Provision::Owner,
                existing,
                Persistent::Persistent(persistent),
            )
            .map_err(tss("evict the old AK"))?;
        log::info!("evicted the old AK at {ak_handle:#010x}");
    }
    let created = context
        .create_primary(
            Hierarchy::Owner,
            ak_public_template()?,
            None,
            None,
            None,
            None,
        )
        .map_err(tss("CreatePrimary"))?;
    let transient: ObjectHandle = created.key_handle.into();
    let result = context.evict_control(
        Provision::Owner,
        transient,
        Persistent::Persistent(persistent),
    );
    context
        .flush_context(transient)
        .map_err(tss("flush the transient AK"))?;
    result.map_err(tss("EvictControl (persist the AK)"))?;
    log::info!("AK persisted at {ak_handle:#010x}");
    Ok(created.out_public)
}

/// Defines the NV index (owner read/write) and writes the certificate to it.
fn write_certificate(context: &mut Context, nv_index: u32, der: &[u8], force: bool) -> Result<()> {
    let index = NvIndexTpmHandle::new(nv_index).map_err(tss("--nv-index"))?;
    if let Ok(existing) = find_object(context, TpmHandle::NvIndex(index)) {
        if !force {
            return Err(ProvisionError::NvIndexExists(nv_index));
        }
        context
            .nv_undefine_space(Provision::Owner, existing.into())
            .map_err(tss("undefine the old NV index"))?;
    }
    let size = u16::try_from(der.len())
        .ok()
        .filter(|n| (*n as usize) <= confboot_vtpm::MAX_AK_CERT_LEN)
        .ok_or(ProvisionError::CertificateTooLarge(der.len()))?;
    let attributes = NvIndexAttributesBuilder::new()
        .with_owner_write(true)
        .with_owner_read(true)
        .with_auth_read(true)
        .with_no_da(true)
        .build()
        .map_err(tss("NV attributes"))?;
    let public = NvPublicBuilder::new()
        .with_nv_index(index)
        .with_index_name_algorithm(HashingAlgorithm::Sha256)
        .with_index_attributes(attributes)
        .with_data_area_size(size as usize)
        .build()
        .map_err(tss("NV public"))?;
    let handle = context
        .nv_define_space(Provision::Owner, None, public)
        .map_err(tss("NV_DefineSpace"))?;
    // Write in chunks below every TPM's MAX_NV_BUFFER_SIZE.
    for (i, chunk) in der.chunks(512).enumerate() {
        let buffer = MaxNvBuffer::try_from(chunk.to_vec()).map_err(tss("NV buffer"))?;
        context
            .nv_write(NvAuth::Owner, handle, buffer, (i * 512) as u16)
            .map_err(tss("NV_Write"))?;
    }
    log::info!(
        "AK certificate ({} bytes) written to NV {nv_index:#010x}",
        der.len()
    );
    Ok(())
}

fn run() -> Result<()> {
    let m = parse_or_exit(&CMD, std::env::args().skip(1));
    // Options that cannot be used are a usage error (exit 2); a TPM or a
    // file that fails is a failure (exit 1).
    let verbosity = m.verbosity().unwrap_or_else(|e| exit_usage(&CMD, &e));
    confboot_util::logging::init("confboot-tpm-provision", verbosity);
    let config = Config::from_matches(&m).unwrap_or_else(|e| exit_usage(&CMD, &e));
    let (out_dir, force) = (&config.out_dir, config.force);
    let (ak_handle, nv_index) = (config.ak_handle, config.nv_index);
    let tcti = config.tcti.as_str();
    std::fs::create_dir_all(out_dir).map_err(|error| ProvisionError::CreateDir {
        path: out_dir.clone(),
        error,
    })?;
    log::info!("provisioning the TPM at {tcti}");

    let ca = load_or_generate_ca(config.ca_cert.as_deref(), config.ca_key.as_deref(), out_dir)?;
    let conf = TctiNameConf::from_str(tcti).map_err(tss("--tcti"))?;
    let mut context = Context::new(conf).map_err(tss("open the TPM"))?;
    context.set_sessions((Some(AuthSession::Password), None, None));

    let public = provision_ak(&mut context, ak_handle, force)?;
    let point = ak_point(&public)?;
    let der = confboot_vtpm::issue_ak_certificate(&point, &config.subject, &ca)
        .map_err(|e| ProvisionError::Certificate(Box::new(e)))?;
    write_certificate(&mut context, nv_index, &der, force)?;
    write_file(&out_dir.join("ak-cert.der"), &der, false)?;
    let point_hex = confboot_util::hex::encode(&point);
    write_file(
        &out_dir.join("ak-pubkey.hex"),
        format!("{point_hex}\n").as_bytes(),
        false,
    )?;
    println!("{point_hex}");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("confboot-tpm-provision: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let args = ["--tcti", "swtpm:port=1", "--out-dir", "out"];
        let m = CMD.parse(args.into_iter().map(String::from)).unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!((c.ak_handle, c.nv_index), (0x8100_0003, 0x01c1_01d0));
        assert_eq!(c.subject, "confboot vTPM AK");
        assert!(!c.force);
        let m = CMD
            .parse(
                ["--tcti=t", "--out-dir=o", "--ak-handle=zz"]
                    .into_iter()
                    .map(String::from),
            )
            .unwrap();
        let e = Config::from_matches(&m).unwrap_err();
        assert!(
            matches!(
                e,
                OptionsError::Handle {
                    option: "ak-handle",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("--ak-handle \"zz\": "), "{e}");
    }
}
