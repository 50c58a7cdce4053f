//! A partial backfill's `WHERE` filter: one boolean SQL expression over the
//! table's own columns, with `$1`, `$2`, … standing for the request's
//! parameters, e.g. `status = $1 AND total > $2`.
//!
//! It is checked twice before any row is read. Here: it must parse as one
//! expression (no `;`, no second statement), and read nothing but the row:
//! no subquery, no table, and no placeholder other than `$n`. Then by
//! Postgres ([`prepare`]): the columns and types must check against the
//! table, and every function it calls must be immutable or stable, so a
//! filter cannot change anything (no `nextval`, `set_config`,
//! `pg_terminate_backend`, …). What runs is the parsed expression rendered
//! back, never the request's text, with each parameter cast from text to
//! the type Postgres inferred for it: values are never spliced into the
//! SQL. They are bound, or set as transaction-local settings that the SQL
//! reads with `current_setting` (see `super::scope`).

use std::ops::ControlFlow;

use serde_json::Value;
use sqlparser::ast::{
    Expr, ObjectName, ObjectNamePart, Query, Value as SqlValue, Visit, Visitor,
    visit_expressions_mut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;
use tokio_postgres::Client;
pub use weft_store::RowFilter;

/// The longest filter accepted, in bytes.
const MAX_FILTER_BYTES: usize = 4096;
/// The most parameters a filter may use.
const MAX_PARAMS: usize = 64;

/// Why a filter was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    /// It is not one SQL expression.
    #[error("filter `where` is not one SQL expression: {0}")]
    Syntax(String),
    /// It does something a filter may not.
    #[error("filter `where` {0}")]
    NotAllowed(String),
    /// Its placeholders and `params` disagree.
    #[error(
        "filter `where` uses {used} parameter(s) ($1 to ${used}) but `params` has {given}; give one value per placeholder"
    )]
    ParamCount {
        /// The highest placeholder number.
        used: usize,
        /// The number of values given.
        given: usize,
    },
    /// Postgres refused it against the table.
    #[error("filter `where` does not check against the table: {0}")]
    Rejected(String),
}

/// A filter that parsed as one expression reading only the row.
#[derive(Debug)]
pub(crate) struct ParsedFilter {
    expr: Expr,
    /// The functions it calls (unqualified, as Postgres folds them).
    functions: Vec<String>,
}

/// The filter checked by Postgres against a table, ready to run.
#[derive(Debug, Clone)]
pub(crate) struct SqlFilter {
    /// The parsed expression, its placeholders as the request wrote them.
    expr: Expr,
    /// The type Postgres inferred for each placeholder, as SQL.
    types: Vec<String>,
    /// `$1`, `$2`, …'s values as text (`None` for SQL NULL).
    pub(crate) values: Vec<Option<String>>,
}

impl SqlFilter {
    /// The expression as SQL, each placeholder `$n` replaced by the text
    /// `param(n)` (a parameter or setting reference) cast to its type.
    pub(crate) fn expression(&self, param: &dyn Fn(usize) -> String) -> String {
        let mut expr = self.expr.clone();
        let _ = visit_expressions_mut(&mut expr, |e| {
            if let Expr::Value(value) = e
                && let SqlValue::Placeholder(text) = &value.value
                && let Some(n) = placeholder_number(text)
                && let Some(ty) = self.types.get(n - 1)
            {
                let cast = format!("CAST(CAST({} AS TEXT) AS {ty})", param(n));
                if let Ok(replacement) = Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&cast)
                    .and_then(|mut p| p.parse_expr())
                {
                    *e = Expr::Nested(Box::new(replacement));
                }
            }
            ControlFlow::<()>::Continue(())
        });
        expr.to_string()
    }
}

/// Parses `filter` and checks that it is one expression reading only the row.
pub(crate) fn parse(filter: &RowFilter) -> Result<ParsedFilter, FilterError> {
    if filter.sql.trim().is_empty() {
        return Err(FilterError::Syntax("it is empty".into()));
    }
    if filter.sql.len() > MAX_FILTER_BYTES {
        return Err(FilterError::NotAllowed(format!(
            "is {} bytes; the limit is {MAX_FILTER_BYTES}",
            filter.sql.len()
        )));
    }
    if filter.params.len() > MAX_PARAMS {
        return Err(FilterError::NotAllowed(format!(
            "has {} params; the limit is {MAX_PARAMS}",
            filter.params.len()
        )));
    }
    let syntax = |e: sqlparser::parser::ParserError| FilterError::Syntax(e.to_string());
    let mut parser = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&filter.sql)
        .map_err(syntax)?;
    let expr = parser.parse_expr().map_err(syntax)?;
    let next = parser.peek_token().token;
    if next != Token::EOF {
        return Err(FilterError::Syntax(format!(
            "unexpected `{next}` after the expression; give one boolean expression, without `;` or a second statement"
        )));
    }
    let mut reader = RowOnly::default();
    if let ControlFlow::Break(error) = expr.visit(&mut reader) {
        return Err(error);
    }
    let RowOnly {
        mut functions,
        used,
    } = reader;
    if used != filter.params.len() {
        return Err(FilterError::ParamCount {
            used,
            given: filter.params.len(),
        });
    }
    functions.sort();
    functions.dedup();
    Ok(ParsedFilter { expr, functions })
}

