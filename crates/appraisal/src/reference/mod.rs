//! Reference values as signed documents: an image's predicted PCRs and
//! events, its name and version and a validity window, written as a CoRIM
//! (draft-ietf-rats-corim) and signed as COSE_Sign1 with ES256 by a P-256
//! release key ([`cose`]).
//!
//! # The format
//!
//! An unsigned set is a `tagged-unsigned-corim-map`, in deterministic CBOR
//! (RFC 8949 §4.2.1):
//!
//! ```text
//! #6.501({
//!   0: "NAME VERSION",                             ; id
//!   1: [ #6.506(bstr .cbor concise-mid-tag) ],     ; tags: one CoMID
//!   3: #6.32("urn:confboot:reference-values:1"),  ; profile
//!   4: { 0: #6.1(not-before), 1: #6.1(not-after) } ; rim-validity, Unix seconds
//! })
//! concise-mid-tag = {
//!   1: { 0: "NAME VERSION", 1: 0 },                ; tag-identity: tag-id, tag-version
//!   4: { 0: [ + reference-triple ] }               ; triples: reference-triples
//! }
//! reference-triple = [
//!   { 0: { 1: "confboot", 2: VARIANT } },          ; environment: class vendor, model
//!   [ image, + pcr, * event ]                       ; measurement-maps, in this order
//! ]
//! image = { 0: "image", 1: { 0: { 0: VERSION }, 11: NAME } }   ; version-map, name
//! pcr   = { 0: INDEX, 1: { 2: [[1, h'32 bytes']], ? -1: true } }
//!                                                   ; mkey uint, digests (sha-256),
//!                                                   ; -1: warn only (profile extension)
//! event = { 0: "event/N", 1: { 2: [[1, h'32 bytes']], 11: DESCRIPTION,
//!                              -2: PCR, -3: EVENT-TYPE } }
//!                                                   ; N = 0, 1, ... in log order
//! ```
//!
//! `VARIANT` is a variant's name; those whose reference values are the
//! SHA-256 PCRs of a vTPM ([`PCR_VARIANTS`]: `qemu-vtpm`, and
//! `azure-sev-snp`, whose paravisor's vTPM measures the image into PCRs 4
//! and 9 as OVMF and the kernel's EFI stub do) are read, and `sev-snp`,
//! whose measurements are exactly the image and one launch:
//!
//! ```text
//! launch = { 0: "launch", 1: { 2: [[7, h'48 bytes']],       ; the launch digest (sha-384)
//!                              -4: [[1, h'32 bytes']],      ; kernel  } the SHA-256 its kernel
//!                              -5: [[1, h'32 bytes']],      ; initrd  } hashes table holds (a
//!                              -6: [[1, h'32 bytes']] } }   ; cmdline } measured direct boot)
//! ```
//!
//! TDX's registers are not carried yet. Keys -1 to -6 of a
//! `measurement-values-map` are this profile's extensions (negative keys
//! are reserved for profiles). Digest algorithm 1 is SHA-256 in the IANA
//! Named Information Hash Algorithm registry. A signed set wraps the
//! unsigned one's bytes in COSE_Sign1 ([`cose`]).
//!
//! # Reading
//!
//! [`open`] reads a set strictly: at most [`MAX_SET_BYTES`], nesting and
//! item counts bounded, deterministic CBOR only, no key or measurement the
//! format above does not name, and the bytes must be exactly those this
//! module writes for what they say (so two encodings never carry one set).
//! Each variant's reference values must make a policy that pins the image
//! ([`MeasurementPolicy::check_pins_image`]) and its events must replay to
//! its PCR values. With release keys configured, only a set signed by one
//! of them is read (an unsigned one is refused); with none, only an
//! unsigned one. The window is checked as of a given time.
//!
//! Several sets in force at once (a rolling upgrade), read from a
//! directory and retired as their files go or their windows end, are
//! [`sets`]; what a reader remembers of the sets it retired and the
//! signings it saw, by what was signed and across restarts, is
//! [`history`].
//!
//! # Clocks
//!
//! [`open`] and [`ReferenceSet::check_time`] compare the window with the
//! time their caller gives. The binaries give the time floor
//! (`confboot_util::floor::TimeFloor::now`): the latest of the guest's
//! wall clock, which the host sets, and every time seen before, kept on
//! disk where the binary has a state file, so a clock set back does not
//! reopen a window that has ended.

