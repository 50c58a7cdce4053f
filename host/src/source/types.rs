//! Text-format column values → JSON, the way Postgres's `to_jsonb()` renders
//! them with `TimeZone = 'UTC'`.
//!
//! This is the one place the type mapping lives. The replication session is
//! started with `DateStyle=ISO`, `IntervalStyle=postgres`, `TimeZone=UTC`,
//! `extra_float_digits=3` and `bytea_output=hex` (see `protocol.rs`), so the
//! text we receive is deterministic whatever the server's own settings are;
//! this module only has to turn that text into what `to_jsonb()` would show.
//!
//! * numbers (`int2/4/8`, `float4/8`, `numeric`) become JSON numbers,
//!   exactly (serde_json is built with `arbitrary_precision`); `NaN` and
//!   `±Infinity` become strings, as in `to_jsonb()`;
//! * `bool` becomes `true`/`false`;
//! * `json` and `jsonb` are embedded, with jsonb's key order (shorter keys
//!   first, then bytewise; the last duplicate wins), since `to_jsonb()`
//!   turns both into jsonb;
//! * numbers print as `numeric` prints them (`to_jsonb()` stores every
//!   number as numeric): `1e+300` becomes `1000…0`, `1.5e-3` becomes
//!   `0.0015`; this applies to floats and to numbers inside json;
//! * `timestamp` and `timestamptz` take the ISO-8601 "T" form with a
//!   `+HH:MM` offset; `timetz` stays as printed (to_jsonb does not reformat it);
//! * arrays become (nested) JSON arrays of their elements' renderings;
//! * everything else (text types, uuid, date, time, interval, bytea, enums,
//!   ranges, unknown types) is the output text as a JSON string.

use serde_json::{Map, Number, Value};

/// How a scalar type renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// `bool`.
    Bool,
    /// Integer, float and numeric types.
    Number,
    /// `json`.
    Json,
    /// `jsonb`.
    Jsonb,
    /// `timestamp without time zone`.
    Timestamp,
    /// `timestamp with time zone`.
    Timestamptz,
    /// Anything else: the output text as a string.
    Text,
}

/// How a column type renders: a scalar or an array of scalars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeKind {
    /// A scalar type.
    Scalar(Scalar),
    /// An array (of any number of dimensions) of a scalar type.
    Array(Scalar),
}

/// The rendering of a built-in type OID, or `None` when the OID is not a
/// built-in type weft knows (the caller may resolve it from the catalog, see
/// [`kind_from_catalog`], and otherwise falls back to text).
pub fn builtin_kind(oid: u32) -> Option<TypeKind> {
    use Scalar::*;
    use TypeKind::{Array as A, Scalar as S};
    Some(match oid {
        16 => S(Bool),
        20 | 21 | 23 | 700 | 701 | 1700 => S(Number),
        114 => S(Json),
        3802 => S(Jsonb),
        1114 => S(Timestamp),
        1184 => S(Timestamptz),
        // char, name, text, bytea, varchar, bpchar, date, time, interval,
        // uuid, bit, varbit, money, inet, cidr, macaddr, xml, tsvector ...
        17 | 18 | 19 | 25 | 26 | 142 | 1266 | 650 | 790 | 829 | 869 | 1042 | 1043 | 1082 | 1083
        | 1186 | 1560 | 1562 | 2950 | 3614 => S(Text),
        1000 => A(Bool),
        1005 | 1007 | 1016 | 1021 | 1022 | 1231 => A(Number),
        199 => A(Json),
        3807 => A(Jsonb),
        1115 => A(Timestamp),
        1185 => A(Timestamptz),
        1001 | 1002 | 1003 | 1009 | 1028 | 1270 | 143 | 651 | 791 | 1040 | 1041 | 1014 | 1015
        | 1182 | 1183 | 1187 | 1561 | 1563 | 2951 | 3643 => A(Text),
        _ => return None,
    })
}

