//! Column-value filters (`filters:` of a change retention, in Sequin's
//! shape): `{column_name, operator, comparison_value}`, all of which must
//! hold for a change to pass.
//!
//! The column is read from the change's new row, or from its old row for a
//! delete (which holds at least the key columns). Comparisons follow the
//! JSON the column is rendered as (`docs/types.md`): numbers compare as
//! numbers, strings (text, timestamps in ISO 8601, UUIDs) as strings,
//! booleans only for (in)equality. A value of another kind than the
//! comparison value, or a missing column, never matches (except `is null`).

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use weft_core::change::Row;

/// One filter.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a filter like {column_name: status, operator: \"=\", comparison_value: active}"
)]
pub struct ColumnFilter {
    /// The column it reads.
    pub column_name: String,
    /// How it compares.
    pub operator: FilterOperator,
    /// What it compares with: a scalar, a list for `in` and `not in`, none
    /// for `is null` and `is not null`.
    #[serde(default)]
    pub comparison_value: Option<Value>,
}

/// The operators Sequin's column filters have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(expecting = "one of =, !=, >, >=, <, <=, in, not in, is null, is not null")]
pub enum FilterOperator {
    /// Equal.
    #[serde(rename = "=")]
    Eq,
    /// Not equal.
    #[serde(rename = "!=")]
    Ne,
    /// Greater than.
    #[serde(rename = ">")]
    Gt,
    /// Greater than or equal.
    #[serde(rename = ">=")]
    Ge,
    /// Less than.
    #[serde(rename = "<")]
    Lt,
    /// Less than or equal.
    #[serde(rename = "<=")]
    Le,
    /// Equal to one of a list.
    #[serde(rename = "in")]
    In,
    /// Equal to none of a list.
    #[serde(rename = "not in")]
    NotIn,
    /// NULL or absent.
    #[serde(rename = "is null")]
    IsNull,
    /// Present and not NULL.
    #[serde(rename = "is not null")]
    IsNotNull,
}

impl ColumnFilter {
    /// Why the filter can never be evaluated, if so (a list operator
    /// without a list, a comparison without a value).
    pub fn problem(&self) -> Option<String> {
        use FilterOperator::*;
        match (self.operator, &self.comparison_value) {
            (IsNull | IsNotNull, Some(_)) => {
                Some("`is null` and `is not null` take no comparison_value; remove it".into())
            }
            (IsNull | IsNotNull, None) => None,
            (In | NotIn, Some(Value::Array(_))) => None,
            (In | NotIn, _) => {
                Some("`in` and `not in` need a list as comparison_value, e.g. [a, b]".into())
            }
            (_, None | Some(Value::Null)) => Some(
                "this operator needs a comparison_value (use `is null` to test for NULL)".into(),
            ),
            (Gt | Ge | Lt | Le, Some(Value::Bool(_))) => {
                Some("booleans compare only with = and !=".into())
            }
            (_, Some(Value::Array(_) | Value::Object(_))) => Some(
                "comparison_value must be a number, string or boolean for this operator".into(),
            ),
            _ => None,
        }
    }

    /// Whether the row passes the filter.
    pub fn matches(&self, row: &Row) -> bool {
        use FilterOperator::*;
        let value = row.get(&self.column_name).filter(|v| !v.is_null());
        let wanted = self.comparison_value.as_ref();
        match (self.operator, value, wanted) {
            (IsNull, value, _) => value.is_none(),
            (IsNotNull, value, _) => value.is_some(),
            (_, None, _) | (_, _, None) => false,
            (In, Some(value), Some(Value::Array(list))) => list
                .iter()
                .any(|item| compare(value, item) == Some(Ordering::Equal)),
            (NotIn, Some(value), Some(Value::Array(list))) => !list
                .iter()
                .any(|item| compare(value, item) == Some(Ordering::Equal)),
            (In | NotIn, _, _) => false,
            (Ne, Some(value), Some(wanted)) => {
                compare(value, wanted).is_some_and(|o| o != Ordering::Equal)
            }
            (op, Some(value), Some(wanted)) => compare(value, wanted).is_some_and(|o| match op {
                Eq => o == Ordering::Equal,
                Gt => o == Ordering::Greater,
                Ge => o != Ordering::Less,
                Lt => o == Ordering::Less,
                Le => o != Ordering::Greater,
                _ => unreachable!("handled above"),
            }),
        }
    }
}

