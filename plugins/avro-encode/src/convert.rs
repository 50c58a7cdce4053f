//! Postgres JSON values (as `to_jsonb()` renders them) to Avro values of a
//! given schema. Every error names the field, what the schema wants and
//! what the change holds.

use std::collections::HashMap;

use apache_avro::schema::{DecimalSchema, Name, RecordSchema, Schema};
use apache_avro::types::Value as Avro;
use num_bigint::BigInt;
use weft_sdk_guest::path::kind;
use weft_sdk_guest::serde_json::Value as Json;

use crate::time;

/// The named types (records, enums, fixed) of a schema, to resolve
/// references to them.
pub struct Names(HashMap<Name, Schema>);

impl Names {
    /// Collects the named types defined anywhere in `schema`.
    pub fn of(schema: &Schema) -> Names {
        let mut names = HashMap::new();
        collect(schema, &mut names);
        Names(names)
    }
}

fn collect(schema: &Schema, names: &mut HashMap<Name, Schema>) {
    match schema {
        Schema::Record(record) => {
            names.insert(record.name.clone(), schema.clone());
            for field in &record.fields {
                collect(&field.schema, names);
            }
        }
        Schema::Enum(e) => {
            names.insert(e.name.clone(), schema.clone());
        }
        Schema::Fixed(f) => {
            names.insert(f.name.clone(), schema.clone());
        }
        Schema::Array(array) => collect(&array.items, names),
        Schema::Map(map) => collect(&map.types, names),
        Schema::Union(union) => union.variants().iter().for_each(|s| collect(s, names)),
        _ => {}
    }
}

type Converted = Result<Avro, String>;