mod cbor;
pub mod cose;
pub mod history;
pub mod sets;

use std::collections::BTreeMap;

pub use cbor::{CborError, CborProblem};
pub use cose::{ReleaseKey, SigningKey};

use cbor::Value;
use confboot_attest::{MeasurementPolicy, PolicyError, Variant};
use confboot_tpm::event_log::{EventList, EventSummary, MAX_DESCRIPTION_LEN, MAX_EVENTS};

/// Largest set read, signed or not, in bytes (a set of one image with its
/// events is under 4 KiB; a full log of [`MAX_EVENTS`] events fits).
pub const MAX_SET_BYTES: usize = 256 * 1024;
/// Deepest nesting of CBOR arrays, maps and tags read (the format needs 9).
pub const MAX_DEPTH: usize = 16;
/// Most CBOR items in one set.
pub const MAX_ITEMS: usize = 32 * 1024;
/// Most variants (reference triples) in one set.
pub const MAX_VARIANTS: usize = 8;
/// Longest image name or version, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// Latest time a window may name: 9999-12-31T23:59:59Z.
pub const MAX_TIME: i64 = 253_402_300_799;
/// CBOR tag of an unsigned CoRIM (`tagged-unsigned-corim-map`).
pub const UNSIGNED_CORIM_TAG: u64 = 501;
/// CBOR tag of a CoMID inside a CoRIM's tags.
pub const COMID_TAG: u64 = 506;
/// The profile every set names.
pub const PROFILE: &str = "urn:confboot:reference-values:1";
/// The environment's class vendor.
pub const VENDOR: &str = "confboot";
/// The variants whose reference values a set carries: SHA-256 PCRs, held
/// to [`MeasurementPolicy::check_pins_image`] (PCRs 4 and 9, the same on
/// Azure: `confboot_azure::AZURE_IMAGE_PCRS`).
pub const PCR_VARIANTS: [Variant; 2] = [Variant::QemuVtpm, Variant::AzureSevSnp];
/// The variants whose reference values are one launch: SEV-SNP's launch
/// digest of a measured direct boot, with its kernel hashes.
pub const LAUNCH_VARIANTS: [Variant; 1] = [Variant::SevSnp];

const URI_TAG: u64 = 32;
const EPOCH_TIME_TAG: u64 = 1;
const SHA256_ALG: u64 = 1;
/// SHA-384 in the IANA Named Information Hash Algorithm registry.
const SHA384_ALG: u64 = 7;
const LAUNCH_KEY: &str = "launch";
const KERNEL_HASH_KEY: i64 = -4;
const INITRD_HASH_KEY: i64 = -5;
const CMDLINE_HASH_KEY: i64 = -6;
/// The length of an SEV-SNP launch digest.
pub const LAUNCH_DIGEST_LEN: usize = 48;
const IMAGE_KEY: &str = "image";
const EVENT_KEY_PREFIX: &str = "event/";
const WARN_ONLY_KEY: i64 = -1;
const EVENT_PCR_KEY: i64 = -2;
const EVENT_TYPE_KEY: i64 = -3;

pub(crate) const LIMITS: cbor::Limits = cbor::Limits {
    max_bytes: MAX_SET_BYTES,
    max_depth: MAX_DEPTH,
    max_items: MAX_ITEMS,
};

/// One variant's reference values: a measurement policy and the events
/// that make its PCR values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VariantReference {
    /// The variant they are for.
    pub variant: Variant,
    /// The expected PCRs (enforced or warned on).
    pub policy: MeasurementPolicy,
    /// The predicted events, in log order (to name the event behind a PCR
    /// that differs).
    pub events: EventList,
    /// The measured direct boot a launch variant's digest was taken of
    /// (`Some` for exactly [`LAUNCH_VARIANTS`], whose `policy` holds the
    /// launch digest, enforced, at index 0, and whose `events` are empty).
    pub launch: Option<DirectBootHashes>,
}

/// The SHA-256 digests a measured direct boot's kernel hashes table holds
/// (SEV-SNP): of the kernel file, of the initrd file (of no bytes without
/// one), of the command line with its NUL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectBootHashes {
    /// The kernel's.
    pub kernel: [u8; 32],
    /// The initrd's.
    pub initrd: [u8; 32],
    /// The command line's.
    pub cmdline: [u8; 32],
}

