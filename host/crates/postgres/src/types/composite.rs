//! Postgres's record output syntax: `(1,"a b",,"q""x")`.
//!
//! `record_out` prints the non-dropped attributes in order. An empty field
//! is NULL; `""` is the empty string. A field is quoted when it is empty or
//! holds a quote, backslash, parenthesis, comma or white space, and inside
//! quotes `"` and `\` are doubled. `record_in` also accepts backslash
//! escapes and partly quoted fields, so the parser does too.

use serde_json::{Map, Value};

use super::{CompositeType, StaleComposite};

/// Parses a record literal into its fields (`None` for NULL); `None` when
/// `text` is not one. `()` gives one NULL field: zero attributes and one
/// NULL attribute print alike, [`render`] tells them apart by the type.
pub(super) fn parse(text: &str) -> Option<Vec<Option<String>>> {
    let bytes = text.trim().as_bytes();
    if bytes.first() != Some(&b'(') || bytes.last() != Some(&b')') || bytes.len() < 2 {
        return None;
    }
    let mut fields = Vec::new();
    let mut pos = 1;
    loop {
        let mut out = Vec::new();
        let mut seen = false;
        let mut quoted = false;
        loop {
            let b = *bytes.get(pos)?;
            match b {
                b'\\' => {
                    out.push(*bytes.get(pos + 1)?);
                    pos += 2;
                }
                b'"' if quoted && bytes.get(pos + 1) == Some(&b'"') => {
                    out.push(b'"');
                    pos += 2;
                }
                b'"' => {
                    quoted = !quoted;
                    pos += 1;
                }
                b',' | b')' if !quoted => break,
                _ => {
                    out.push(b);
                    pos += 1;
                }
            }
            seen = true;
        }
        fields.push(if seen {
            Some(String::from_utf8(out).ok()?)
        } else {
            None
        });
        let end = bytes[pos] == b')';
        pos += 1;
        if end {
            return (pos == bytes.len()).then_some(fields);
        }
    }
}

/// Renders parsed fields as an object keyed by attribute name, in jsonb
/// key order. A field count that does not match the definition means the
/// type changed since weft read it.
pub(super) fn render(
    composite: &CompositeType,
    values: &[Option<String>],
) -> Result<Value, StaleComposite> {
    let values = if composite.fields.is_empty() && values == [None] {
        &[][..]
    } else {
        values
    };
    if values.len() != composite.fields.len() {
        return Err(StaleComposite {
            oid: composite.oid,
            found: values.len(),
            known: composite.fields.len(),
        });
    }
    let mut object = Map::with_capacity(values.len());
    for &i in &composite.key_order {
        let field = &composite.fields[i];
        let value = match &values[i] {
            None => Value::Null,
            Some(text) => super::render(&field.kind, text)?,
        };
        object.insert(field.name.clone(), value);
    }
    Ok(Value::Object(object))
}