/// A `pg_type` row, enough to resolve a non-builtin type.
#[derive(Debug, Clone, Copy)]
pub struct CatalogType {
    /// `typtype`: `b` base, `d` domain, `e` enum, `c` composite, ...
    pub typtype: u8,
    /// `typbasetype` (the base type of a domain).
    pub base: u32,
    /// `typelem` (the element type of an array).
    pub element: u32,
    /// `typcategory`: `A` for arrays.
    pub category: u8,
}

/// Resolves a type through the catalog: domains render as their base type,
/// arrays as arrays of their element's rendering, everything else as text.
/// `lookup` returns the `pg_type` row for an OID.
pub fn kind_from_catalog(oid: u32, mut lookup: impl FnMut(u32) -> Option<CatalogType>) -> TypeKind {
    resolve(oid, &mut lookup)
}

fn resolve(oid: u32, lookup: &mut dyn FnMut(u32) -> Option<CatalogType>) -> TypeKind {
    let mut oid = oid;
    // Domains can stack; a bound keeps a corrupt catalog from looping.
    for _ in 0..16 {
        if let Some(kind) = builtin_kind(oid) {
            return kind;
        }
        let Some(row) = lookup(oid) else {
            break;
        };
        if row.typtype == b'd' && row.base != 0 {
            oid = row.base;
            continue;
        }
        if row.category == b'A' && row.element != 0 {
            let element = resolve(row.element, lookup);
            return match element {
                TypeKind::Scalar(s) | TypeKind::Array(s) => TypeKind::Array(s),
            };
        }
        break;
    }
    TypeKind::Scalar(Scalar::Text)
}

/// Renders one non-null value given in text format.
pub fn render(kind: TypeKind, text: &str) -> Value {
    match kind {
        TypeKind::Scalar(scalar) => render_scalar(scalar, text),
        TypeKind::Array(element) => match parse_array(text) {
            Some(array) => array_to_json(&array, element),
            None => Value::String(text.to_string()),
        },
    }
}

fn render_scalar(scalar: Scalar, text: &str) -> Value {
    match scalar {
        Scalar::Bool => match text {
            "t" | "true" => Value::Bool(true),
            "f" | "false" => Value::Bool(false),
            other => Value::String(other.to_string()),
        },
        Scalar::Number => number(text),
        Scalar::Json | Scalar::Jsonb => match serde_json::from_str::<Value>(text) {
            Ok(value) => jsonb_order(value),
            Err(_) => Value::String(text.to_string()),
        },
        Scalar::Timestamp => Value::String(text.replacen(' ', "T", 1)),
        Scalar::Timestamptz => Value::String(full_offset(&text.replacen(' ', "T", 1))),
        Scalar::Text => Value::String(text.to_string()),
    }
}

fn number(text: &str) -> Value {
    // NaN and the infinities are not JSON numbers; to_jsonb() gives strings.
    if text.eq_ignore_ascii_case("nan") || text.ends_with("Infinity") {
        return Value::String(text.to_string());
    }
    match numeric_canonical(text).and_then(|t| serde_json::from_str::<Number>(&t).ok()) {
        Some(n) => Value::Number(n),
        None => Value::String(text.to_string()),
    }
}

/// Rewrites a decimal literal (`-1.50`, `1e+300`, `2.5E-3`) the way
/// Postgres's `numeric` prints it: no exponent, no leading zeros, the scale
/// of the literal (`max(0, fraction digits - exponent)`), no sign on zero.
/// `None` when the text is not a decimal literal or is beyond numeric range.
fn numeric_canonical(text: &str) -> Option<String> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty() && frac_part.is_empty()
        || !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
        || exponent.abs() > 200_000
    {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let shift = exponent - frac_part.len() as i64;
    let (int_digits, frac_digits) = if shift >= 0 {
        (
            format!("{digits}{}", "0".repeat(shift as usize)),
            String::new(),
        )
    } else {
        let scale = (-shift) as usize;
        let padded = if digits.len() <= scale {
            format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
        } else {
            digits
        };
        let split = padded.len() - scale;
        (padded[..split].to_string(), padded[split..].to_string())
    };
    let int_digits = match int_digits.trim_start_matches('0') {
        "" => "0",
        trimmed => trimmed,
    };
    let is_zero = int_digits == "0" && frac_digits.bytes().all(|b| b == b'0');
    let mut out = String::with_capacity(int_digits.len() + frac_digits.len() + 2);
    if negative && !is_zero {
        out.push('-');
    }
    out.push_str(int_digits);
    if !frac_digits.is_empty() {
        out.push('.');
        out.push_str(&frac_digits);
    }
    Some(out)
}

