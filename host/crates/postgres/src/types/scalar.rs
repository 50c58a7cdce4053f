//! Scalars that `to_jsonb()` renders other than as their output text:
//! booleans, numbers, json/jsonb and timestamps.

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

/// `t`/`f` → `true`/`false`.
pub(super) fn boolean(text: &str) -> Value {
    match text {
        "t" | "true" => Value::Bool(true),
        "f" | "false" => Value::Bool(false),
        other => Value::String(other.to_string()),
    }
}

/// A number as `numeric` prints it; `NaN` and `±Infinity` as strings.
pub(super) fn number(text: &str) -> Value {
    // Not JSON numbers; to_jsonb() gives them as strings.
    if text == "NaN" || text == "Infinity" || text == "-Infinity" {
        return Value::String(text.to_string());
    }
    // Integers and plain decimals (nearly every value) are canonical as
    // Postgres prints them: parse them without rewriting the text first.
    let canonical = if is_canonical_decimal(text) {
        // An integer that fits an i64 (keys, counts: most numbers) needs
        // no JSON parser: its canonical text is what `Number` prints.
        if !text.contains('.')
            && let Ok(integer) = text.parse::<i64>()
        {
            return Value::Number(integer.into());
        }
        Some(Cow::Borrowed(text))
    } else {
        numeric_canonical(text).map(Cow::Owned)
    };
    match canonical.and_then(|t| serde_json::from_str::<Number>(&t).ok()) {
        Some(n) => Value::Number(n),
        None => Value::String(text.to_string()),
    }
}

/// Whether `text` is already what [`numeric_canonical`] makes of it: an
/// optional `-`, an integer part without leading zeros, an optional
/// fraction, no exponent, and not a negative zero.
fn is_canonical_decimal(text: &str) -> bool {
    // One pass over the bytes: every read row's numbers come through here
    // (a backfill's hottest check after UTF-8's).
    let (negative, digits) = match text.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        bytes => (false, bytes),
    };
    let int_len = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    let (int_part, rest) = digits.split_at(int_len);
    let int_ok = int_part == b"0" || int_part.first().is_some_and(|&b| b != b'0');
    let frac_part = match rest {
        [] => rest,
        [b'.', frac @ ..] if !frac.is_empty() && frac.iter().all(u8::is_ascii_digit) => frac,
        _ => return false,
    };
    int_ok && !(negative && int_part == b"0" && frac_part.iter().all(|&b| b == b'0'))
}

/// json or jsonb text embedded as jsonb holds it.
pub(super) fn json(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => jsonb_order(value),
        // Deeper than serde_json's nesting limit (128): keep the text.
        Err(_) => Value::String(text.to_string()),
    }
}

/// `2024-01-02 03:04:05` → `2024-01-02T03:04:05` (`… BC` stays at the end).
pub(super) fn timestamp(text: &str) -> Value {
    Value::String(text.replacen(' ', "T", 1))
}

/// `2024-01-02 03:04:05+00` → `2024-01-02T03:04:05+00:00`.
pub(super) fn timestamptz(text: &str) -> Value {
    let mut out = String::with_capacity(text.len() + 3);
    out.extend(timestamptz_pieces(text));
    Value::String(out)
}

/// The pieces that [`timestamptz`] joins: the date, `T`, the time, `:00`
/// when the offset is whole hours, and the era (`" BC"`), some empty.
pub(super) fn timestamptz_pieces(text: &str) -> [&str; 5] {
    let (body, era) = match text.strip_suffix(" BC") {
        Some(body) => (body, " BC"),
        None => (text, ""),
    };
    let minutes = if ends_with_whole_hour_offset(body) {
        ":00"
    } else {
        ""
    };
    match body.split_once(' ') {
        Some((date, time)) => [date, "T", time, minutes, era],
        None => [body, "", "", minutes, era],
    }
}

/// Whether [`number`] renders `text` as a JSON number spelled as `text`
/// is: an integer or a plain decimal, as Postgres prints nearly all.
pub(super) fn is_number_as_printed(text: &str) -> bool {
    is_canonical_decimal(text)
}

/// jsonb's object key order: shorter keys first, then bytewise.
pub(super) fn jsonb_key_cmp(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
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

/// Whether `text` ends in a whole-hour offset such as `+00`: Postgres's ISO
/// style prints those without minutes, `to_jsonb()` (XSD style) always with.
fn ends_with_whole_hour_offset(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 3 && {
        let sign = bytes[bytes.len() - 3];
        let hours = &bytes[bytes.len() - 2..];
        (sign == b'+' || sign == b'-') && hours.iter().all(u8::is_ascii_digit)
    }
}

/// Reorders object keys as jsonb stores them and prints numbers as numeric
/// does. serde_json already kept the last of duplicate keys, as jsonb does.
fn jsonb_order(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| jsonb_key_cmp(a, b));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, jsonb_order(v)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(jsonb_order).collect()),
        Value::Number(n) => number(&n.to_string()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_decimals_parse_as_the_rewritten_text_would() {
        let inputs = [
            "0",
            "7",
            "-7",
            "10",
            "1234567890123456789012",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "-9223372036854775809",
            "0.5",
            "-0.5",
            "10.50",
            "-0",
            "-0.00",
            "007",
            "00.1",
            ".5",
            "5.",
            "+5",
            "1e3",
            "-",
            "",
            "1.2.3",
            "12a",
            "0.000",
        ];
        for text in inputs {
            let slow =
                numeric_canonical(text).and_then(|t| serde_json::from_str::<Number>(&t).ok());
            if is_canonical_decimal(text) {
                let fast = serde_json::from_str::<Number>(text).ok();
                assert_eq!(fast, slow, "{text:?}");
                assert!(fast.is_some(), "{text:?} is canonical but does not parse");
            }
            assert_eq!(
                number(text),
                slow.map(Value::Number)
                    .unwrap_or_else(|| Value::String(text.to_string())),
                "{text:?}"
            );
        }
        assert!(is_canonical_decimal("-12.30"));
        assert!(!is_canonical_decimal("-0.0"));
        assert!(!is_canonical_decimal("01"));
        assert!(!is_canonical_decimal("1e5"));
        let canonical = ["0", "-1", "0.50", "-0.01", "10", "123.000"];
        let not = [
            "", "-", "-0", "00", "05", ".5", "5.", "+5", "1.2.3", "1a", "-0.000", "--1",
        ];
        for text in canonical {
            assert!(is_canonical_decimal(text), "{text:?}");
        }
        for text in not {
            assert!(!is_canonical_decimal(text), "{text:?}");
        }
    }
}
