//! A target table as the catalog describes it, and the SQL that turns a
//! JSON row (rendered as `docs/types.md` says) back into its columns.
//!
//! Values go in through `jsonb_populate_record(NULL::target, row)`, which
//! reads each column by the target's own type: numbers and strings through
//! the type's input function, nested JSON arrays as arrays (of domains and
//! composites too), objects as composites, JSON as json/jsonb. A few types
//! it cannot read get their own expression (see [`Conversion`]).

use tokio_postgres::Client;

use crate::config::TableRef;
use weft_postgres::protocol::quote_ident;

/// How a column's JSON value becomes its SQL value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conversion {
    /// `jsonb_populate_record` reads it.
    Populate,
    /// Its own expression: `jsonb_populate_record` refuses (`hstore`, an
    /// object) or misreads (`int2vector`, `oidvector`, and arrays of these or
    /// of domains over arrays, whose nested JSON arrays it takes for
    /// dimensions) the value.
    Expression(Special),
}

/// A value that needs its own expression; type names as `format_type`
/// gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Special {
    /// `hstore` (in schema `schema`), rendered as an object.
    Hstore {
        /// The extension's schema.
        schema: String,
    },
    /// `int2vector` or `oidvector`, rendered as an array.
    Vector {
        /// The type.
        type_name: String,
    },
    /// A domain over a one-dimensional array of `element`.
    DomainArray {
        /// The domain.
        type_name: String,
        /// The array's element type.
        element: String,
    },
    /// An array of one of the above.
    ArrayOf {
        /// The array type.
        type_name: String,
        /// The element.
        element: Box<Special>,
    },
}

impl Special {
    /// The SQL expression reading JSON expression `json` (nesting `depth`
    /// keeps aliases apart).
    fn sql(&self, json: &str, depth: usize) -> String {
        let typed = |kind: &str, body: String| {
            format!("CASE WHEN jsonb_typeof({json}) = '{kind}' THEN {body} END")
        };
        match self {
            Special::Hstore { schema } => {
                let each = format!("jsonb_each_text({json}) AS h{depth}(k, v)");
                typed(
                    "object",
                    format!(
                        "{}.hstore(ARRAY(SELECT k FROM {each}), ARRAY(SELECT v FROM {each}))",
                        quote_ident(schema)
                    ),
                )
            }
            Special::Vector { type_name } => typed(
                "array",
                format!(
                    "array_to_string(ARRAY(SELECT jsonb_array_elements_text({json})), ' ')::{type_name}"
                ),
            ),
            Special::DomainArray { type_name, element } => typed(
                "array",
                format!(
                    "ARRAY(SELECT (d{depth}.x #>> '{{}}')::{element} \
                     FROM jsonb_array_elements({json}) WITH ORDINALITY AS d{depth}(x, o) ORDER BY d{depth}.o)::{type_name}"
                ),
            ),
            // An array literal of the elements' texts: `ARRAY(...)` would
            // read a domain over an array as one more dimension.
            Special::ArrayOf { type_name, element } => {
                let item = element.sql(&format!("a{depth}.x"), depth + 1);
                typed(
                    "array",
                    format!(
                        "(SELECT ('{{' || coalesce(string_agg(CASE WHEN ({item}) IS NULL THEN 'NULL' \
                         ELSE '\"' || replace(replace(({item})::text, E'\\\\', E'\\\\\\\\'), '\"', E'\\\\\"') || '\"' END, \
                         ',' ORDER BY a{depth}.o), '') || '}}')::{type_name} \
                         FROM jsonb_array_elements({json}) WITH ORDINALITY AS a{depth}(x, o))"
                    ),
                )
            }
        }
    }
}

/// One writable column of a target table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetColumn {
    /// The column's name.
    pub name: String,
    /// How its value is read.
    pub conversion: Conversion,
}

/// A target table: its writable (not generated) columns and primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetTable {
    /// The table.
    pub table: TableRef,
    /// Writable columns, in column order.
    pub columns: Vec<TargetColumn>,
    /// Primary-key column names, in key order; empty when it has none.
    pub primary_key: Vec<String>,
}

/// A column's type facts, as [`COLUMNS`] reads them.
struct ColumnType {
    type_name: String,
    base: String,
    schema: String,
    element: Option<ElementType>,
    domain_array_of: Option<String>,
}

/// The element of an array column.
struct ElementType {
    type_name: String,
    base: String,
    schema: String,
    domain_array_of: Option<String>,
}