impl VariantReference {
    /// An SEV-SNP launch's reference values: its launch digest, enforced,
    /// and the hashes of the measured direct boot it was taken of.
    pub fn snp_launch(
        digest: [u8; LAUNCH_DIGEST_LEN],
        hashes: DirectBootHashes,
    ) -> VariantReference {
        let mut policy = MeasurementPolicy::default();
        policy.set(0, digest.to_vec(), false);
        VariantReference {
            variant: Variant::SevSnp,
            policy,
            events: EventList { events: Vec::new() },
            launch: Some(hashes),
        }
    }
}

/// A reference-value set: what one image measures, per variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceSet {
    /// The image's name.
    pub name: String,
    /// The image's version.
    pub version: String,
    /// The start of the window, Unix seconds.
    pub not_before: i64,
    /// The end of the window (inclusive), Unix seconds.
    pub not_after: i64,
    /// The reference values of each variant.
    pub variants: Vec<VariantReference>,
}

/// A set read by [`open`], and who signed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedSet {
    /// The set.
    pub set: ReferenceSet,
    /// The kid of the release key that signed it (`None`: read unsigned,
    /// as no release key is configured).
    pub signer: Option<[u8; cose::KID_LEN]>,
    /// The SHA-256 of what was signed: the unsigned CoRIM, whose one
    /// encoding the format allows. It identifies the set whatever its
    /// envelope (another signature of the same payload, or the same
    /// signature re-encoded as `(r, n - s)`), and is what a reader retires
    /// ([`history`]).
    pub digest: [u8; 32],
}

/// Why a reference-value set is refused.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// Larger than [`MAX_SET_BYTES`].
    #[error("reference-value set of {0} bytes is larger than {MAX_SET_BYTES}")]
    TooLarge(usize),
    /// Not CBOR of the subset read.
    #[error("reference-value set: {0}")]
    Cbor(#[source] CborError),
    /// CBOR, but not the CoRIM shape of the format.
    #[error("reference-value set: {0}")]
    Format(String),
    /// Not the COSE_Sign1 shape of the format.
    #[error("signed reference-value set: {0}")]
    Envelope(String),
    /// A release or signing key that cannot be used.
    #[error("release key: {0}")]
    Key(String),
    /// Signed by a key that is not configured (its kid in hex).
    #[error("reference-value set signed by key {0}, which is not a configured release key")]
    UnknownKey(String),
    /// The signature does not verify with the key its kid names.
    #[error("reference-value set: the signature does not verify with release key {0}")]
    BadSignature(String),
    /// Unsigned, where a release key is configured.
    #[error("reference-value set is unsigned, and a release key is configured: refused")]
    Unsigned,
    /// Signed, where no release key is configured to check it.
    #[error("reference-value set is signed, and no release key is configured to check it")]
    NoReleaseKey,
    /// The window has not started.
    #[error("reference-value set {name} {version} is valid only from {}", instant(*.not_before))]
    NotYetValid {
        /// The image's name.
        name: String,
        /// The image's version.
        version: String,
        /// When its window starts.
        not_before: i64,
    },
    /// The window has ended.
    #[error("reference-value set {name} {version} expired at {}", instant(*.not_after))]
    Expired {
        /// The image's name.
        name: String,
        /// The image's version.
        version: String,
        /// When its window ended.
        not_after: i64,
    },
    /// A variant this format does not carry reference values for.
    #[error(
        "reference-value set names variant {0:?}, whose reference values are neither PCRs nor an SEV-SNP launch"
    )]
    UnsupportedVariant(String),
    /// A variant's reference values are not a policy that pins the image.
    #[error("reference-value set, variant {variant}: {error}")]
    Policy {
        /// The variant.
        variant: Variant,
        /// What is wrong with its policy.
        #[source]
        error: PolicyError,
    },
    /// A variant's events do not replay to its PCR values.
    #[error(
        "reference-value set, variant {variant}: the events of PCR {pcr} do not replay to its value"
    )]
    EventsDisagree {
        /// The variant.
        variant: Variant,
        /// The PCR.
        pcr: u32,
    },
}

/// An instant as RFC 3339 UTC (Unix seconds when out of range).
fn instant(t: i64) -> String {
    match u64::try_from(t) {
        Ok(s) => {
            confboot_util::time::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s))
        }
        Err(_) => format!("{t} (Unix seconds)"),
    }
}

// ---- writing ----