/// `+00` → `+00:00`: Postgres prints whole-hour offsets without minutes,
/// `to_jsonb()` always with.
fn full_offset(text: &str) -> String {
    let bytes = text.as_bytes();
    if bytes.len() >= 3 {
        let sign = bytes[bytes.len() - 3];
        let hours = &bytes[bytes.len() - 2..];
        if (sign == b'+' || sign == b'-') && hours.iter().all(u8::is_ascii_digit) {
            return format!("{text}:00");
        }
    }
    text.to_string()
}

/// Reorders object keys as jsonb stores them: shorter keys first, then
/// bytewise. serde_json already kept the last of duplicate keys.
fn jsonb_order(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| {
                a.len()
                    .cmp(&b.len())
                    .then_with(|| a.as_bytes().cmp(b.as_bytes()))
            });
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, jsonb_order(v)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(jsonb_order).collect()),
        // jsonb stores numbers as numeric.
        Value::Number(n) => number(&n.to_string()),
        other => other,
    }
}

/// A parsed text-format array.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ArrayNode {
    Null,
    Element(String),
    Nested(Vec<ArrayNode>),
}

fn array_to_json(node: &ArrayNode, element: Scalar) -> Value {
    match node {
        ArrayNode::Null => Value::Null,
        ArrayNode::Element(text) => render_scalar(element, text),
        ArrayNode::Nested(items) => {
            Value::Array(items.iter().map(|n| array_to_json(n, element)).collect())
        }
    }
}

