//! The masks and how each one rewrites a value.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use weft_sdk_guest::path::kind;
use weft_sdk_guest::serde_json::{Map, Value};
use weft_sdk_guest::{Config, Error};

const KNOWN: &str = "`hash`, `salt`, `redact`, `replacement` and `truncate`";
/// The shortest salt accepted: shorter salts make hashes of small value
/// sets (phone numbers, birth dates) cheap to reverse by brute force.
const MIN_SALT: usize = 16;
/// What `redact` writes when `replacement` is not set.
const DEFAULT_REPLACEMENT: &str = "[REDACTED]";

/// How one column is masked.
#[derive(Debug, Clone, PartialEq)]
enum Mask {
    /// HMAC-SHA256 of the value's text, keyed with the salt, as lowercase hex.
    Hash,
    /// The configured replacement string.
    Redact,
    /// The first N characters of a string.
    Truncate(usize),
}

/// The masks per column, with the salt and the replacement they use.
pub struct Masks {
    columns: BTreeMap<String, Mask>,
    salt: Vec<u8>,
    replacement: String,
}

impl Masks {
    /// Reads `hash`, `redact` and `truncate` (a column in at most one of
    /// them), `salt` (required with `hash`) and `replacement`.
    pub fn from_config(config: &Config) -> Result<Masks, String> {
        config.refuse_unknown_keys(
            |key| matches!(key, "hash" | "salt" | "redact" | "replacement" | "truncate"),
            KNOWN,
        )?;
        let mut columns = BTreeMap::new();
        let mut add = |column: &str, mask: Mask| match columns.insert(column.to_string(), mask) {
            Some(_) => Err(format!(
                "column `{column}` is listed under more than one of `hash`, `redact` and `truncate`: give it one mask"
            )),
            None => Ok(()),
        };
        for column in config.list("hash") {
            add(column, Mask::Hash)?;
        }
        for column in config.list("redact") {
            add(column, Mask::Redact)?;
        }
        for entry in config.list("truncate") {
            let (column, keep) = parse_truncate(entry)?;
            add(column, Mask::Truncate(keep))?;
        }
        if columns.is_empty() {
            return Err("no column to mask: list columns under `hash`, `redact` or `truncate` (comma-separated; `truncate` as `column:N`)".into());
        }
        let salt = config.get("salt").unwrap_or("");
        if columns.values().any(|m| *m == Mask::Hash) && salt.chars().count() < MIN_SALT {
            return Err(format!(
                "`hash` needs a `salt` of at least {MIN_SALT} characters (got {}): set a long random secret, e.g. `salt: ${{PII_SALT}}`",
                salt.chars().count()
            ));
        }
        Ok(Masks {
            columns,
            salt: salt.as_bytes().to_vec(),
            replacement: config
                .get("replacement")
                .unwrap_or(DEFAULT_REPLACEMENT)
                .to_string(),
        })
    }

    /// Masks the listed columns of `row` in place; `part` names the row in
    /// errors. Absent columns and nulls are left as they are.
    pub fn apply(&self, row: &mut Map<String, Value>, part: &str) -> Result<(), Error> {
        for (column, mask) in &self.columns {
            let Some(value) = row.get_mut(column) else {
                continue;
            };
            if value.is_null() {
                continue;
            }
            *value = match mask {
                Mask::Hash => Value::String(self.hash(value)),
                Mask::Redact => Value::String(self.replacement.clone()),
                Mask::Truncate(keep) => match value {
                    Value::String(text) => Value::String(text.chars().take(*keep).collect()),
                    other => {
                        return Err(Error::permanent(format!(
                            "{part}.{column} is {}, and `truncate` keeps characters of strings only: hash or redact this column instead",
                            kind(other)
                        )));
                    }
                },
            };
        }
        Ok(())
    }

    /// HMAC-SHA256 of a string's text, or of another value's JSON text
    /// (`42`, `true`, `{"a":1}`), as lowercase hex.
    fn hash(&self, value: &Value) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.salt).expect("HMAC takes keys of any length");
        match value {
            Value::String(text) => mac.update(text.as_bytes()),
            other => mac.update(other.to_string().as_bytes()),
        }
        hex::encode(mac.finalize().into_bytes())
    }
}

/// `column:N` with N a whole number.
fn parse_truncate(entry: &str) -> Result<(&str, usize), String> {
    let parsed = entry
        .rsplit_once(':')
        .map(|(column, keep)| (column.trim(), keep.trim().parse::<usize>()));
    match parsed {
        Some((column, Ok(keep))) if !column.is_empty() => Ok((column, keep)),
        _ => Err(format!(
            "`truncate` entry `{entry}` is not `column:N`: write e.g. `truncate: \"phone:4,zip:2\"` to keep the first N characters"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_sdk_guest::serde_json::json;

    const SALT: &str = "0123456789abcdef";

    fn masks(pairs: &[(&str, &str)]) -> Result<Masks, String> {
        Masks::from_config(&Config::from(pairs))
    }

    #[test]
    fn hashes_redacts_and_truncates_and_keeps_nulls() {
        let m = masks(&[
            ("hash", "email,n"),
            ("salt", SALT),
            ("redact", "ssn"),
            ("truncate", "phone:3"),
        ])
        .unwrap();
        let mut row = json!({"email": "ada@example.com", "n": 42, "ssn": "123", "phone": "5551234", "zip": null})
            .as_object()
            .unwrap()
            .clone();
        m.apply(&mut row, "record").unwrap();
        // RFC 2104 HMAC-SHA256, checked with Python's hmac module.
        assert_eq!(
            row["email"],
            "512383176ce1b4c279ee430548cf07ec0b58efa588517b611c1f0da6d2b9e577"
        );
        assert_eq!(
            row["n"],
            "8d24a2a526d5f556469db8b6280e3a7b877a41155ca536be3a1f2a9d2be0eacd"
        );
        assert_eq!(row["ssn"], "[REDACTED]");
        assert_eq!(row["phone"], "555");
        assert_eq!(row["zip"], Value::Null);
    }

    #[test]
    fn redact_writes_the_configured_replacement() {
        let m = masks(&[("redact", "ssn, card"), ("replacement", "***")]).unwrap();
        let mut row = json!({"ssn": "1", "card": 4111, "name": "Ada"})
            .as_object()
            .unwrap()
            .clone();
        m.apply(&mut row, "record").unwrap();
        assert_eq!(
            Value::Object(row),
            json!({"ssn": "***", "card": "***", "name": "Ada"})
        );
    }

    #[test]
    fn truncating_a_number_is_permanent() {
        let m = masks(&[("truncate", "n:2")]).unwrap();
        let mut row = json!({"n": 12345}).as_object().unwrap().clone();
        assert_eq!(
            m.apply(&mut row, "changes"),
            Err(Error::permanent(
                "changes.n is a number, and `truncate` keeps characters of strings only: hash or redact this column instead"
            ))
        );
    }

    #[test]
    fn bad_config_is_refused_with_the_reason() {
        let err = |pairs: &[(&str, &str)]| masks(pairs).err().unwrap();
        assert!(err(&[]).starts_with("no column to mask"));
        assert!(err(&[("hash", "a")]).contains("needs a `salt` of at least 16 characters (got 0)"));
        assert!(err(&[("hash", "a"), ("redact", "a"), ("salt", SALT)]).contains("more than one"));
        assert!(err(&[("truncate", "a:x")]).contains("is not `column:N`"));
        assert!(err(&[("redact", "a"), ("sault", "x")]).starts_with("unknown config key `sault`"));
    }
}