fn digests(value: &[u8]) -> Value {
    digests_of(SHA256_ALG, value)
}

fn digests_of(alg: u64, value: &[u8]) -> Value {
    Value::Array(vec![Value::Array(vec![
        Value::Uint(alg),
        Value::Bytes(value.to_vec()),
    ])])
}

fn measurement(key: Value, values: Vec<(i64, Value)>) -> Value {
    Value::int_map(vec![(0, key), (1, Value::int_map(values))])
}

impl VariantReference {
    fn to_triple(&self, name: &str, version: &str) -> Value {
        let environment = Value::int_map(vec![(
            0,
            Value::int_map(vec![
                (1, Value::text(VENDOR)),
                (2, Value::text(self.variant.name())),
            ]),
        )]);
        let mut measurements = vec![measurement(
            Value::text(IMAGE_KEY),
            vec![
                (0, Value::int_map(vec![(0, Value::text(version))])),
                (11, Value::text(name)),
            ],
        )];
        if let Some(hashes) = &self.launch {
            let digest = self
                .policy
                .entries()
                .get(&0)
                .map(|e| e.value.clone())
                .unwrap_or_default();
            measurements.push(measurement(
                Value::text(LAUNCH_KEY),
                vec![
                    (2, digests_of(SHA384_ALG, &digest)),
                    (KERNEL_HASH_KEY, digests(&hashes.kernel)),
                    (INITRD_HASH_KEY, digests(&hashes.initrd)),
                    (CMDLINE_HASH_KEY, digests(&hashes.cmdline)),
                ],
            ));
            return Value::Array(vec![environment, Value::Array(measurements)]);
        }
        for (pcr, expected) in self.policy.entries() {
            let mut values = vec![(2, digests(&expected.value))];
            if expected.warn_only {
                values.push((WARN_ONLY_KEY, Value::Bool(true)));
            }
            measurements.push(measurement(Value::Uint(u64::from(*pcr)), values));
        }
        for (i, e) in self.events.events.iter().enumerate() {
            measurements.push(measurement(
                Value::Text(format!("{EVENT_KEY_PREFIX}{i}")),
                vec![
                    (2, digests(&e.sha256)),
                    (11, Value::text(&e.description)),
                    (EVENT_PCR_KEY, Value::Uint(u64::from(e.pcr))),
                    (EVENT_TYPE_KEY, Value::text(&e.event_type)),
                ],
            ));
        }
        Value::Array(vec![environment, Value::Array(measurements)])
    }
}

impl ReferenceSet {
    /// The CoRIM `id` and CoMID `tag-id`: the name and the version.
    fn id(&self) -> String {
        format!("{} {}", self.name, self.version)
    }

    /// The unsigned CoRIM, as the format above says (no checks: see
    /// [`ReferenceSet::encode`]).
    pub fn to_cbor(&self) -> Vec<u8> {
        let time = |t: i64| Value::Tag(EPOCH_TIME_TAG, Box::new(Value::int(t)));
        let comid = Value::int_map(vec![
            (
                1,
                Value::int_map(vec![(0, Value::Text(self.id())), (1, Value::Uint(0))]),
            ),
            (
                4,
                Value::int_map(vec![(
                    0,
                    Value::Array(
                        self.variants
                            .iter()
                            .map(|v| v.to_triple(&self.name, &self.version))
                            .collect(),
                    ),
                )]),
            ),
        ]);
        cbor::encode(&Value::Tag(
            UNSIGNED_CORIM_TAG,
            Box::new(Value::int_map(vec![
                (0, Value::Text(self.id())),
                (
                    1,
                    Value::Array(vec![Value::Tag(
                        COMID_TAG,
                        Box::new(Value::Bytes(cbor::encode(&comid))),
                    )]),
                ),
                (3, Value::Tag(URI_TAG, Box::new(Value::text(PROFILE)))),
                (
                    4,
                    Value::int_map(vec![(0, time(self.not_before)), (1, time(self.not_after))]),
                ),
            ])),
        ))
    }

    /// The unsigned CoRIM, checked as a reader checks it: a set that
    /// [`ReferenceSet::from_cbor`] would refuse is not written.
    pub fn encode(&self) -> Result<Vec<u8>, ReferenceError> {
        let bytes = self.to_cbor();
        ReferenceSet::from_cbor(&bytes)?;
        Ok(bytes)
    }

