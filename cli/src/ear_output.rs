//! `-o ear`: the verdict of `confboot verify`, `verify-report` and
//! `verify-quote` as a signed attestation result (EAR, an ES256 JWT, one
//! line on stdout) for relying parties. The result itself, the mapping of
//! each check to its trust claim and the signature live in
//! [`confboot_appraisal::ear`]; this loads the key and prints.

use std::path::{Path, PathBuf};

use confboot_appraisal::ear::{
    AttestationResult, EarError, EarSigningKey, EvidenceDigest, Status, TrustVector, VerifierId,
};
use confboot_attest::Variant;
use confboot_util::args::{Matches, Opt};
use confboot_util::fs::{FileError, MAX_CONFIG_FILE_BYTES, read_bounded};

/// Why `-o` and `--ear-key` do not go together (a usage error).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// `-o ear` without `--ear-key`.
    #[error("-o ear needs --{option}", option = EAR_KEY.long)]
    NoKey,
    /// `--ear-key` without `-o ear`.
    #[error("--{option} goes with -o ear", option = EAR_KEY.long)]
    KeyWithoutEar,
    /// `-o` names no output.
    #[error("--{option} {0:?}: want {1}", option = OUTPUT.long)]
    Unknown(String, &'static str),
}

/// Why no attestation result can be signed.
#[derive(Debug, thiserror::Error)]
pub enum EarOutputError {
    /// The policy file cannot be read for its id.
    #[error("{0}")]
    Policy(FileError),
    /// The `--ear-key` file cannot be read.
    #[error("--{option}: {0}", option = EAR_KEY.long)]
    ReadKey(FileError),
    /// The `--ear-key` file is no P-256 key.
    #[error("--{option} {}: {error}", path.display(), option = EAR_KEY.long)]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        error: EarError,
    },
    /// The result cannot be signed.
    #[error("cannot sign the attestation result: {0}")]
    Sign(EarError),
}

/// `--ear-key KEY.pem`: the key that signs the result.
pub const EAR_KEY: Opt = Opt::value(
    "ear-key",
    "KEY.pem",
    "With -o ear: the P-256 key (PKCS#8 PEM, as confboot keygen writes) that signs the result",
);

/// `-o text|json|ear` of the offline commands (`verify-report`, `verify-quote`).
pub const OUTPUT: Opt = Opt::value(
    "output",
    "FORMAT",
    "text (every check on its line), json (one object {command, variant, at, verified, failed, \
     skipped, checks: [{name, outcome, detail, reason}]}, as every verify-* command prints it), \
     or ear: the verdict as a signed attestation result (needs --ear-key)",
)
.short('o')
.default("text");

/// What an offline command prints, from [`OUTPUT`] and [`EAR_KEY`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Every check on its line.
    Text,
    /// One JSON object ([`crate::check_report`]).
    Json,
    /// A signed attestation result, with this key.
    Ear(PathBuf),
}

/// The output [`OUTPUT`] and [`EAR_KEY`] ask for.
pub fn output(m: &Matches) -> Result<Output, OutputError> {
    let output = m.value(&OUTPUT).expect("has a default");
    let key = m.value(&EAR_KEY).map(PathBuf::from);
    match (output, key) {
        ("text", None) => Ok(Output::Text),
        ("json", None) => Ok(Output::Json),
        ("ear", Some(key)) => Ok(Output::Ear(key)),
        ("ear", None) => Err(OutputError::NoKey),
        ("text" | "json", Some(_)) => Err(OutputError::KeyWithoutEar),
        (other, _) => Err(OutputError::Unknown(other.to_string(), "text, json or ear")),
    }
}

/// What signs and names the results of one run.
pub struct EarSigner {
    key: EarSigningKey,
    /// The program, for `ear.verifier-id`.
    program: &'static str,
    /// What the evidence is appraised against, for `ear.appraisal-policy-id`.
    policy_id: String,
}

/// The appraisal policy id of a policy file: its name and the SHA-256 of
/// its bytes (what a relying party can compare), or `default` without one.
pub fn policy_id(path: Option<&Path>) -> Result<String, EarOutputError> {
    let Some(path) = path else {
        return Ok("default".into());
    };
    let bytes = read_bounded(path, MAX_CONFIG_FILE_BYTES).map_err(EarOutputError::Policy)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(format!(
        "{name} sha-256:{}",
        confboot_util::hex::encode(digest.as_ref())
    ))
}

impl EarSigner {
    /// Reads the key at `path` (bounded; the PEM is zeroized once parsed).
    pub fn load(
        path: &Path,
        program: &'static str,
        policy_id: String,
    ) -> Result<EarSigner, EarOutputError> {
        let pem = read_bounded(path, MAX_CONFIG_FILE_BYTES).map_err(EarOutputError::ReadKey)?;
        let key = EarSigningKey::from_pem(&pem).map_err(|error| EarOutputError::Key {
            path: path.to_path_buf(),
            error,
        })?;
        Ok(EarSigner {
            key,
            program,
            policy_id,
        })
    }

    /// The result of appraising `evidence` of `variant` against
    /// `policy_id`, signed.
    pub fn sign(
        &self,
        variant: Variant,
        evidence: &[u8],
        status: Status,
        policy_id: &str,
        trust_vector: TrustVector,
    ) -> Result<String, EarOutputError> {
        AttestationResult {
            status,
            trust_vector,
            attester: variant.name().into(),
            policy_id: policy_id.into(),
            evidence_digest: EvidenceDigest::of_variant(variant, evidence),
            verifier: VerifierId::confboot(self.program),
            issued_at: confboot_util::time::unix_now(),
        }
        .sign(&self.key)
        .map_err(EarOutputError::Sign)
    }

    /// Prints the signed result of a verdict; the exit code stays the
    /// verdict's (0 passed, 1 refused), 2 if it cannot be signed. The
    /// status is the verdict's: affirming or contraindicated.
    pub fn print(
        &self,
        variant: Variant,
        evidence: &[u8],
        passed: bool,
        trust_vector: TrustVector,
    ) -> i32 {
        self.print_appraised(variant, evidence, passed, false, None, trust_vector)
    }

    /// As [`EarSigner::print`], for a verdict that passed with a
    /// reservation when `warned` (a reference-value set near its
    /// not-after): its status is warning, not affirming; the exit code
    /// stays 0. `policy_id`, when given, names what the evidence was
    /// appraised against in place of the one given to [`EarSigner::load`]
    /// (a signed set, known once the evidence matched it).
    pub fn print_appraised(
        &self,
        variant: Variant,
        evidence: &[u8],
        passed: bool,
        warned: bool,
        policy_id: Option<&str>,
        trust_vector: TrustVector,
    ) -> i32 {
        // Evidence that passed while no check could affirm anything (every
        // one skipped) gets no status rather than an affirming one.
        let status = match Status::of_verdict(passed) {
            Status::Affirming if trust_vector.worst() == Status::None => Status::None,
            Status::Affirming if warned => Status::Warning,
            status => status,
        };
        let policy_id = policy_id.unwrap_or(&self.policy_id);
        match self.sign(variant, evidence, status, policy_id, trust_vector) {
            Ok(token) => {
                println!("{token}");
                i32::from(!passed)
            }
            Err(e) => {
                eprintln!("{e}");
                2
            }
        }
    }
}
