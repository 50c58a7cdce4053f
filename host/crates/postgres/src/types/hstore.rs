//! The `hstore` extension type. It is the one common type with a cast to
//! jsonb, which `to_jsonb()` uses instead of the text: `"a"=>"1", "b"=>NULL`
//! becomes `{"a": "1", "b": null}`.
//!
//! `hstore_out` always quotes keys and values, escaping `"` and `\` with a
//! backslash, and separates pairs with `, `; a NULL value is a bare `NULL`.

use serde_json::{Map, Value};

/// Parses hstore output into an object (keys in jsonb order); `None` when
/// `text` is not hstore output.
pub(super) fn parse(text: &str) -> Option<Value> {
    let bytes = text.as_bytes();
    let mut pairs: Vec<(String, Value)> = Vec::new();
    let mut pos = 0;
    skip_spaces(bytes, &mut pos);
    while pos < bytes.len() {
        let key = quoted(bytes, &mut pos)?;
        skip_spaces(bytes, &mut pos);
        if !bytes[pos..].starts_with(b"=>") {
            return None;
        }
        pos += 2;
        skip_spaces(bytes, &mut pos);
        let value = if bytes[pos..].starts_with(b"NULL") {
            pos += 4;
            Value::Null
        } else {
            Value::String(quoted(bytes, &mut pos)?)
        };
        pairs.push((key, value));
        skip_spaces(bytes, &mut pos);
        match bytes.get(pos) {
            None => break,
            Some(b',') => pos += 1,
            Some(_) => return None,
        }
        skip_spaces(bytes, &mut pos);
    }
    pairs.sort_by(|(a, _), (b, _)| super::scalar::jsonb_key_cmp(a, b));
    Some(Value::Object(pairs.into_iter().collect::<Map<_, _>>()))
}

fn skip_spaces(bytes: &[u8], pos: &mut usize) {
    while bytes.get(*pos).is_some_and(u8::is_ascii_whitespace) {
        *pos += 1;
    }
}

fn quoted(bytes: &[u8], pos: &mut usize) -> Option<String> {
    if bytes.get(*pos) != Some(&b'"') {
        return None;
    }
    *pos += 1;
    let mut out = Vec::new();
    loop {
        match *bytes.get(*pos)? {
            b'\\' => {
                out.push(*bytes.get(*pos + 1)?);
                *pos += 2;
            }
            b'"' => {
                *pos += 1;
                return String::from_utf8(out).ok();
            }
            b => {
                out.push(b);
                *pos += 1;
            }
        }
    }
}