    /// The set signed by `key` (COSE_Sign1, ES256).
    pub fn sign(&self, key: &SigningKey) -> Result<Vec<u8>, ReferenceError> {
        cose::sign(&self.encode()?, key)
    }

    /// The reference values of `variant`, if the set has them.
    pub fn variant(&self, variant: Variant) -> Option<&VariantReference> {
        self.variants.iter().find(|v| v.variant == variant)
    }

    /// Whether `now` (Unix seconds) is within the window.
    pub fn check_time(&self, now: i64) -> Result<(), ReferenceError> {
        if now < self.not_before {
            return Err(ReferenceError::NotYetValid {
                name: self.name.clone(),
                version: self.version.clone(),
                not_before: self.not_before,
            });
        }
        if now > self.not_after {
            return Err(ReferenceError::Expired {
                name: self.name.clone(),
                version: self.version.clone(),
                not_after: self.not_after,
            });
        }
        Ok(())
    }

    /// Reads an unsigned set strictly (see the module documentation); the
    /// window is not checked against a time here.
    pub fn from_cbor(bytes: &[u8]) -> Result<ReferenceSet, ReferenceError> {
        if bytes.len() > MAX_SET_BYTES {
            return Err(ReferenceError::TooLarge(bytes.len()));
        }
        let top = cbor::decode(bytes, LIMITS).map_err(ReferenceError::Cbor)?;
        let set = read_corim(&top)?;
        if set.to_cbor() != bytes {
            return Err(format_error(
                "not in the one encoding this format has for its contents \
                 (measurements out of order, or a field written otherwise)",
            ));
        }
        Ok(set)
    }
}

/// Signs an unsigned set's bytes (read first: only a set that reads is
/// signed) with `key`.
pub fn sign_unsigned(bytes: &[u8], key: &SigningKey) -> Result<Vec<u8>, ReferenceError> {
    ReferenceSet::from_cbor(bytes)?;
    cose::sign(bytes, key)
}

/// Checks the COSE_Sign1 around a set against `keys` and returns its
/// payload (not yet read) and the kid of the key that signed it.
pub fn verify_signature(
    bytes: &[u8],
    keys: &[ReleaseKey],
) -> Result<(Vec<u8>, [u8; cose::KID_LEN]), ReferenceError> {
    if bytes.len() > MAX_SET_BYTES {
        return Err(ReferenceError::TooLarge(bytes.len()));
    }
    let top = cbor::decode(bytes, LIMITS).map_err(ReferenceError::Cbor)?;
    cose::verify(top, keys)
}

/// Reads a set as a relying party must: signed by one of `keys` (or, with
/// no key configured, unsigned), well formed, and valid at `now` (Unix
/// seconds).
pub fn open(bytes: &[u8], keys: &[ReleaseKey], now: i64) -> Result<OpenedSet, ReferenceError> {
    if bytes.len() > MAX_SET_BYTES {
        return Err(ReferenceError::TooLarge(bytes.len()));
    }
    let top = cbor::decode(bytes, LIMITS).map_err(ReferenceError::Cbor)?;
    let (payload, signer) = if cose::is_signed(&top) {
        if keys.is_empty() {
            return Err(ReferenceError::NoReleaseKey);
        }
        let (payload, kid) = cose::verify(top, keys)?;
        (payload, Some(kid))
    } else if keys.is_empty() {
        (bytes.to_vec(), None)
    } else {
        return Err(ReferenceError::Unsigned);
    };
    let set = ReferenceSet::from_cbor(&payload)?;
    set.check_time(now)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &payload)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes");
    Ok(OpenedSet {
        set,
        signer,
        digest,
    })
}

// ---- reading ----

fn format_error(m: &str) -> ReferenceError {
    ReferenceError::Format(m.to_string())
}

/// A map's entries, every key an integer of `allowed`.
struct Fields<'a> {
    what: &'static str,
    entries: BTreeMap<i64, &'a Value>,
}

impl<'a> Fields<'a> {
    fn of(value: &'a Value, what: &'static str, allowed: &[i64]) -> Result<Self, ReferenceError> {
        let Value::Map(entries) = value else {
            return Err(ReferenceError::Format(format!("{what} is not a map")));
        };
        let mut fields = BTreeMap::new();
        for (key, value) in entries {
            match key.as_int() {
                Some(k) if allowed.contains(&k) => {
                    fields.insert(k, value);
                }
                _ => {
                    return Err(ReferenceError::Format(format!(
                        "{what}: a key it does not have"
                    )));
                }
            }
        }
        Ok(Fields {
            what,
            entries: fields,
        })
    }