/// The writable columns of `to_regclass($1)`: name, type (`format_type`),
/// type name, its schema, the element of an array type (type, name,
/// schema) and, for a domain over an array, that array's element (of the
/// column's type and of the element's).
const COLUMNS: &str = "
    SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typname::text, tn.nspname::text,
           format_type(e.oid, NULL), e.typname::text, en.nspname::text,
           (SELECT format_type(b.typelem, NULL) FROM pg_type b
             WHERE t.typtype = 'd' AND b.oid = t.typbasetype AND b.typelem <> 0
               AND EXISTS (SELECT 1 FROM pg_type x WHERE x.typarray = b.oid)),
           (SELECT format_type(b.typelem, NULL) FROM pg_type b
             WHERE e.typtype = 'd' AND b.oid = e.typbasetype AND b.typelem <> 0
               AND EXISTS (SELECT 1 FROM pg_type x WHERE x.typarray = b.oid))
    FROM pg_attribute a
    JOIN pg_type t ON t.oid = a.atttypid
    JOIN pg_namespace tn ON tn.oid = t.typnamespace
    LEFT JOIN pg_type e ON e.typarray = t.oid
    LEFT JOIN pg_namespace en ON en.oid = e.typnamespace
    WHERE a.attrelid = to_regclass($1) AND a.attnum > 0
      AND NOT a.attisdropped AND a.attgenerated = ''
    ORDER BY a.attnum";

impl ColumnType {
    fn conversion(&self) -> Conversion {
        let scalar =
            |type_name: &str, base: &str, schema: &str, domain_array_of: &Option<String>| match (
                base,
                domain_array_of,
            ) {
                ("hstore", _) => Some(Special::Hstore {
                    schema: schema.to_string(),
                }),
                ("int2vector" | "oidvector", _) => Some(Special::Vector {
                    type_name: type_name.to_string(),
                }),
                (_, Some(element)) => Some(Special::DomainArray {
                    type_name: type_name.to_string(),
                    element: element.clone(),
                }),
                _ => None,
            };
        if let Some(element) = &self.element {
            return match scalar(
                &element.type_name,
                &element.base,
                &element.schema,
                &element.domain_array_of,
            ) {
                Some(element) => Conversion::Expression(Special::ArrayOf {
                    type_name: self.type_name.clone(),
                    element: Box::new(element),
                }),
                None => Conversion::Populate,
            };
        }
        match (self.base.as_str(), &self.domain_array_of) {
            // Populate reads a domain over a plain array well.
            (_, Some(_)) => Conversion::Populate,
            _ => scalar(&self.type_name, &self.base, &self.schema, &None)
                .map_or(Conversion::Populate, Conversion::Expression),
        }
    }
}