/// Whether `row` passes every filter.
pub fn all_match(filters: &[ColumnFilter], row: &Row) -> bool {
    filters.iter().all(|filter| filter.matches(row))
}

/// `value` against `wanted`, when they are of comparable kinds.
fn compare(value: &Value, wanted: &Value) -> Option<Ordering> {
    match (value, wanted) {
        (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        // A numeric column compared with a quoted number (`"42"`), as YAML
        // users often write it.
        (Value::Number(a), Value::String(b)) => a.as_f64()?.partial_cmp(&b.parse::<f64>().ok()?),
        (Value::String(a), Value::Number(b)) => a.parse::<f64>().ok()?.partial_cmp(&b.as_f64()?),
        (Value::Bool(a), Value::Bool(b)) => {
            (a == b).then_some(Ordering::Equal).or(Some(Ordering::Less))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(yaml: &str) -> ColumnFilter {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn row(value: Value) -> Row {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn each_operator_compares_by_the_value_kind() {
        let r = row(json!({"house": "Atreides", "age": 42, "alive": true, "note": null}));
        let cases = [
            (
                "{column_name: house, operator: \"=\", comparison_value: Atreides}",
                true,
            ),
            (
                "{column_name: house, operator: \"!=\", comparison_value: Atreides}",
                false,
            ),
            (
                "{column_name: age, operator: \">\", comparison_value: 41}",
                true,
            ),
            (
                "{column_name: age, operator: \">=\", comparison_value: 42}",
                true,
            ),
            (
                "{column_name: age, operator: \"<\", comparison_value: 42}",
                false,
            ),
            (
                "{column_name: age, operator: \"<=\", comparison_value: \"42\"}",
                true,
            ),
            (
                "{column_name: house, operator: in, comparison_value: [Harkonnen, Atreides]}",
                true,
            ),
            (
                "{column_name: house, operator: not in, comparison_value: [Atreides]}",
                false,
            ),
            ("{column_name: note, operator: is null}", true),
            ("{column_name: missing, operator: is null}", true),
            ("{column_name: age, operator: is not null}", true),
            (
                "{column_name: alive, operator: \"=\", comparison_value: true}",
                true,
            ),
            (
                "{column_name: alive, operator: \"!=\", comparison_value: true}",
                false,
            ),
            (
                "{column_name: house, operator: \">\", comparison_value: 3}",
                false,
            ),
            (
                "{column_name: missing, operator: \"!=\", comparison_value: x}",
                false,
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(filter(yaml).matches(&r), want, "{yaml}");
        }
    }

    #[test]
    fn unusable_filters_are_explained() {
        assert!(
            filter("{column_name: a, operator: in, comparison_value: x}")
                .problem()
                .is_some()
        );
        assert!(
            filter("{column_name: a, operator: \"=\"}")
                .problem()
                .is_some()
        );
        assert!(
            filter("{column_name: a, operator: is null, comparison_value: 1}")
                .problem()
                .is_some()
        );
        assert!(
            filter("{column_name: a, operator: \"=\", comparison_value: [1]}")
                .problem()
                .is_some()
        );
        assert!(
            filter("{column_name: a, operator: \">\", comparison_value: true}")
                .problem()
                .is_some()
        );
        assert!(
            filter("{column_name: a, operator: \"=\", comparison_value: 1}")
                .problem()
                .is_none()
        );
        let bad: Result<ColumnFilter, _> =
            serde_yaml_ng::from_str("{column_name: a, operator: like, comparison_value: x}");
        let message = bad.unwrap_err().to_string();
        assert!(message.contains("unknown variant `like`"), "{message}");
    }
}
