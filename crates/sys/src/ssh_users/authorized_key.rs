//! One OpenSSH public key, as a line of `authorized_keys`: `TYPE BASE64
//! [COMMENT]`, with no options (`command=`, `from=`, ... are refused: the
//! admin gives a key, not a policy).
//!
//! The key's blob is decoded and its first field checked against the type
//! (an `ssh-ed25519` line whose blob is an RSA key is refused), its length
//! against the type's, and RSA moduli below 2048 bits are refused.

/// The longest key line accepted (an RSA-16384 key is about 2.8 KB).
pub const MAX_AUTHORIZED_KEY_BYTES: usize = 8 * 1024;
/// The longest comment accepted.
pub const MAX_KEY_COMMENT_BYTES: usize = 256;
/// The smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;

/// Why a public key line was refused. No key material is quoted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Empty, or only white space.
    #[error("the public key is empty")]
    Empty,
    /// Longer than [`MAX_AUTHORIZED_KEY_BYTES`].
    #[error(
        "the public key line is longer than {} bytes",
        MAX_AUTHORIZED_KEY_BYTES
    )]
    TooLong,
    /// A control character (a line break would add a second line).
    #[error("the public key line holds a control character (one key per entry)")]
    ControlCharacter,
    /// A key type OpenSSH does not accept for user authentication here.
    #[error(
        "unsupported key type {0:?} (ssh-ed25519, ecdsa-sha2-nistp256/384/521, \
         sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com or \
         ssh-rsa; options such as command= are not accepted)"
    )]
    UnsupportedType(String),
    /// The base64 field is missing or not base64.
    #[error("the key's second field is not base64")]
    NotBase64,
    /// The blob does not parse as a key of its type.
    #[error("the key does not parse: {0}")]
    MalformedBlob(&'static str),
    /// The blob is a key of another type than the line says.
    #[error("the key's blob is of another type than its first field")]
    TypeMismatch,
    /// An RSA key below `MIN_RSA_BITS`.
    #[error("an RSA key of {bits} bits (at least {} are required)", MIN_RSA_BITS)]
    WeakRsa {
        /// The modulus' size.
        bits: usize,
    },
    /// The comment is longer than `MAX_KEY_COMMENT_BYTES`.
    #[error("the key's comment is longer than {} bytes", MAX_KEY_COMMENT_BYTES)]
    CommentTooLong,
}

/// A validated public key line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizedKey {
    key_type: String,
    blob_base64: String,
    comment: String,
}

/// The key types accepted, with how their blob continues after the type.
const KEY_TYPES: [&str; 7] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-rsa",
];

impl AuthorizedKey {
    /// Parses and checks one key line (`TYPE BASE64 [COMMENT]`).
    pub fn parse(line: &str) -> Result<AuthorizedKey, KeyError> {
        if line.len() > MAX_AUTHORIZED_KEY_BYTES {
            return Err(KeyError::TooLong);
        }
        if line.chars().any(|c| c.is_control() && c != '\t') {
            return Err(KeyError::ControlCharacter);
        }
        let line = line.trim();
        if line.is_empty() {
            return Err(KeyError::Empty);
        }
        let mut fields = line.splitn(3, [' ', '\t']);
        let key_type = fields.next().unwrap_or_default();
        if !KEY_TYPES.contains(&key_type) {
            return Err(KeyError::UnsupportedType(
                key_type.chars().take(64).collect(),
            ));
        }
        let blob_base64 = fields.next().unwrap_or_default().trim();
        let blob = confboot_util::base64::decode(blob_base64).map_err(|_| KeyError::NotBase64)?;
        let comment = fields.next().unwrap_or_default().trim();
        if comment.len() > MAX_KEY_COMMENT_BYTES {
            return Err(KeyError::CommentTooLong);
        }
        check_blob(key_type, &blob)?;
        Ok(AuthorizedKey {
            key_type: key_type.to_string(),
            blob_base64: blob_base64.to_string(),
            comment: comment.to_string(),
        })
    }

    /// The key type, e.g. `ssh-ed25519`.
    pub fn key_type(&self) -> &str {
        &self.key_type
    }

    /// The line as `authorized_keys` holds it, with its newline.
    pub fn to_line(&self) -> String {
        if self.comment.is_empty() {
            format!("{} {}\n", self.key_type, self.blob_base64)
        } else {
            format!("{} {} {}\n", self.key_type, self.blob_base64, self.comment)
        }
    }
}

/// Reads the SSH wire format's length-prefixed strings.
struct Wire<'a>(&'a [u8]);

impl<'a> Wire<'a> {
    fn string(&mut self) -> Result<&'a [u8], KeyError> {
        let too_short = KeyError::MalformedBlob("a field runs past the end");
        let len = self.0.get(..4).ok_or_else(|| too_short.clone())?;
        let len = u32::from_be_bytes(len.try_into().expect("four bytes")) as usize;
        let field = self.0.get(4..4 + len).ok_or(too_short)?;
        self.0 = &self.0[4 + len..];
        Ok(field)
    }

    fn end(&self) -> Result<(), KeyError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(KeyError::MalformedBlob("bytes after the key"))
        }
    }
}