/// Walks a filter: refuses anything that reads beyond the row, and notes
/// the functions it calls and its highest placeholder.
#[derive(Default)]
struct RowOnly {
    functions: Vec<String>,
    used: usize,
}

impl Visitor for RowOnly {
    type Break = FilterError;

    fn pre_visit_query(&mut self, _query: &Query) -> ControlFlow<FilterError> {
        ControlFlow::Break(FilterError::NotAllowed(
            "contains a subquery; a filter tests the row's own columns only".into(),
        ))
    }

    fn pre_visit_relation(&mut self, name: &ObjectName) -> ControlFlow<FilterError> {
        ControlFlow::Break(FilterError::NotAllowed(format!(
            "reads the table {name}; a filter tests the row's own columns only"
        )))
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<FilterError> {
        match expr {
            Expr::Function(function) => {
                if let Some(ObjectNamePart::Identifier(name)) = function.name.0.last() {
                    self.functions.push(if name.quote_style.is_some() {
                        name.value.clone()
                    } else {
                        name.value.to_lowercase()
                    });
                }
            }
            Expr::Value(value) => {
                if let SqlValue::Placeholder(text) = &value.value {
                    match placeholder_number(text) {
                        Some(n) => self.used = self.used.max(n),
                        None => {
                            return ControlFlow::Break(FilterError::NotAllowed(format!(
                                "uses the placeholder {text}; write parameters as $1 to ${MAX_PARAMS}"
                            )));
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn placeholder_number(text: &str) -> Option<usize> {
    let n: usize = text.strip_prefix('$')?.parse().ok()?;
    (1..=MAX_PARAMS).contains(&n).then_some(n)
}

/// A request parameter as the text Postgres casts from.
fn param_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        Value::Bool(b) => Some(b.to_string()),
        other => Some(other.to_string()),
    }
}

/// Whether a query error is Postgres refusing the SQL (rather than the
/// connection failing).
pub(crate) fn refused_by_server(error: &tokio_postgres::Error) -> Option<String> {
    error.as_db_error().map(|db| match db.hint() {
        Some(hint) => format!("{} ({hint})", db.message()),
        None => db.message().to_string(),
    })
}

/// Checks `parsed` against the table `from` (`ONLY "schema"."table" t`)
/// with Postgres and renders it ready to run. The outer error is the
/// connection failing; the inner one, the filter refused.
pub(crate) async fn prepare(
    client: &Client,
    from: &str,
    parsed: &ParsedFilter,
    filter: &RowFilter,
) -> Result<Result<SqlFilter, FilterError>, tokio_postgres::Error> {
    if !parsed.functions.is_empty() {
        let volatile = client
            .query(
                "SELECT DISTINCT proname::text FROM pg_proc
                 WHERE proname = ANY($1) AND provolatile = 'v' ORDER BY 1",
                &[&parsed.functions],
            )
            .await?;
        if !volatile.is_empty() {
            let names: Vec<String> = volatile.iter().map(|r| r.get(0)).collect();
            return Ok(Err(FilterError::NotAllowed(format!(
                "calls the volatile function(s) {}; a filter may call only immutable and stable functions",
                names.join(", ")
            ))));
        }
    }
    let probe = format!("SELECT 1 FROM {from} WHERE ({})", parsed.expr);
    let statement = match client.prepare(&probe).await {
        Ok(statement) => statement,
        Err(error) => {
            return match refused_by_server(&error) {
                Some(message) => Ok(Err(FilterError::Rejected(message))),
                None => Err(error),
            };
        }
    };
    let types: Vec<String> = statement
        .params()
        .iter()
        .map(|ty| format!("\"{}\".\"{}\"", ty.schema(), ty.name()))
        .collect();
    let values: Vec<Option<String>> = filter.params.iter().map(param_text).collect();
    for (n, (value, ty)) in values.iter().zip(&types).enumerate() {
        if let Some(value) = value
            && let Some(message) = cast_refused(client, value, ty).await?
        {
            return Ok(Err(FilterError::Rejected(format!(
                "params[{n}] (${}) {value:?} is not a {}: {message}",
                n + 1,
                statement.params()[n].name()
            ))));
        }
    }
    Ok(Ok(SqlFilter {
        expr: parsed.expr.clone(),
        types,
        values,
    }))
}

/// Why Postgres refuses to cast the text `value` to the type `ty` (a type
/// name as SQL), or `None` when it casts.
pub(crate) async fn cast_refused(
    client: &Client,
    value: &str,
    ty: &str,
) -> Result<Option<String>, tokio_postgres::Error> {
    match client
        .query_one(&format!("SELECT $1::text::{ty}"), &[&value])
        .await
    {
        Ok(_) => Ok(None),
        Err(error) => match refused_by_server(&error) {
            Some(message) => Ok(Some(message)),
            None => Err(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(sql: &str, params: Vec<Value>) -> RowFilter {
        RowFilter {
            sql: sql.into(),
            params,
        }
    }

    #[test]
    fn one_expression_over_the_row_parses_and_lists_its_functions() {
        let parsed = parse(&filter(
            "lower(status) = $1 AND total > $2 AND created_at >= now() - interval '1 day'",
            vec![json!("paid"), json!(100)],
        ))
        .unwrap();
        assert_eq!(parsed.functions, vec!["lower", "now"]);
    }

    #[test]
    fn statements_subqueries_tables_and_odd_placeholders_are_refused() {
        let refused = |sql: &str| parse(&filter(sql, vec![])).unwrap_err();
        assert!(matches!(
            refused("true; DROP TABLE t"),
            FilterError::Syntax(_)
        ));
        assert!(matches!(refused("true) OR (true"), FilterError::Syntax(_)));
        assert!(matches!(refused(""), FilterError::Syntax(_)));
        assert!(matches!(
            refused("id IN (SELECT id FROM secrets)"),
            FilterError::NotAllowed(m) if m.contains("subquery") || m.contains("table")
        ));
        assert!(matches!(
            refused("EXISTS (SELECT 1 FROM pg_authid)"),
            FilterError::NotAllowed(_)
        ));
        assert!(matches!(
            refused("v = ANY (SELECT 1)"),
            FilterError::NotAllowed(m) if m.contains("subquery")
        ));
        assert!(matches!(
            refused("v > (SELECT max(v) FROM t2)"),
            FilterError::NotAllowed(_)
        ));
        assert!(matches!(refused("id = $0"), FilterError::NotAllowed(m) if m.contains("$0")));
        assert!(matches!(refused("id = $65"), FilterError::NotAllowed(_)));
        assert!(matches!(
            refused(&format!("id > {}", "1 + ".repeat(2000) + "1")),
            FilterError::NotAllowed(m) if m.contains("bytes")
        ));
    }

    #[test]
    fn placeholders_must_match_params() {
        assert_eq!(
            parse(&filter("a = $1 AND b = $3", vec![json!(1), json!(2)])).unwrap_err(),
            FilterError::ParamCount { used: 3, given: 2 }
        );
        assert_eq!(
            parse(&filter("a = 1", vec![json!(1)])).unwrap_err(),
            FilterError::ParamCount { used: 0, given: 1 }
        );
    }

    #[test]
    fn placeholders_are_rendered_as_asked_and_literals_are_left_alone() {
        let parsed = parse(&filter(
            "status = $1 AND note <> '$1' AND total > $2",
            vec![json!("paid"), json!(5)],
        ))
        .unwrap();
        let sql = SqlFilter {
            expr: parsed.expr,
            types: vec![
                "\"pg_catalog\".\"text\"".into(),
                "\"pg_catalog\".\"int4\"".into(),
            ],
            values: vec![Some("paid".into()), Some("5".into())],
        };
        let rendered = sql.expression(&|n| format!("current_setting('weft.param_{n}')"));
        assert_eq!(
            rendered,
            "status = (CAST(CAST(current_setting('weft.param_1') AS TEXT) AS \"pg_catalog\".\"text\")) \
             AND note <> '$1' \
             AND total > (CAST(CAST(current_setting('weft.param_2') AS TEXT) AS \"pg_catalog\".\"int4\"))"
        );
        assert!(
            sql.expression(&|n| format!("${n}"))
                .contains("CAST(CAST($2 AS TEXT)")
        );
    }

    #[test]
    fn params_become_text_or_null() {
        assert_eq!(param_text(&json!("x")), Some("x".into()));
        assert_eq!(param_text(&json!(1.5)), Some("1.5".into()));
        assert_eq!(param_text(&json!(true)), Some("true".into()));
        assert_eq!(param_text(&json!(null)), None);
        assert_eq!(param_text(&json!({"a": 1})), Some("{\"a\":1}".into()));
    }
}
