//! A weft filter that keeps the changes for which a CEL (Common Expression
//! Language) expression is true, e.g.
//! `action == "update" && record.status == "paid" && record.total > 100`.
//! Config keys and errors: `docs/plugins.md`, "filter-expression".

mod values;

use cel::{Context, Program, Value};
use weft_sdk_guest::{Change, Config, Error, Filter, export_filter};

struct FilterExpression {
    source: String,
    program: Program,
}

impl Filter for FilterExpression {
    fn init(config: Config) -> Result<Self, String> {
        config.refuse_unknown_keys(|key| key == "expression", "`expression`")?;
        let source = config.require("expression")?.trim().to_string();
        if source.is_empty() {
            return Err("`expression` is empty: write a CEL expression such as `action == \"insert\" && record.total > 100`".into());
        }
        let program =
            Program::compile(&source).map_err(|e| format!("`expression` is not valid CEL: {e}"))?;
        Ok(FilterExpression { source, program })
    }

    fn filter(&mut self, change: Change) -> Result<bool, Error> {
        let message = change.into_message()?;
        let mut context = Context::default();
        for name in ["action", "record", "changes", "metadata"] {
            context.add_variable_from_value(name, values::to_cel(&message[name]));
        }
        match self.program.execute(&context) {
            Ok(Value::Bool(keep)) => Ok(keep),
            Ok(other) => Err(Error::permanent(format!(
                "expression `{}` gave {} for this change, not a boolean: make it a condition, e.g. compare with `==`",
                self.source,
                other.type_of()
            ))),
            Err(e) => Err(Error::permanent(format!(
                "expression `{}` failed on this change: {e} (use `has(record.column)` to test for a column that may be absent)",
                self.source
            ))),
        }
    }
}

export_filter!(FilterExpression);

#[cfg(test)]
mod tests {
    use super::*;
    use weft_sdk_guest::{Action, Metadata};

    fn change(action: Action, record: &str) -> Change {
        let metadata = Metadata {
            table_name: "orders".into(),
            ..Metadata::default()
        };
        Change::new(action, record.into(), None, metadata)
    }

    fn filter(expression: &str) -> Result<FilterExpression, String> {
        FilterExpression::init(Config::from(&[("expression", expression)][..]))
    }

    #[test]
    fn the_issue_example_compares_numeric_columns_with_ints() {
        let mut f =
            filter(r#"action == "update" && record.status == "paid" && record.total > 100"#)
                .unwrap();
        let paid = r#"{"status": "paid", "total": 100.50}"#;
        assert_eq!(f.filter(change(Action::Update, paid)), Ok(true));
        assert_eq!(f.filter(change(Action::Insert, paid)), Ok(false));
        assert_eq!(
            f.filter(change(
                Action::Update,
                r#"{"status": "paid", "total": 100}"#
            )),
            Ok(false)
        );
        let mut by_table =
            filter(r#"metadata.table_name == "orders" && has(record.note)"#).unwrap();
        assert_eq!(
            by_table.filter(change(Action::Insert, r#"{"note": null}"#)),
            Ok(true)
        );
    }

    #[test]
    fn non_booleans_and_failures_are_permanent_errors() {
        let mut f = filter("record.total").unwrap();
        assert_eq!(
            f.filter(change(Action::Insert, r#"{"total": 3}"#)),
            Err(Error::permanent(
                "expression `record.total` gave int for this change, not a boolean: make it a condition, e.g. compare with `==`"
            ))
        );
        let mut missing = filter(r#"record.status == "paid""#).unwrap();
        let error = missing
            .filter(change(Action::Insert, "{}"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("failed on this change") && error.contains("status"),
            "{error}"
        );
        assert!(
            filter("record.total >")
                .err()
                .unwrap()
                .starts_with("`expression` is not valid CEL: ")
        );
        assert!(
            filter("  ")
                .err()
                .unwrap()
                .starts_with("`expression` is empty")
        );
    }
}