impl TargetTable {
    /// Reads `table` from the catalog; `None` when it does not exist.
    pub async fn describe(
        client: &Client,
        table: &TableRef,
    ) -> Result<Option<TargetTable>, tokio_postgres::Error> {
        let name = quoted(table);
        let columns = client.query(COLUMNS, &[&name]).await?;
        if columns.is_empty() {
            let exists: bool = client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
                .await?
                .get(0);
            if !exists {
                return Ok(None);
            }
        }
        let primary_key = client
            .query(
                "SELECT a.attname::text
                 FROM pg_index i
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                 WHERE i.indrelid = to_regclass($1) AND i.indisprimary
                 ORDER BY k.ord",
                &[&name],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        Ok(Some(TargetTable {
            table: table.clone(),
            columns: columns
                .iter()
                .map(|row| {
                    let element = row
                        .get::<_, Option<String>>(4)
                        .map(|type_name| ElementType {
                            type_name,
                            base: row.get(5),
                            schema: row.get(6),
                            domain_array_of: row.get(8),
                        });
                    let column_type = ColumnType {
                        type_name: row.get(1),
                        base: row.get(2),
                        schema: row.get(3),
                        element,
                        domain_array_of: row.get(7),
                    };
                    TargetColumn {
                        name: row.get(0),
                        conversion: column_type.conversion(),
                    }
                })
                .collect(),
            primary_key,
        }))
    }

    /// The column named `name`.
    pub fn column(&self, name: &str) -> Option<&TargetColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// `INSERT ... ON CONFLICT (key) DO UPDATE` of `columns` (names of this
    /// table's columns) from `$1`, a JSON array of rows as text, in order.
    pub fn upsert_sql(&self, columns: &[&TargetColumn]) -> String {
        let names = list(columns.iter().map(|c| quote_ident(&c.name)));
        let values = list(columns.iter().map(|c| self.value_expr(c)));
        let updates: Vec<String> = columns
            .iter()
            .filter(|c| !self.primary_key.contains(&c.name))
            .map(|c| format!("{0} = EXCLUDED.{0}", quote_ident(&c.name)))
            .collect();
        let on_conflict = if updates.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        format!(
            "INSERT INTO {table} ({names}) OVERRIDING SYSTEM VALUE \
             SELECT {values} FROM {rows} ORDER BY e.n \
             ON CONFLICT ({key}) {on_conflict}",
            table = quoted(&self.table),
            rows = self.rows_from_json(),
            key = list(self.primary_key.iter().map(|k| quote_ident(k))),
        )
    }

    /// `DELETE` of the rows whose keys are in `$1`, a JSON array of key
    /// objects as text.
    pub fn delete_sql(&self) -> String {
        let matches: Vec<String> = self
            .primary_key
            .iter()
            .map(|k| format!("t.{0} = p.{0}", quote_ident(k)))
            .collect();
        format!(
            "DELETE FROM {table} AS t USING {rows} WHERE {matches}",
            table = quoted(&self.table),
            rows = self.rows_from_json(),
            matches = matches.join(" AND "),
        )
    }

    /// `TRUNCATE` of the table.
    pub fn truncate_sql(&self) -> String {
        format!("TRUNCATE {}", quoted(&self.table))
    }

    /// `e(r, n)`: each row of `$1` with its position, and `p`: the row read
    /// as this table's row type (columns with their own expression left
    /// out: see [`Conversion`]).
    fn rows_from_json(&self) -> String {
        let own: Vec<String> = self
            .columns
            .iter()
            .filter(|c| c.conversion != Conversion::Populate)
            .map(|c| quote_literal(&c.name))
            .collect();
        let row = if own.is_empty() {
            "e.r".to_string()
        } else {
            format!("e.r - ARRAY[{}]::text[]", own.join(", "))
        };
        format!(
            "jsonb_array_elements($1::text::jsonb) WITH ORDINALITY AS e(r, n) \
             CROSS JOIN LATERAL jsonb_populate_record(NULL::{table}, {row}) AS p",
            table = quoted(&self.table),
        )
    }

    /// The SQL value of `column` for the row `e.r`.
    fn value_expr(&self, column: &TargetColumn) -> String {
        match &column.conversion {
            Conversion::Populate => format!("p.{}", quote_ident(&column.name)),
            Conversion::Expression(value) => {
                value.sql(&format!("e.r -> {}", quote_literal(&column.name)), 0)
            }
        }
    }
}

/// `"schema"."table"`.
pub fn quoted(table: &TableRef) -> String {
    format!(
        "{}.{}",
        quote_ident(&table.schema),
        quote_ident(&table.table)
    )
}

/// `'text'` as an SQL string literal.
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TargetTable {
        TargetTable {
            table: TableRef::parse("public.t").unwrap(),
            columns: vec![
                TargetColumn {
                    name: "id".into(),
                    conversion: Conversion::Populate,
                },
                TargetColumn {
                    name: "h".into(),
                    conversion: Conversion::Expression(Special::Hstore {
                        schema: "ext".into(),
                    }),
                },
            ],
            primary_key: vec!["id".into()],
        }
    }

    #[test]
    fn arrays_of_special_elements_are_read_element_by_element() {
        let value = Special::ArrayOf {
            type_name: "ints[]".into(),
            element: Box::new(Special::DomainArray {
                type_name: "ints".into(),
                element: "integer".into(),
            }),
        };
        let sql = value.sql("v", 0);
        assert!(
            sql.contains("jsonb_array_elements(v) WITH ORDINALITY AS a0(x, o)"),
            "{sql}"
        );
        assert!(sql.contains("(d1.x #>> '{}')::integer"), "{sql}");
        assert!(sql.contains("::ints END"), "{sql}");
        assert!(sql.contains(")::ints[] FROM"), "{sql}");
    }

    #[test]
    fn upsert_reads_hstore_apart_and_updates_non_key_columns() {
        let t = table();
        let all: Vec<&TargetColumn> = t.columns.iter().collect();
        let sql = t.upsert_sql(&all);
        assert!(sql.contains("e.r - ARRAY['h']::text[]"), "{sql}");
        assert!(sql.contains("\"ext\".hstore("), "{sql}");
        assert!(sql.contains("ON CONFLICT (\"id\") DO UPDATE SET \"h\" = EXCLUDED.\"h\""));
        let key_only = t.upsert_sql(&all[..1]);
        assert!(key_only.ends_with("DO NOTHING"), "{key_only}");
    }

    #[test]
    fn delete_matches_every_key_column() {
        let mut t = table();
        t.primary_key.push("h".into());
        let sql = t.delete_sql();
        assert!(
            sql.contains("t.\"id\" = p.\"id\" AND t.\"h\" = p.\"h\""),
            "{sql}"
        );
    }
}
