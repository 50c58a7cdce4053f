//! Field-level rules applied while deserializing, so that the error carries
//! the field's path and position: numeric ranges and scalar-only maps.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// A number in `MIN..=MAX` (`MAX = u64::MAX` for no upper bound); the error
/// says the range and the value given.
pub fn in_range<'de, D, T, const MIN: u64, const MAX: u64>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Into<u64> + Copy,
{
    let value = T::deserialize(deserializer)?;
    check_range::<D::Error>(value.into(), MIN, MAX)?;
    Ok(value)
}

/// Like [`in_range`], for an optional field.
pub fn opt_in_range<'de, D, T, const MIN: u64, const MAX: u64>(
    deserializer: D,
) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Into<u64> + Copy,
{
    let value = Option::<T>::deserialize(deserializer)?;
    if let Some(value) = value {
        check_range::<D::Error>(value.into(), MIN, MAX)?;
    }
    Ok(value)
}

fn check_range<E: de::Error>(value: u64, min: u64, max: u64) -> Result<(), E> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(E::custom(if max == u64::MAX {
        format!("must be at least {min}, got {value}")
    } else {
        format!("must be between {min} and {max}, got {value}")
    }))
}

/// An optional TCP port (1 to 65535), written as a number or as a string of
/// digits, so that a quoted `"${PGPORT:-5432}"` works too.
pub fn opt_port<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u16>, D::Error> {
    let Some(text) = Option::<ScalarText>::deserialize(deserializer)? else {
        return Ok(None);
    };
    match text.0.parse::<u16>() {
        Ok(port) if port > 0 => Ok(Some(port)),
        _ => Err(de::Error::custom(format!(
            "invalid port {:?}: a port is a number from 1 to 65535",
            text.0
        ))),
    }
}

/// A map of string keys to scalar values, numbers and booleans converted to
/// their text. Nulls, lists and maps are errors naming the key.
pub fn scalar_map<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    deserializer.deserialize_map(ScalarMapVisitor)
}

struct ScalarMapVisitor;

impl<'de> Visitor<'de> for ScalarMapVisitor {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of names to strings, numbers or booleans")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<ScalarText>()?;
            if out.insert(key.clone(), value.0).is_some() {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
        }
        Ok(out)
    }
}

/// A YAML scalar (string, number, boolean) as text.
struct ScalarText(String);

impl<'de> Deserialize<'de> for ScalarText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarTextVisitor)
    }
}

struct ScalarTextVisitor;

impl<'de> Visitor<'de> for ScalarTextVisitor {
    type Value = ScalarText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, number or boolean")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<ScalarText, E> {
        Ok(ScalarText(v.to_owned()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<ScalarText, E> {
        Ok(ScalarText(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScalarText, E> {
        Ok(ScalarText(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScalarText, E> {
        Ok(ScalarText(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<ScalarText, E> {
        Ok(ScalarText(v.to_string()))
    }
}

/// The longest name Postgres keeps for a slot or publication (NAMEDATALEN - 1).
const PG_NAME_MAX: usize = 63;

/// A name of a database, function or sink in the config: what other entries
/// refer to and what URLs, subjects and metrics show.
pub fn resource_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    let valid = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(name)
    } else {
        Err(de::Error::custom(format!(
            "invalid name {name:?}: use 1 to 128 letters, digits, `_` or `-`"
        )))
    }
}

/// A replication slot name as Postgres accepts it.
pub fn slot_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    let valid = !name.is_empty()
        && name.len() <= PG_NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid {
        Ok(name)
    } else {
        Err(de::Error::custom(format!(
            "invalid slot name {name:?}: Postgres accepts 1 to {PG_NAME_MAX} lowercase letters, digits or `_`"
        )))
    }
}

/// A publication name: any identifier Postgres can store.
pub fn publication_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    if !name.is_empty() && name.len() <= PG_NAME_MAX && !name.contains('\0') {
        Ok(name)
    } else {
        Err(de::Error::custom(format!(
            "invalid publication name {name:?}: use 1 to {PG_NAME_MAX} bytes"
        )))
    }
}
