//! JSON read strictly with serde derives.
//!
//! A format derives `Deserialize` with `#[serde(deny_unknown_fields)]` and
//! is read with [`object`], which adds what a derive alone lets through:
//!
//! - the document must be valid JSON as a whole before any member is
//!   looked at, so a broken file reads as [`JsonError::Syntax`] whatever
//!   its members hold;
//! - the top level must be an object: a derived struct also reads a JSON
//!   array as its fields in order, which [`object`] refuses
//!   ([`JsonError::NotObject`]); members that are structs take the same
//!   rule through [`Object`];
//! - a repeated key is refused as [`JsonError::DuplicateKey`]. A derived
//!   struct refuses a repeated field itself; a map member takes
//!   [`unique_map`]. Keys are compared after unescaping (`"a"` and
//!   `"\u0061"` are the same key);
//! - errors never quote a value of the document ([`describe`]).
//!
//! Secrets read through [`SecretText`] (or [`MaybeText`]) live in zeroized
//! strings. serde_json unescapes a string that holds escapes in a scratch
//! buffer of its own, which this module cannot wipe; a string without
//! escapes is copied straight from the input.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use zeroize::Zeroizing;

/// The start of serde's message for a repeated struct field, which
/// [`unique_map`] uses for a repeated map key as well.
const DUPLICATE_PREFIX: &str = "duplicate field `";

/// Why a document was refused. No variant quotes a value of the document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The text is not JSON (or ends early, or has trailing characters).
    #[error("bad JSON at line {line}, column {column}")]
    Syntax {
        /// Where the JSON breaks (1-based).
        line: usize,
        /// The column on that line.
        column: usize,
    },
    /// The text is JSON but not an object.
    #[error("want a JSON object")]
    NotObject,
    /// An object holds the same key twice.
    #[error("the key {key:?} is repeated")]
    DuplicateKey {
        /// The key, unescaped.
        key: String,
    },
    /// A member is missing, unknown or of the wrong type or value.
    #[error("{description}")]
    Data {
        /// serde's account without the values it quotes ([`describe`]).
        description: String,
    },
}

/// Reads `bytes` as one JSON object into `T` (see the module doc).
pub fn object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    if let Err(e) = serde_json::from_slice::<IgnoredAny>(bytes) {
        return Err(JsonError::Syntax {
            line: e.line(),
            column: e.column(),
        });
    }
    if bytes.iter().find(|b| !b" \t\r\n".contains(b)) != Some(&b'{') {
        return Err(JsonError::NotObject);
    }
    serde_json::from_slice::<Object<T>>(bytes)
        .map(|o| o.0)
        .map_err(|e| error_of(&e))
}

/// The typed error of a serde_json error met after the syntax check.
fn error_of(e: &serde_json::Error) -> JsonError {
    let message = message(e);
    if let Some(key) = message
        .strip_prefix(DUPLICATE_PREFIX)
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return JsonError::DuplicateKey {
            key: key.to_string(),
        };
    }
    JsonError::Data {
        description: describe(e),
    }
}

/// serde's message without the position serde_json appends.
fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_string(),
        None => text,
    }
}

/// A serde_json error's text without the values it quotes: its category
/// (`syntax`, `data`, `end of input`, `I/O`), serde's message with every
/// quoted value dropped (a string in `"…"`, a number, a boolean or an
/// unknown name in backticks) and its line and column. The names a struct
/// expects (after `missing field` or `duplicate field`) are kept; the list
/// of the names it would accept is dropped.
pub fn describe(e: &serde_json::Error) -> String {
    let category = match e.classify() {
        serde_json::error::Category::Io => "I/O",
        serde_json::error::Category::Syntax => "syntax",
        serde_json::error::Category::Data => "data",
        serde_json::error::Category::Eof => "end of input",
    };
    let message = message(e);
    // After an unknown name serde lists the names it accepts: dropped.
    let message = match message.find(", expected") {
        Some(cut) if message.starts_with("unknown ") => &message[..cut],
        _ => message.as_str(),
    };
    let message = scrub(message);
    if e.line() == 0 {
        format!("{category}: {message}")
    } else {
        format!(
            "{category}: {message} at line {} column {}",
            e.line(),
            e.column()
        )
    }
}

