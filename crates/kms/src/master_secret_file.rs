//! The master-secret file, in Constellation's format:
//! `{"key": "<base64>", "salt": "<base64>"}`. `confboot init` writes it
//! (a new file, mode 0600); `confboot recover` and joinsvc read it (bounded
//! in size). Errors name the file and the field, never the secret.
//!
//! The file is read with a serde derive ([`confboot_util::json::object`]):
//! exactly the members `key` and `salt`, each once; each member is read
//! whatever its type, so that a member that is not a base64 string is
//! named in [`MasterSecretFileError::Field`].

use std::path::{Path, PathBuf};

use serde::Deserialize;
use zeroize::Zeroizing;

use super::{KmsError, MasterSecret};
use confboot_util::fs::{FileError, read_bounded, write_new_private};
use confboot_util::json::{JsonError, MaybeText};

/// The largest master-secret file read. A key and a salt of the longest
/// accepted length take under 1 KiB in base64; the rest is room for
/// formatting.
pub const MAX_MASTER_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Why a master-secret file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MasterSecretFileError {
    /// The file could not be read (or is too large) or written.
    #[error("{0}")]
    File(#[from] FileError),
    /// The file is not a JSON object.
    #[error(
        "{}: not a master-secret file ({})",
        path.display(),
        json_problem(*line, *column)
    )]
    NotJson {
        /// The file.
        path: PathBuf,
        /// Where the JSON is broken (1-based; 0 when it is valid JSON but
        /// not an object).
        line: usize,
        /// The column on that line.
        column: usize,
    },
    /// A field is missing or is not a base64 string.
    #[error("{}: \"{field}\" must be a base64 string", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// `key` or `salt`.
        field: &'static str,
    },
    /// A member appears twice (`key` or `salt`).
    #[error("{}: the member {key:?} is repeated", path.display())]
    RepeatedKey {
        /// The file.
        path: PathBuf,
        /// The repeated member.
        key: String,
    },
    /// The file holds a member other than `key` and `salt`.
    #[error("{}: not a master-secret file ({error})", path.display())]
    Unknown {
        /// The file.
        path: PathBuf,
        /// Where, without the member's name.
        #[source]
        error: JsonError,
    },
    /// The key or salt has a length out of bounds.
    #[error("{}: {error}", path.display())]
    Secret {
        /// The file.
        path: PathBuf,
        /// Which length, and the bounds.
        #[source]
        error: KmsError,
    },
}

/// What is wrong with a file that is not a JSON object: where its JSON
/// breaks, or (line 0) that it is JSON of another shape.
fn json_problem(line: usize, column: usize) -> String {
    if line == 0 {
        "want a JSON object".to_string()
    } else {
        format!("bad JSON at line {line}, column {column}")
    }
}

impl MasterSecret {
    /// Reads a master-secret file (at most [`MAX_MASTER_SECRET_FILE_BYTES`]).
    pub fn read_file(path: &Path) -> Result<MasterSecret, MasterSecretFileError> {
        let bytes = read_bounded(path, MAX_MASTER_SECRET_FILE_BYTES)?;
        MasterSecret::from_file_bytes(&bytes, path)
    }

    /// Parses a master-secret file's contents; `path` only names it in errors.
    pub fn from_file_bytes(
        bytes: &[u8],
        path: &Path,
    ) -> Result<MasterSecret, MasterSecretFileError> {
        let path_buf = || path.to_path_buf();
        let file: FileJson = confboot_util::json::object(bytes).map_err(|error| match error {
            JsonError::Syntax { line, column } => MasterSecretFileError::NotJson {
                path: path_buf(),
                line,
                column,
            },
            JsonError::NotObject => MasterSecretFileError::NotJson {
                path: path_buf(),
                line: 0,
                column: 0,
            },
            JsonError::DuplicateKey { key } => MasterSecretFileError::RepeatedKey {
                path: path_buf(),
                key,
            },
            error @ JsonError::Data { .. } => MasterSecretFileError::Unknown {
                path: path_buf(),
                error,
            },
        })?;
        let field = |value: &Option<MaybeText>,
                     field: &'static str|
         -> Result<Vec<u8>, MasterSecretFileError> {
            value
                .as_ref()
                .and_then(MaybeText::text)
                .and_then(|text| confboot_util::base64::decode(text).ok())
                .ok_or_else(|| MasterSecretFileError::Field {
                    path: path_buf(),
                    field,
                })
        };
        MasterSecret::new(field(&file.key, "key")?, field(&file.salt, "salt")?).map_err(|error| {
            MasterSecretFileError::Secret {
                path: path_buf(),
                error,
            }
        })
    }

    /// The master-secret file's contents (a secret itself).
    pub fn to_file_text(&self) -> Zeroizing<String> {
        Zeroizing::new(format!(
            "{{\"key\": \"{}\", \"salt\": \"{}\"}}\n",
            confboot_util::base64::encode(self.key().expose()),
            confboot_util::base64::encode(self.salt().expose())
        ))
    }

    /// Writes the master-secret file: a new file, mode 0600. An existing
    /// file is never overwritten.
    pub fn write_file(&self, path: &Path) -> Result<(), MasterSecretFileError> {
        write_new_private(path, self.to_file_text().as_bytes())?;
        Ok(())
    }
}