/// Parses Postgres's array output syntax (`{1,2}`, `{{"a b",NULL},{c,d}}`,
/// `[0:1]={x,y}`). Returns `None` when the text is not an array literal.
fn parse_array(text: &str) -> Option<ArrayNode> {
    let mut text = text.trim();
    // Explicit bounds: "[1:2][3:4]={...}". to_jsonb ignores them.
    if text.starts_with('[') {
        let eq = text.find('=')?;
        text = text[eq + 1..].trim_start();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let node = parse_level(&chars, &mut pos)?;
    (pos == chars.len()).then_some(node)
}

fn parse_level(chars: &[char], pos: &mut usize) -> Option<ArrayNode> {
    if chars.get(*pos) != Some(&'{') {
        return None;
    }
    *pos += 1;
    let mut items = Vec::new();
    skip_spaces(chars, pos);
    if chars.get(*pos) == Some(&'}') {
        *pos += 1;
        return Some(ArrayNode::Nested(items));
    }
    loop {
        skip_spaces(chars, pos);
        match chars.get(*pos)? {
            '{' => items.push(parse_level(chars, pos)?),
            '"' => {
                *pos += 1;
                let mut s = String::new();
                loop {
                    match chars.get(*pos)? {
                        '\\' => {
                            s.push(*chars.get(*pos + 1)?);
                            *pos += 2;
                        }
                        '"' => {
                            *pos += 1;
                            break;
                        }
                        c => {
                            s.push(*c);
                            *pos += 1;
                        }
                    }
                }
                items.push(ArrayNode::Element(s));
            }
            _ => {
                let mut s = String::new();
                let mut escaped_any = false;
                loop {
                    match chars.get(*pos)? {
                        ',' | '}' => break,
                        '\\' => {
                            s.push(*chars.get(*pos + 1)?);
                            escaped_any = true;
                            *pos += 2;
                        }
                        c => {
                            s.push(*c);
                            *pos += 1;
                        }
                    }
                }
                let trimmed = s.trim_end().to_string();
                if !escaped_any && trimmed.eq_ignore_ascii_case("NULL") {
                    items.push(ArrayNode::Null);
                } else {
                    items.push(ArrayNode::Element(trimmed));
                }
            }
        }
        skip_spaces(chars, pos);
        match chars.get(*pos)? {
            ',' => *pos += 1,
            '}' => {
                *pos += 1;
                return Some(ArrayNode::Nested(items));
            }
            _ => return None,
        }
    }
}

fn skip_spaces(chars: &[char], pos: &mut usize) {
    while chars.get(*pos).is_some_and(|c| c.is_whitespace()) {
        *pos += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(oid: u32, text: &str) -> Value {
        render(builtin_kind(oid).unwrap(), text)
    }

    #[test]
    fn scalars_render_like_to_jsonb() {
        assert_eq!(r(16, "t"), json!(true));
        assert_eq!(r(23, "-42"), json!(-42));
        assert_eq!(
            r(1700, "12345678901234567890.000100").to_string(),
            "12345678901234567890.000100"
        );
        assert_eq!(r(701, "NaN"), json!("NaN"));
        assert_eq!(r(701, "-Infinity"), json!("-Infinity"));
        assert_eq!(r(701, "1e+5").to_string(), "100000");
        assert_eq!(
            r(1184, "2024-01-02 03:04:05.123456+00"),
            json!("2024-01-02T03:04:05.123456+00:00")
        );
        assert_eq!(r(1114, "2024-01-02 03:04:05"), json!("2024-01-02T03:04:05"));
        assert_eq!(r(1266, "03:04:05-02"), json!("03:04:05-02"));
        assert_eq!(r(700, "1e-3").to_string(), "0.001");
        assert_eq!(r(701, "1.5e+3").to_string(), "1500");
        assert_eq!(r(701, "-0").to_string(), "0");
        assert_eq!(r(1700, "-0.000").to_string(), "0.000");
        assert_eq!(r(1700, "007.10").to_string(), "7.10");
        assert_eq!(
            r(3802, r#"[1.0e2, 2.50, -1E-2]"#).to_string(),
            "[100,2.50,-0.01]"
        );
        assert_eq!(r(1184, "infinity"), json!("infinity"));
        assert_eq!(
            r(3802, r#"{"bb": 1, "a": {"zz": 2, "c": 3}}"#).to_string(),
            r#"{"a":{"c":3,"zz":2},"bb":1}"#
        );
        assert_eq!(r(114, r#"{"k": 1, "k": 2}"#), json!({"k": 2}));
    }

    #[test]
    fn arrays_parse_quotes_nulls_and_dimensions() {
        assert_eq!(r(1007, "{1,2,NULL}"), json!([1, 2, null]));
        assert_eq!(
            r(1009, r#"{"a b","x\"y",NULL,"NULL",plain}"#),
            json!(["a b", "x\"y", null, "NULL", "plain"])
        );
        assert_eq!(r(1007, "{{1,2},{3,4}}"), json!([[1, 2], [3, 4]]));
        assert_eq!(r(1007, "[0:1]={5,6}"), json!([5, 6]));
        assert_eq!(r(1009, "{}"), json!([]));
        assert_eq!(
            r(3807, r#"{"{\"b\": 1, \"a\": 2}"}"#).to_string(),
            r#"[{"a":2,"b":1}]"#
        );
        // Not an array literal: fall back to the text.
        assert_eq!(r(1007, "{1,2"), json!("{1,2"));
    }

    #[test]
    fn catalog_resolution_follows_domains_and_arrays() {
        let catalog = |oid| match oid {
            90001 => Some(CatalogType {
                typtype: b'd',
                base: 23,
                element: 0,
                category: b'N',
            }),
            90002 => Some(CatalogType {
                typtype: b'b',
                base: 0,
                element: 90001,
                category: b'A',
            }),
            _ => None,
        };
        assert_eq!(
            kind_from_catalog(90001, catalog),
            TypeKind::Scalar(Scalar::Number)
        );
        assert_eq!(
            kind_from_catalog(90002, catalog),
            TypeKind::Array(Scalar::Number)
        );
        assert_eq!(
            kind_from_catalog(99999, catalog),
            TypeKind::Scalar(Scalar::Text)
        );
    }
}