/// Checks that `blob` is a well-formed public key of `key_type`.
fn check_blob(key_type: &str, blob: &[u8]) -> Result<(), KeyError> {
    let mut w = Wire(blob);
    if w.string()? != key_type.as_bytes() {
        return Err(KeyError::TypeMismatch);
    }
    let curve_point = |w: &mut Wire, curve: &str, point_len: usize| {
        if w.string()? != curve.as_bytes() {
            return Err(KeyError::MalformedBlob("the curve differs from the type's"));
        }
        let point = w.string()?;
        if point.len() != point_len || point[0] != 4 {
            return Err(KeyError::MalformedBlob(
                "the point is not an uncompressed point of the curve's size",
            ));
        }
        Ok(())
    };
    match key_type {
        "ssh-ed25519" | "sk-ssh-ed25519@openssh.com" => {
            if w.string()?.len() != 32 {
                return Err(KeyError::MalformedBlob("an Ed25519 key is 32 bytes"));
            }
        }
        "ecdsa-sha2-nistp256" | "sk-ecdsa-sha2-nistp256@openssh.com" => {
            curve_point(&mut w, "nistp256", 65)?
        }
        "ecdsa-sha2-nistp384" => curve_point(&mut w, "nistp384", 97)?,
        "ecdsa-sha2-nistp521" => curve_point(&mut w, "nistp521", 133)?,
        "ssh-rsa" => {
            let exponent = w.string()?;
            let modulus = w.string()?;
            if exponent.is_empty() || exponent.len() > 8 {
                return Err(KeyError::MalformedBlob("the RSA exponent"));
            }
            let modulus = match modulus.iter().position(|&b| b != 0) {
                Some(i) => &modulus[i..],
                None => return Err(KeyError::MalformedBlob("the RSA modulus is zero")),
            };
            let bits = modulus.len() * 8 - modulus[0].leading_zeros() as usize;
            if bits < MIN_RSA_BITS {
                return Err(KeyError::WeakRsa { bits });
            }
        }
        _ => return Err(KeyError::UnsupportedType(key_type.to_string())),
    }
    if key_type.starts_with("sk-") {
        // The application string (usually "ssh:").
        let application = w.string()?;
        if application.is_empty() || std::str::from_utf8(application).is_err() {
            return Err(KeyError::MalformedBlob("the security key's application"));
        }
    }
    w.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(fields: &[&[u8]]) -> String {
        let mut blob = Vec::new();
        for f in fields {
            blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
            blob.extend_from_slice(f);
        }
        confboot_util::base64::encode(&blob)
    }

    fn ed25519() -> String {
        format!(
            "ssh-ed25519 {} alice@laptop",
            wire(&[b"ssh-ed25519", &[7; 32]])
        )
    }

    #[test]
    fn valid_keys_are_kept_as_one_line() {
        let k = AuthorizedKey::parse(&ed25519()).unwrap();
        assert_eq!(k.key_type(), "ssh-ed25519");
        assert_eq!(k.to_line(), format!("{}\n", ed25519()));
        let mut point = vec![4u8];
        point.extend([1; 64]);
        let ecdsa = format!(
            "ecdsa-sha2-nistp256 {}",
            wire(&[b"ecdsa-sha2-nistp256", b"nistp256", &point])
        );
        assert_eq!(
            AuthorizedKey::parse(&ecdsa).unwrap().to_line(),
            ecdsa + "\n"
        );
        let mut modulus = vec![0u8, 0xc1];
        modulus.extend([5; 255]);
        let rsa = format!("ssh-rsa {} k", wire(&[b"ssh-rsa", &[1, 0, 1], &modulus]));
        AuthorizedKey::parse(&rsa).unwrap();
    }

    #[test]
    fn bad_keys_are_refused_with_their_reason() {
        let blob = wire(&[b"ssh-ed25519", &[7; 32]]);
        let rsa_blob = wire(&[b"ssh-rsa", &[1, 0, 1], &[0xc1; 128]]);
        for (line, err) in [
            ("".to_string(), KeyError::Empty),
            ("  ".to_string(), KeyError::Empty),
            (
                format!("command=\"/bin/sh\" ssh-ed25519 {blob}"),
                KeyError::UnsupportedType("command=\"/bin/sh\"".into()),
            ),
            (
                format!("ssh-dss {blob}"),
                KeyError::UnsupportedType("ssh-dss".into()),
            ),
            ("ssh-ed25519 not*base64".to_string(), KeyError::NotBase64),
            (
                "ssh-ed25519".to_string(),
                KeyError::MalformedBlob("a field runs past the end"),
            ),
            (
                format!("ssh-ed25519 {blob}\nssh-ed25519 {blob}"),
                KeyError::ControlCharacter,
            ),
            (format!("ssh-rsa {blob}"), KeyError::TypeMismatch),
            (
                format!("ssh-rsa {rsa_blob}"),
                KeyError::WeakRsa { bits: 1024 },
            ),
            (
                format!("ssh-ed25519 {}", wire(&[b"ssh-ed25519", &[7; 31]])),
                KeyError::MalformedBlob("an Ed25519 key is 32 bytes"),
            ),
            (
                format!("ssh-ed25519 {}", wire(&[b"ssh-ed25519", &[7; 32], b"x"])),
                KeyError::MalformedBlob("bytes after the key"),
            ),
            (
                format!("ssh-ed25519 {blob} {}", "c".repeat(300)),
                KeyError::CommentTooLong,
            ),
            (
                format!("ssh-ed25519 {}", "A".repeat(9000)),
                KeyError::TooLong,
            ),
        ] {
            assert_eq!(AuthorizedKey::parse(&line), Err(err), "{line:.80}");
        }
    }
}
