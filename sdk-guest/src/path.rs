//! Dotted paths into the Sequin message, as Sequin's built-in path transform
//! reads them: `record.address.city`, `metadata.table_name`, `action`.

use serde_json::Value;

use crate::Error;

/// The top-level keys of the Sequin message a path may start with.
pub const ROOTS: [&str; 4] = ["record", "changes", "action", "metadata"];

/// A dotted path into the Sequin message `{record, changes, action,
/// metadata}`, e.g. `record.address.city`.
///
/// The rules are Sequin's (its path transform): the first key is one of
/// [`ROOTS`], keys are separated by `.` and made of ASCII letters, digits,
/// `_` and `-`. Resolving follows objects key by key; a missing key, a
/// `null` or an array on the way gives no value (Sequin gives `nil`), and a
/// key asked of a string, number or boolean is an error.
///
/// ```
/// # use weft_sdk_guest::MessagePath;
/// # use weft_sdk_guest::serde_json::json;
/// let path = MessagePath::parse("record.address.city").unwrap();
/// let message = json!({"record": {"address": {"city": "Lyon"}}});
/// assert_eq!(path.resolve(&message).unwrap(), Some(&json!("Lyon")));
/// assert!(MessagePath::parse("row.city").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePath {
    text: String,
    keys: Vec<String>,
}

impl MessagePath {
    /// Parses `text`; the error says what is wrong and what a path looks
    /// like.
    pub fn parse(text: &str) -> Result<MessagePath, String> {
        let keys: Vec<String> = text.split('.').map(str::to_string).collect();
        if !ROOTS.contains(&keys[0].as_str()) {
            return Err(format!(
                "path `{text}` must start with `record`, `changes`, `action` or `metadata`, e.g. `record.address.city`"
            ));
        }
        let valid = |key: &String| {
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if let Some(bad) = keys.iter().find(|key| !valid(key)) {
            return Err(format!(
                "path `{text}` has an invalid key `{bad}`: keys are separated by `.` and made of letters, digits, `_` and `-`"
            ));
        }
        Ok(MessagePath {
            text: text.to_string(),
            keys,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value at this path in `message`, or `None` when a key is
    /// missing, or a `null` or an array stands on the way. Asking a key of a
    /// string, number or boolean is a permanent error naming the path.
    pub fn resolve<'a>(&self, message: &'a Value) -> Result<Option<&'a Value>, Error> {
        let mut current = message;
        for (depth, key) in self.keys.iter().enumerate() {
            current = match current {
                Value::Object(object) => match object.get(key) {
                    Some(value) => value,
                    None => return Ok(None),
                },
                Value::Null | Value::Array(_) => return Ok(None),
                scalar => {
                    return Err(Error::permanent(format!(
                        "path `{}`: `{}` is {}, which has no key `{key}`",
                        self.text,
                        self.keys[..depth].join("."),
                        kind(scalar)
                    )));
                }
            };
        }
        Ok(match current {
            Value::Null => None,
            value => Some(value),
        })
    }
}

/// "a string", "a number", ...: what kind of JSON value this is, for
/// messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_like_sequins_path_transform() {
        let message = json!({
            "record": {"id": 1, "address": {"city": "Lyon"}, "tags": ["a"], "gone": null},
            "changes": null,
            "action": "insert",
        });
        let get = |path: &str| {
            MessagePath::parse(path)
                .unwrap()
                .resolve(&message)
                .map(|v| v.cloned())
        };
        assert_eq!(get("record.address.city"), Ok(Some(json!("Lyon"))));
        assert_eq!(get("action"), Ok(Some(json!("insert"))));
        assert_eq!(get("record.missing.deeper"), Ok(None));
        assert_eq!(get("record.gone"), Ok(None));
        assert_eq!(get("record.tags.0"), Ok(None));
        assert_eq!(get("changes.id"), Ok(None));
        assert_eq!(
            get("record.id.x"),
            Err(Error::permanent(
                "path `record.id.x`: `record.id` is a number, which has no key `x`"
            ))
        );
    }

    #[test]
    fn refuses_paths_sequin_refuses() {
        assert!(MessagePath::parse("record").is_ok());
        assert!(MessagePath::parse("metadata.consumer.name").is_ok());
        for bad in [
            "",
            "row.id",
            "record..id",
            "record.a b",
            "record.",
            "record.{x}",
        ] {
            assert!(MessagePath::parse(bad).is_err(), "{bad}");
        }
    }
}
