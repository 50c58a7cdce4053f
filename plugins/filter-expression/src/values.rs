//! JSON values of a change as CEL values.

use std::collections::HashMap;

use cel::Value;
use weft_sdk_guest::serde_json::Value as Json;

/// The CEL value of a JSON value: integers that fit `int` (i64) become
/// `int`, larger positive ones `uint`, other numbers `double` (a `numeric`
/// column's exact digits are rounded to the nearest double); objects become
/// maps with string keys.
pub fn to_cel(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => Value::from(items.iter().map(to_cel).collect::<Vec<Value>>()),
        Json::Object(map) => Value::from(
            map.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<HashMap<String, Value>>(),
        ),
    }
}