    fn get(&self, key: i64) -> Option<&'a Value> {
        self.entries.get(&key).copied()
    }

    fn required(&self, key: i64) -> Result<&'a Value, ReferenceError> {
        self.get(key)
            .ok_or_else(|| ReferenceError::Format(format!("{}: no key {key}", self.what)))
    }
}

fn text<'a>(value: &'a Value, what: &str, max: usize) -> Result<&'a str, ReferenceError> {
    match value {
        Value::Text(t) if !t.is_empty() && t.len() <= max && !t.chars().any(char::is_control) => {
            Ok(t)
        }
        _ => Err(ReferenceError::Format(format!(
            "{what} is not text of 1 to {max} bytes without control characters"
        ))),
    }
}

fn tagged<'a>(value: &'a Value, tag: u64, what: &str) -> Result<&'a Value, ReferenceError> {
    match value {
        Value::Tag(t, inner) if *t == tag => Ok(inner),
        _ => Err(ReferenceError::Format(format!(
            "{what} is not tagged {tag}"
        ))),
    }
}

fn time(value: &Value, what: &str) -> Result<i64, ReferenceError> {
    match tagged(value, EPOCH_TIME_TAG, what)? {
        Value::Uint(t) if *t <= MAX_TIME as u64 => Ok(*t as i64),
        _ => Err(ReferenceError::Format(format!(
            "{what} is not Unix seconds from 1970 to 9999"
        ))),
    }
}

fn array<'a>(value: &'a Value, what: &str) -> Result<&'a [Value], ReferenceError> {
    match value {
        Value::Array(items) => Ok(items),
        _ => Err(ReferenceError::Format(format!("{what} is not an array"))),
    }
}

/// The one SHA-256 digest of a `digests` entry.
fn sha256_digest(value: &Value, what: &str) -> Result<[u8; 32], ReferenceError> {
    let bad = || ReferenceError::Format(format!("{what}: digests is not one SHA-256 digest"));
    let [digest] = array(value, what)? else {
        return Err(bad());
    };
    match array(digest, what)? {
        [Value::Uint(SHA256_ALG), Value::Bytes(d)] => d.as_slice().try_into().map_err(|_| bad()),
        _ => Err(bad()),
    }
}

fn read_corim(top: &Value) -> Result<ReferenceSet, ReferenceError> {
    let corim = Fields::of(
        tagged(top, UNSIGNED_CORIM_TAG, "the unsigned CoRIM")?,
        "corim-map",
        &[0, 1, 3, 4],
    )?;
    let id = text(corim.required(0)?, "the CoRIM id", 2 * MAX_NAME_LEN + 1)?;
    let profile = tagged(corim.required(3)?, URI_TAG, "the profile")?;
    if *profile != Value::text(PROFILE) {
        return Err(ReferenceError::Format(format!(
            "the profile is not {PROFILE:?}"
        )));
    }
    let validity = Fields::of(corim.required(4)?, "rim-validity", &[0, 1])?;
    let not_before = time(validity.required(0)?, "not-before")?;
    let not_after = time(validity.required(1)?, "not-after")?;
    if not_before >= not_after {
        return Err(format_error("the window ends before it starts"));
    }
    let [tag] = array(corim.required(1)?, "tags")? else {
        return Err(format_error("tags does not hold exactly one CoMID"));
    };
    let Value::Bytes(comid) = tagged(tag, COMID_TAG, "the CoMID")? else {
        return Err(format_error("the CoMID is not a byte string"));
    };
    let comid = cbor::decode(comid, LIMITS).map_err(ReferenceError::Cbor)?;
    let comid = Fields::of(&comid, "concise-mid-tag", &[1, 4])?;
    let identity = Fields::of(comid.required(1)?, "tag-identity", &[0, 1])?;
    if identity.required(0)? != &Value::text(id) || identity.required(1)? != &Value::Uint(0) {
        return Err(format_error(
            "the CoMID's tag-identity is not the CoRIM's id, version 0",
        ));
    }
    let triples = Fields::of(comid.required(4)?, "triples", &[0])?;
    let triples = array(triples.required(0)?, "reference-triples")?;
    if triples.is_empty() || triples.len() > MAX_VARIANTS {
        return Err(ReferenceError::Format(format!(
            "{} reference triples, want 1 to {MAX_VARIANTS}",
            triples.len()
        )));
    }
    let mut image: Option<(String, String)> = None;
    let mut variants: Vec<VariantReference> = Vec::new();
    for triple in triples {
        let (reference, name, version) = read_triple(triple)?;
        if variants.iter().any(|v| v.variant == reference.variant) {
            return Err(ReferenceError::Format(format!(
                "variant {} appears twice",
                reference.variant
            )));
        }
        match &image {
            None => image = Some((name, version)),
            Some(seen) if *seen == (name, version) => {}
            Some(_) => return Err(format_error("the variants name different images")),
        }
        variants.push(reference);
    }
    let (name, version) = image.expect("at least one triple");
    if id != format!("{name} {version}") {
        return Err(format_error(
            "the CoRIM id is not the image's name and version",
        ));
    }
    Ok(ReferenceSet {
        name,
        version,
        not_before,
        not_after,
        variants,
    })
}