/// `message` without its quoted spans (see [`describe`]).
fn scrub(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                // serde quotes a string with `{:?}`: `\"` does not end it.
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                trim_space(&mut out);
            }
            '`' => {
                let span: String = chars.by_ref().take_while(|c| *c != '`').collect();
                if out.ends_with("missing field ") || out.ends_with("duplicate field ") {
                    out.push('`');
                    out.push_str(&span);
                    out.push('`');
                } else {
                    trim_space(&mut out);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

fn trim_space(out: &mut String) {
    while out.ends_with(' ') {
        out.pop();
    }
}

/// A member that must be a JSON object: a derived struct alone would also
/// read an array as its fields in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(ObjectVisitor(PhantomData))
    }
}

/// A `deserialize_with` helper for a map member: a JSON object whose keys
/// are all different after unescaping, refused at the first repeated key
/// ([`JsonError::DuplicateKey`] through [`object`]).
pub fn unique_map<'de, D, K, V>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: de::Deserializer<'de>,
    K: Deserialize<'de> + Ord + fmt::Display,
    V: Deserialize<'de>,
{
    struct MapVisitor<K, V>(PhantomData<(K, V)>);
    impl<'de, K, V> Visitor<'de> for MapVisitor<K, V>
    where
        K: Deserialize<'de> + Ord + fmt::Display,
        V: Deserialize<'de>,
    {
        type Value = BTreeMap<K, V>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<K>()? {
                if out.contains_key(&key) {
                    return Err(de::Error::custom(format_args!("{DUPLICATE_PREFIX}{key}`")));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_map(MapVisitor(PhantomData))
}

/// A string member holding a secret, kept in a zeroized string.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(pub Zeroizing<String>);

impl SecretText {
    /// The secret text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretText {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("SecretText(..)")
    }
}

struct SecretVisitor;

impl<'de> Visitor<'de> for SecretVisitor {
    type Value = SecretText;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<SecretText, E> {
        Ok(SecretText(Zeroizing::new(v.to_string())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<SecretText, E> {
        Ok(SecretText(Zeroizing::new(v)))
    }
}

impl<'de> Deserialize<'de> for SecretText {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_string(SecretVisitor)
    }
}

/// A member that is a string (a secret, zeroized) or any other JSON
/// value, read without failing, so that the format names the member that
/// is not a string in its own error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MaybeText {
    /// A string.
    Text(SecretText),
    /// Any other value (skipped unread).
    Other,
}

impl MaybeText {
    /// The string, if the member is one.
    pub fn text(&self) -> Option<&str> {
        match self {
            MaybeText::Text(t) => Some(t.expose()),
            MaybeText::Other => None,
        }
    }
}

impl<'de> Deserialize<'de> for MaybeText {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AnyVisitor;
        impl<'de> Visitor<'de> for AnyVisitor {
            type Value = MaybeText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MaybeText, E> {
                SecretVisitor.visit_str(v).map(MaybeText::Text)
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<MaybeText, E> {
                SecretVisitor.visit_string(v).map(MaybeText::Text)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<MaybeText, E> {
                Ok(MaybeText::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<MaybeText, E> {
                Ok(MaybeText::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<MaybeText, E> {
                Ok(MaybeText::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<MaybeText, E> {
                Ok(MaybeText::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<MaybeText, E> {
                Ok(MaybeText::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeText, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeText::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MaybeText, A::Error> {
                IgnoredAny.visit_map(map).map(|_| MaybeText::Other)
            }
        }
        deserializer.deserialize_any(AnyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: u16,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        a: String,
        inner: Option<Object<Inner>>,
        #[serde(default, deserialize_with = "unique_map")]
        map: BTreeMap<String, u8>,
    }

    #[test]
    fn a_good_document_reads() {
        let doc: Doc =
            object(br#" {"a": "x", "inner": {"n": 5}, "map": {"k": 1, "l": 2}}"#).unwrap();
        assert_eq!(doc.a, "x");
        assert_eq!(doc.inner, Some(Object(Inner { n: 5 })));
        assert_eq!(doc.map.len(), 2);
    }

    #[test]
    fn repeated_keys_are_refused_after_unescaping() {
        for text in [
            r#"{"a": "x", "a": "y"}"#,
            r#"{"a": "x", "\u0061": "y"}"#,
            r#"{"a": "x", "map": {"k": 1, "\u006b": 2}}"#,
        ] {
            let e = object::<Doc>(text.as_bytes()).unwrap_err();
            assert!(
                matches!(&e, JsonError::DuplicateKey { .. }),
                "{text}: {e:?}"
            );
        }
        assert_eq!(
            object::<Doc>(br#"{"a": "x", "map": {"k": 1, "k": 2}}"#),
            Err(JsonError::DuplicateKey { key: "k".into() })
        );
        assert_eq!(
            object::<Doc>(br#"{"a": "x", "inner": {"n": 1, "\u006e": 2}}"#),
            Err(JsonError::DuplicateKey { key: "n".into() })
        );
    }

    #[test]
    fn only_objects_are_read() {
        assert_eq!(object::<Doc>(br#"["x"]"#), Err(JsonError::NotObject));
        assert_eq!(object::<Doc>(b" 5 "), Err(JsonError::NotObject));
        let e = object::<Doc>(br#"{"a": "x", "inner": [5]}"#).unwrap_err();
        assert!(matches!(e, JsonError::Data { .. }), "{e:?}");
    }

    #[test]
    fn broken_json_is_a_syntax_error_before_any_member_is_checked() {
        assert_eq!(
            object::<Doc>(br#"{"a": 5, "#),
            Err(JsonError::Syntax { line: 1, column: 9 })
        );
        assert!(matches!(
            object::<Doc>(b"[1,"),
            Err(JsonError::Syntax { .. })
        ));
        assert!(matches!(
            object::<Doc>(br#"{"a": "x"} {}"#),
            Err(JsonError::Syntax { .. })
        ));
        let e = object::<Doc>(br#"{"a": "x", "b": 1}"#).unwrap_err();
        assert!(
            matches!(&e, JsonError::Data { description } if description.contains("unknown field")),
            "{e:?}"
        );
    }

    #[test]
    fn descriptions_keep_the_category_and_position_but_no_value() {
        let secret = "c2VjcmV0IGtleSBtYXRlcmlhbA==";
        let quoted = format!(r#"{{"n": "{secret}\"\\ more"}}"#);
        let e = serde_json::from_str::<Inner>(&quoted).unwrap_err();
        assert!(e.to_string().contains(secret), "serde quotes it: {e}");
        let shown = describe(&e);
        assert!(
            !shown.contains(secret) && !shown.contains("more"),
            "{shown}"
        );
        assert!(
            shown.starts_with("data: invalid type: string, expected u16"),
            "{shown}"
        );
        assert!(
            shown.ends_with(&format!("at line 1 column {}", e.column())),
            "{shown}"
        );
        let e = serde_json::from_str::<Inner>(r#"{"n": 70000}"#).unwrap_err();
        assert_eq!(
            describe(&e),
            "data: invalid value: integer, expected u16 at line 1 column 11"
        );
        let e = serde_json::from_str::<Inner>(&format!(r#"{{"{secret}": 1}}"#)).unwrap_err();
        let shown = describe(&e);
        assert!(!shown.contains(secret), "{shown}");
        assert!(
            shown.starts_with("data: unknown field at line 1"),
            "{shown}"
        );
        let e = serde_json::from_str::<Inner>("{}").unwrap_err();
        assert!(
            describe(&e).starts_with("data: missing field `n`"),
            "{}",
            describe(&e)
        );
        let e = serde_json::from_str::<Inner>("{").unwrap_err();
        assert!(
            describe(&e).starts_with("end of input: "),
            "{}",
            describe(&e)
        );
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Secrets {
        key: SecretText,
        other: Option<MaybeText>,
    }

    #[test]
    fn secrets_and_loose_members() {
        let s: Secrets = object(br#"{"key": "k\u0065y", "other": {"x": [1, {"y": 2}]}}"#).unwrap();
        assert_eq!(s.key.expose(), "key");
        assert_eq!(s.other, Some(MaybeText::Other));
        assert!(!format!("{s:?}").contains("key\""));
        let s: Secrets = object(br#"{"key": "k", "other": "v"}"#).unwrap();
        assert_eq!(s.other.as_ref().and_then(MaybeText::text), Some("v"));
        for other in ["5", "true", "null", "[1, 2]", "-1.5"] {
            let text = format!(r#"{{"key": "k", "other": {other}}}"#);
            let s: Secrets = object(text.as_bytes()).unwrap();
            assert!(
                matches!(s.other, Some(MaybeText::Other)) || other == "null",
                "{other}"
            );
        }
        assert!(matches!(
            object::<Secrets>(br#"{"key": 5}"#),
            Err(JsonError::Data { .. })
        ));
    }
}