/// The Avro value of `json` for `schema`; `field` is the path used in
/// errors (`record.address.city`, `record.tags[2]`).
pub fn to_avro(json: &Json, schema: &Schema, field: &str, names: &Names) -> Converted {
    let mismatch = |wanted: &str| {
        Err(format!(
            "field `{field}`: the schema wants {wanted}, the change has {}",
            describe(json)
        ))
    };
    match (schema, json) {
        (Schema::Ref { name }, _) => match names.0.get(name) {
            Some(schema) => to_avro(json, schema, field, names),
            None => Err(format!(
                "field `{field}`: the schema refers to an unknown type `{name}`"
            )),
        },
        (Schema::Union(union), _) => {
            let variants = union.variants();
            if json.is_null() {
                return match variants.iter().position(|s| matches!(s, Schema::Null)) {
                    Some(i) => Ok(Avro::Union(i as u32, Box::new(Avro::Null))),
                    None => mismatch("a non-null value (the union has no null branch)"),
                };
            }
            let mut first_error = None;
            for (i, variant) in variants.iter().enumerate() {
                if matches!(variant, Schema::Null) {
                    continue;
                }
                match to_avro(json, variant, field, names) {
                    Ok(value) => return Ok(Avro::Union(i as u32, Box::new(value))),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            Err(first_error.unwrap_or_else(|| {
                format!(
                    "field `{field}`: the union has no branch for {}",
                    describe(json)
                )
            }))
        }
        (Schema::Null, Json::Null) => Ok(Avro::Null),
        (_, Json::Null) => mismatch(&format!(
            "{} (make the field a union with \"null\" to allow nulls)",
            schema_name(schema)
        )),
        (Schema::Boolean, Json::Bool(b)) => Ok(Avro::Boolean(*b)),
        (Schema::Int, Json::Number(n)) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
            Some(i) => Ok(Avro::Int(i)),
            None => mismatch("an int (32-bit integer)"),
        },
        (Schema::Long, Json::Number(n)) => match n.as_i64() {
            Some(i) => Ok(Avro::Long(i)),
            None => mismatch("a long (64-bit integer)"),
        },
        (Schema::Float | Schema::Double, _) => match float(json) {
            Some(f) if matches!(schema, Schema::Float) => Ok(Avro::Float(f as f32)),
            Some(f) => Ok(Avro::Double(f)),
            None => mismatch(schema_name(schema)),
        },
        (Schema::String, Json::String(s)) => Ok(Avro::String(s.clone())),
        // A number keeps its exact digits (numeric as string); a json/jsonb
        // value goes in as its JSON text.
        (Schema::String, other) => Ok(Avro::String(other.to_string())),
        (Schema::Bytes, Json::String(s)) => match bytea(s) {
            Some(bytes) => Ok(Avro::Bytes(bytes)),
            None => mismatch("bytes (a bytea value, rendered `\\x...`)"),
        },
        (Schema::Fixed(fixed), Json::String(s)) => match bytea(s) {
            Some(bytes) if bytes.len() == fixed.size => Ok(Avro::Fixed(fixed.size, bytes)),
            _ => mismatch(&format!(
                "fixed({}) (a bytea value of {} bytes)",
                fixed.size, fixed.size
            )),
        },
        (Schema::Enum(e), Json::String(s)) => match e.symbols.iter().position(|symbol| symbol == s)
        {
            Some(i) => Ok(Avro::Enum(i as u32, s.clone())),
            None => mismatch(&format!("one of the enum symbols {:?}", e.symbols)),
        },
        (Schema::Array(array), Json::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| to_avro(item, &array.items, &format!("{field}[{i}]"), names))
            .collect::<Result<_, _>>()
            .map(Avro::Array),
        (Schema::Map(map), Json::Object(entries)) => entries
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.clone(),
                    to_avro(v, &map.types, &format!("{field}.{k}"), names)?,
                ))
            })
            .collect::<Result<_, String>>()
            .map(Avro::Map),
        (Schema::Record(record), Json::Object(_)) => self::record(json, record, field, names),
        (Schema::Decimal(decimal), Json::Number(_) | Json::String(_)) => {
            let text = match json {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            };
            match unscaled(&text, decimal) {
                Ok(value) => Ok(Avro::Decimal(apache_avro::Decimal::from(
                    value.to_signed_bytes_be(),
                ))),
                Err(why) => Err(format!("field `{field}`: {why}")),
            }
        }
        (Schema::Uuid, Json::String(s)) => match uuid::Uuid::parse_str(s) {
            Ok(u) => Ok(Avro::Uuid(u)),
            Err(_) => mismatch("a uuid"),
        },
        (Schema::Date, Json::String(s)) => time::date(s)
            .map(Avro::Date)
            .ok_or(())
            .or_else(|_| mismatch("a date `YYYY-MM-DD`")),
        (Schema::TimeMillis | Schema::TimeMicros, Json::String(s)) => match time::time_micros(s) {
            Some(us) if matches!(schema, Schema::TimeMillis) => {
                Ok(Avro::TimeMillis((us / 1000) as i32))
            }
            Some(us) => Ok(Avro::TimeMicros(us)),
            None => mismatch("a time `HH:MM:SS[.ffffff]`"),
        },
        (
            Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos,
            Json::String(s),
        ) => match time::timestamp_micros(s) {
            Some(us) => Ok(match schema {
                Schema::TimestampMillis => Avro::TimestampMillis(us.div_euclid(1000)),
                Schema::TimestampMicros => Avro::TimestampMicros(us),
                Schema::TimestampNanos => Avro::TimestampNanos(us * 1000),
                Schema::LocalTimestampMillis => Avro::LocalTimestampMillis(us.div_euclid(1000)),
                Schema::LocalTimestampMicros => Avro::LocalTimestampMicros(us),
                _ => Avro::LocalTimestampNanos(us * 1000),
            }),
            None => mismatch("a timestamp `YYYY-MM-DDTHH:MM:SS[.ffffff][+HH:MM]`"),
        },
        _ => mismatch(schema_name(schema)),
    }
}

/// A record: each schema field from the object's key of the same name; a
/// missing key takes the field's default, or null when the field is a
/// nullable union, or is an error.
fn record(json: &Json, record: &RecordSchema, field: &str, names: &Names) -> Converted {
    let mut fields = Vec::with_capacity(record.fields.len());
    for f in &record.fields {
        let path = format!("{field}.{}", f.name);
        let value = match (json.get(&f.name), &f.default) {
            (Some(value), _) => to_avro(value, &f.schema, &path, names)?,
            (None, Some(default)) => to_avro(default, &f.schema, &path, names)?,
            (None, None) if nullable(&f.schema) => to_avro(&Json::Null, &f.schema, &path, names)?,
            (None, None) => {
                return Err(format!(
                    "field `{path}` is missing from the change and has no default: add a `default` to the schema field, or make it a union with \"null\""
                ));
            }
        };
        fields.push((f.name.clone(), value));
    }
    Ok(Avro::Record(fields))
}

fn nullable(schema: &Schema) -> bool {
    matches!(schema, Schema::Union(u) if u.variants().iter().any(|s| matches!(s, Schema::Null)))
}