/// The file's members, each read whatever its type (the base64 text
/// zeroized on drop).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileJson {
    key: Option<MaybeText>,
    salt: Option<MaybeText>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_testkit::TempDir;

    #[test]
    fn written_files_read_back_and_are_never_overwritten() {
        let dir = TempDir::new("msf-roundtrip");
        let f = dir.path().join("ms.json");
        let m = MasterSecret::generate().unwrap();
        m.write_file(&f).unwrap();
        assert_eq!(MasterSecret::read_file(&f).unwrap(), m);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let other = MasterSecret::generate().unwrap();
        assert!(matches!(
            other.write_file(&f),
            Err(MasterSecretFileError::File(FileError::Write { .. }))
        ));
        assert_eq!(MasterSecret::read_file(&f).unwrap(), m, "still the first");
    }

    #[test]
    fn constellations_format_is_read() {
        let key = confboot_util::base64::encode(&[1; 32]);
        let salt = confboot_util::base64::encode(&[2; 32]);
        let text = format!("{{\n  \"key\": \"{key}\",\n  \"salt\": \"{salt}\"\n}}\n");
        let m = MasterSecret::from_file_bytes(text.as_bytes(), Path::new("ms.json")).unwrap();
        assert_eq!(m.key().expose(), &[1; 32]);
        assert_eq!(m.salt().expose(), &[2; 32]);
        assert_eq!(
            MasterSecret::from_file_bytes(m.to_file_text().as_bytes(), Path::new("x")).unwrap(),
            m
        );
    }

    #[test]
    fn bad_files_are_refused_without_echoing_the_secret() {
        let key = confboot_util::base64::encode(&[1; 32]);
        let salt = confboot_util::base64::encode(&[2; 32]);
        let short = confboot_util::base64::encode(&[1; 8]);
        let p = Path::new("ms.json");
        for (text, check) in [
            (
                format!(r#"{{"key": "{key}", "salt": "{short}"}}"#),
                (|e: &MasterSecretFileError| {
                    matches!(
                        e,
                        MasterSecretFileError::Secret {
                            error: KmsError::BadLength { what: "salt", .. },
                            ..
                        }
                    )
                }) as fn(&MasterSecretFileError) -> bool,
            ),
            (format!(r#"{{"key": "{key}"}}"#), |e| {
                matches!(e, MasterSecretFileError::Field { field: "salt", .. })
            }),
            (format!(r#"{{"key": 5, "salt": "{salt}"}}"#), |e| {
                matches!(e, MasterSecretFileError::Field { field: "key", .. })
            }),
            (format!(r#"{{"key": "!{key}", "salt": "{salt}"}}"#), |e| {
                matches!(e, MasterSecretFileError::Field { field: "key", .. })
            }),
            (format!(r#"{{"key": "{key}", "#), |e| {
                matches!(e, MasterSecretFileError::NotJson { line: 1, .. })
            }),
            (format!(r#"["{key}"]"#), |e| {
                matches!(e, MasterSecretFileError::NotJson { line: 0, .. })
            }),
            (
                format!(r#"{{"key": "{key}", "salt": "{salt}", "\u006bey": "{key}"}}"#),
                |e| matches!(e, MasterSecretFileError::RepeatedKey { key, .. } if key == "key"),
            ),
            (
                format!(r#"{{"key": "{key}", "salt": "{salt}", "{key}": 1}}"#),
                |e| matches!(e, MasterSecretFileError::Unknown { .. }),
            ),
            (
                format!(r#"{{"key": "{key}", "salt": "{salt}", "{{": "x"}}"#),
                |e| matches!(e, MasterSecretFileError::Unknown { .. }),
            ),
            (format!(r#"{{"key": "{key}", "salt": ["{salt}", 1"#), |e| {
                matches!(e, MasterSecretFileError::NotJson { line: 1, .. })
            }),
            (format!(r#"{{"key": null, "salt": "{salt}"}}"#), |e| {
                matches!(e, MasterSecretFileError::Field { field: "key", .. })
            }),
            (
                format!(r#"{{"key": {{"k": "{key}"}}, "salt": "{salt}"}}"#),
                |e| matches!(e, MasterSecretFileError::Field { field: "key", .. }),
            ),
        ] {
            let e = MasterSecret::from_file_bytes(text.as_bytes(), p).unwrap_err();
            assert!(check(&e), "{text}: {e:?}");
            let shown = e.to_string();
            assert!(shown.starts_with("ms.json"), "{shown}");
            assert!(
                !shown.contains(&key) && !shown.contains(&salt),
                "an error must not echo the secret: {shown}"
            );
        }
    }

    #[test]
    fn an_oversized_file_is_refused_before_parsing() {
        let dir = TempDir::new("msf-oversized");
        let f = dir.path().join("ms.json");
        let padding = " ".repeat(MAX_MASTER_SECRET_FILE_BYTES as usize);
        let m = MasterSecret::generate().unwrap();
        std::fs::write(&f, format!("{}{padding}", m.to_file_text().as_str())).unwrap();
        let e = MasterSecret::read_file(&f).unwrap_err();
        assert!(
            matches!(
                e,
                MasterSecretFileError::File(FileError::TooLarge {
                    limit: MAX_MASTER_SECRET_FILE_BYTES,
                    ..
                })
            ),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.contains("ms.json") && shown.contains(&MAX_MASTER_SECRET_FILE_BYTES.to_string()),
            "{shown}"
        );
    }
}