/// A launch variant's measurements: exactly the image, then the launch.
fn read_launch(
    variant: Variant,
    measurements: &[Value],
) -> Result<(VariantReference, String, String), ReferenceError> {
    let [image, launch] = measurements else {
        return Err(format_error(
            "an SEV-SNP part is not exactly the image and one launch",
        ));
    };
    let image = Fields::of(image, "measurement-map", &[0, 1])?;
    if image.required(0)? != &Value::text(IMAGE_KEY) {
        return Err(format_error(
            "an SEV-SNP part does not start with its image",
        ));
    }
    let values = Fields::of(
        image.required(1)?,
        "the image's measurement-values-map",
        &[0, 11],
    )?;
    let version = Fields::of(values.required(0)?, "version-map", &[0])?;
    let version = text(version.required(0)?, "the image's version", MAX_NAME_LEN)?;
    let name = text(values.required(11)?, "the image's name", MAX_NAME_LEN)?;
    let launch = Fields::of(launch, "measurement-map", &[0, 1])?;
    if launch.required(0)? != &Value::text(LAUNCH_KEY) {
        return Err(format_error(
            "an SEV-SNP part's second measurement is not its launch",
        ));
    }
    let what = "the launch's measurement-values-map";
    let values = Fields::of(
        launch.required(1)?,
        what,
        &[2, KERNEL_HASH_KEY, INITRD_HASH_KEY, CMDLINE_HASH_KEY],
    )?;
    let bad = || format_error("the launch digest is not one SHA-384 digest");
    let [digest] = array(values.required(2)?, what)? else {
        return Err(bad());
    };
    let digest: [u8; LAUNCH_DIGEST_LEN] = match array(digest, what)? {
        [Value::Uint(SHA384_ALG), Value::Bytes(d)] => d.as_slice().try_into().map_err(|_| bad())?,
        _ => return Err(bad()),
    };
    let hashes = DirectBootHashes {
        kernel: sha256_digest(
            values.required(KERNEL_HASH_KEY)?,
            "the launch's kernel hash",
        )?,
        initrd: sha256_digest(
            values.required(INITRD_HASH_KEY)?,
            "the launch's initrd hash",
        )?,
        cmdline: sha256_digest(
            values.required(CMDLINE_HASH_KEY)?,
            "the launch's command-line hash",
        )?,
    };
    let mut reference = VariantReference::snp_launch(digest, hashes);
    reference.variant = variant;
    Ok((reference, name.to_string(), version.to_string()))
}