/// A JSON number, or the strings `NaN`, `Infinity` and `-Infinity` that
/// `to_jsonb()` writes for those float values.
fn float(json: &Json) -> Option<f64> {
    match json {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// The bytes of a `bytea` value as `to_jsonb()` renders it: `\x` and hex.
fn bytea(text: &str) -> Option<Vec<u8>> {
    hex::decode(text.strip_prefix("\\x")?).ok()
}

/// The unscaled integer of a decimal written `-12.345`, at the schema's
/// scale; more fraction digits than the scale, or more digits than the
/// precision, is an error rather than a rounded value.
fn unscaled(text: &str, decimal: &DecimalSchema) -> Result<BigInt, String> {
    let bad = || format!("`{text}` is not a decimal number such as `-12.34`");
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > decimal.scale {
        return Err(format!(
            "`{text}` has more than {} decimal places, the schema's scale; raise the scale rather than lose digits",
            decimal.scale
        ));
    }
    let scaled = format!(
        "{whole}{fraction}{}",
        "0".repeat(decimal.scale - fraction.len())
    );
    let scaled = scaled.trim_start_matches('0');
    if scaled.len() > decimal.precision {
        return Err(format!(
            "`{text}` has more digits than the schema's precision {}",
            decimal.precision
        ));
    }
    let value: BigInt = if scaled.is_empty() {
        BigInt::from(0)
    } else {
        scaled.parse().map_err(|_| bad())?
    };
    Ok(if negative { -value } else { value })
}

fn describe(json: &Json) -> String {
    match json {
        Json::String(s) if s.len() <= 40 => format!("the string {json}"),
        Json::Number(_) | Json::Bool(_) => format!("{} {json}", kind(json)),
        other => kind(other).to_string(),
    }
}

fn schema_name(schema: &Schema) -> &'static str {
    match schema {
        Schema::Null => "null",
        Schema::Boolean => "a boolean",
        Schema::Int => "an int",
        Schema::Long => "a long",
        Schema::Float => "a float",
        Schema::Double => "a double",
        Schema::Bytes => "bytes",
        Schema::String => "a string",
        Schema::Array(_) => "an array",
        Schema::Map(_) => "a map (a JSON object)",
        Schema::Record(_) => "a record (a JSON object)",
        Schema::Enum(_) => "an enum symbol",
        Schema::Fixed(_) => "fixed bytes",
        Schema::Decimal(_) => "a decimal",
        Schema::Uuid => "a uuid",
        Schema::Date => "a date",
        _ => "a type this plugin does not map yet (see docs/plugins.md)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_sdk_guest::serde_json::json;

    fn convert(schema: &str, json: Json) -> Converted {
        let schema = Schema::parse_str(schema).unwrap();
        let names = Names::of(&schema);
        to_avro(&json, &schema, "record", &names)
    }

    #[test]
    fn decimals_keep_every_digit_or_fail() {
        let schema = r#"{"type":"record","name":"r","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":6,"scale":2}}]}"#;
        let ok = convert(schema, json!({"d": 1234.5})).unwrap();
        assert_eq!(
            ok,
            Avro::Record(vec![(
                "d".into(),
                Avro::Decimal(apache_avro::Decimal::from(
                    BigInt::from(123450).to_signed_bytes_be()
                ))
            )])
        );
        let err = convert(schema, json!({"d": "1.234"})).unwrap_err();
        assert_eq!(
            err,
            "field `record.d`: `1.234` has more than 2 decimal places, the schema's scale; raise the scale rather than lose digits"
        );
        assert!(
            convert(schema, json!({"d": 123456}))
                .unwrap_err()
                .contains("precision 6")
        );
    }

    #[test]
    fn mismatches_name_the_field() {
        let schema = r#"{"type":"record","name":"r","fields":[{"name":"n","type":"int"},{"name":"o","type":["null","long"]}]}"#;
        assert_eq!(
            convert(schema, json!({"n": 3000000000_i64})).unwrap_err(),
            "field `record.n`: the schema wants an int (32-bit integer), the change has a number 3000000000"
        );
        assert_eq!(
            convert(schema, json!({"n": null})).unwrap_err(),
            "field `record.n`: the schema wants an int (make the field a union with \"null\" to allow nulls), the change has null"
        );
        assert_eq!(
            convert(schema, json!({"n": 1})).unwrap(),
            Avro::Record(vec![
                ("n".into(), Avro::Int(1)),
                ("o".into(), Avro::Union(0, Box::new(Avro::Null)))
            ])
        );
    }
}