fn read_triple(triple: &Value) -> Result<(VariantReference, String, String), ReferenceError> {
    let [environment, measurements] = array(triple, "a reference triple")? else {
        return Err(format_error(
            "a reference triple is not [environment, measurements]",
        ));
    };
    let environment = Fields::of(environment, "environment-map", &[0])?;
    let class = Fields::of(environment.required(0)?, "class-map", &[1, 2])?;
    if class.required(1)? != &Value::text(VENDOR) {
        return Err(ReferenceError::Format(format!(
            "the environment's vendor is not {VENDOR:?}"
        )));
    }
    let model = text(class.required(2)?, "the environment's model", MAX_NAME_LEN)?;
    let variant = Variant::from_name(model)
        .filter(|v| PCR_VARIANTS.contains(v) || LAUNCH_VARIANTS.contains(v))
        .ok_or_else(|| ReferenceError::UnsupportedVariant(model.to_string()))?;
    let measurements = array(measurements, "measurements")?;
    if LAUNCH_VARIANTS.contains(&variant) {
        return read_launch(variant, measurements);
    }
    if measurements.len() > 1 + confboot_attest::measurements::MAX_INDEX as usize + 1 + MAX_EVENTS {
        return Err(format_error("more measurements than PCRs and events"));
    }
    let mut image = None;
    let mut policy = MeasurementPolicy::default();
    let mut events = Vec::new();
    for m in measurements {
        let m = Fields::of(m, "measurement-map", &[0, 1])?;
        let key = m.required(0)?;
        let values = m.required(1)?;
        match key {
            Value::Text(k) if k == IMAGE_KEY => {
                if image.is_some() {
                    return Err(format_error("two image measurements"));
                }
                let values = Fields::of(values, "the image's measurement-values-map", &[0, 11])?;
                let version = Fields::of(values.required(0)?, "version-map", &[0])?;
                let version = text(version.required(0)?, "the image's version", MAX_NAME_LEN)?;
                let name = text(values.required(11)?, "the image's name", MAX_NAME_LEN)?;
                image = Some((name.to_string(), version.to_string()));
            }
            Value::Uint(pcr) => {
                let pcr = u32::try_from(*pcr)
                    .ok()
                    .filter(|p| *p <= confboot_attest::measurements::MAX_INDEX)
                    .ok_or_else(|| format_error("a PCR index above 23"))?;
                let what = "a PCR's measurement-values-map";
                let values = Fields::of(values, what, &[2, WARN_ONLY_KEY])?;
                let digest = sha256_digest(values.required(2)?, what)?;
                let warn_only = match values.get(WARN_ONLY_KEY) {
                    None => false,
                    Some(Value::Bool(true)) => true,
                    Some(_) => return Err(format_error("warn-only (-1) is present but not true")),
                };
                if policy.entries().contains_key(&pcr) {
                    return Err(ReferenceError::Format(format!("PCR {pcr} appears twice")));
                }
                policy.set(pcr, digest.to_vec(), warn_only);
            }
            Value::Text(k) if k.starts_with(EVENT_KEY_PREFIX) => {
                if *k != format!("{EVENT_KEY_PREFIX}{}", events.len()) {
                    return Err(format_error("events are not numbered 0, 1, ... in order"));
                }
                if events.len() == MAX_EVENTS {
                    return Err(format_error("more events than an event list holds"));
                }
                let what = "an event's measurement-values-map";
                let values = Fields::of(values, what, &[2, 11, EVENT_PCR_KEY, EVENT_TYPE_KEY])?;
                let pcr = match values.required(EVENT_PCR_KEY)? {
                    Value::Uint(p) if *p <= u64::from(confboot_attest::measurements::MAX_INDEX) => {
                        *p as u32
                    }
                    _ => return Err(format_error("an event's PCR is not 0 to 23")),
                };
                events.push(EventSummary {
                    pcr,
                    event_type: text(
                        values.required(EVENT_TYPE_KEY)?,
                        "an event's type",
                        MAX_DESCRIPTION_LEN,
                    )?
                    .to_string(),
                    sha256: sha256_digest(values.required(2)?, what)?,
                    description: text(
                        values.required(11)?,
                        "an event's description",
                        MAX_DESCRIPTION_LEN,
                    )?
                    .to_string(),
                });
            }
            _ => {
                return Err(format_error(
                    "a measurement key that is not image, a PCR or event/N",
                ));
            }
        }
    }
    let (name, version) = image.ok_or_else(|| format_error("no image measurement"))?;
    let policy_error = |error| ReferenceError::Policy { variant, error };
    if policy.entries().is_empty() {
        return Err(policy_error(PolicyError::Empty));
    }
    if !policy.enforces_something() {
        return Err(policy_error(PolicyError::NothingEnforced));
    }
    policy.check_pins_image().map_err(policy_error)?;
    let events = EventList { events };
    for (pcr, value) in events.replay() {
        if policy.entries().get(&pcr).map(|e| e.value.as_slice()) != Some(&value[..]) {
            return Err(ReferenceError::EventsDisagree { variant, pcr });
        }
    }
    Ok((
        VariantReference {
            variant,
            policy,
            events,
            launch: None,
        },
        name,
        version,
    ))
}

#[cfg(test)]
mod tests;
