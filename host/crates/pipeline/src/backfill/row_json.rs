//! A chunk's rows written as JSON objects straight from Postgres's text,
//! with their primary-key values: what a `read` change carries (see
//! [`weft_core::message::Record::Json`]). Each value is rendered as a change
//! renders it ([`weft_postgres::types`]), in the table's column order, so a
//! read row's JSON is what writing the same row as a map would give.

use std::ops::Range;

use weft_core::message::json;
use weft_postgres::types;

use super::table::Table;

/// Writes the rows of one table.
pub(crate) struct RowWriter<'a> {
    table: &'a Table,
    /// `schema.table`, for the warnings of values delivered as text.
    qualified_name: String,
    /// Per column, what goes before its value: `{"name":` for the first,
    /// `,"name":` after.
    prefixes: Vec<String>,
    /// Per column, its position in the primary key, if it is a key column.
    key_positions: Vec<Option<usize>>,
}

impl<'a> RowWriter<'a> {
    /// A writer for the rows of `table`.
    pub(crate) fn new(table: &'a Table) -> RowWriter<'a> {
        let columns = &table.relation.columns;
        let prefixes = columns
            .iter()
            .enumerate()
            .map(|(i, column)| {
                let mut prefix = String::from(if i == 0 { '{' } else { ',' });
                json::write_str(&mut prefix, &column.name);
                prefix.push(':');
                prefix
            })
            .collect();
        let mut key_positions = vec![None; columns.len()];
        for (position, key) in table.relation.primary_key.iter().enumerate() {
            let column = columns
                .iter()
                .position(|column| &column.name == key)
                .expect("a primary-key column is one of the table's columns");
            key_positions[column] = Some(position);
        }
        RowWriter {
            table,
            qualified_name: table.relation.qualified_name(),
            prefixes,
            key_positions,
        }
    }

    /// Appends to `out` the JSON object of the row whose column `i` has the
    /// text `value(i)` (`None`: NULL); returns the row's primary-key values
    /// and where in `out` its object is.
    pub(crate) fn write<'r>(
        &self,
        out: &mut String,
        value: impl Fn(usize) -> Option<&'r str>,
    ) -> (Vec<String>, Range<usize>) {
        let columns = &self.table.relation.columns;
        let start = out.len();
        // Each value is read once, for the JSON and, in a key column, the key.
        let mut key = vec![String::new(); self.table.relation.primary_key.len()];
        let columns_of = self
            .prefixes
            .iter()
            .zip(&self.table.kinds)
            .zip(&self.key_positions);
        for (i, ((prefix, kind), key_position)) in columns_of.enumerate() {
            out.push_str(prefix);
            let text = value(i);
            let at = (self.qualified_name.as_str(), columns[i].name.as_str());
            match text {
                None => out.push_str("null"),
                Some(text) => types::write_json_lenient(kind, text, at, out),
            }
            if let (Some(position), Some(text)) = (key_position, text) {
                key[*position] = types::key_text_lenient(kind, text, at);
            }
        }
        if self.prefixes.is_empty() {
            out.push('{');
        }
        out.push('}');
        (key, start..out.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use weft_core::change::{Column, Relation, Row};
    use weft_postgres::types::builtin_kind;

    /// `public.orders (id bigint, region text, price numeric, at timestamptz, ok bool)`,
    /// keyed by `(region, id)`.
    fn orders() -> Table {
        let columns: Vec<(&str, u32)> = vec![
            ("id", 20),
            ("region", 25),
            ("price", 1700),
            ("at", 1184),
            ("ok", 16),
        ];
        Table {
            relation: Arc::new(Relation {
                oid: 1,
                schema: "public".into(),
                name: "orders".into(),
                columns: columns
                    .iter()
                    .map(|(name, oid)| Column {
                        name: name.to_string(),
                        type_oid: *oid,
                        type_modifier: -1,
                        is_identity_key: matches!(*name, "id" | "region"),
                    })
                    .collect(),
                primary_key: vec!["region".into(), "id".into()],
            }),
            key_types: vec!["text".into(), "bigint".into()],
            types: vec![String::new(); columns.len()],
            kinds: columns
                .iter()
                .map(|(_, oid)| builtin_kind(*oid).unwrap())
                .collect(),
        }
    }

    #[test]
    fn a_row_is_written_as_its_map_would_be_and_keyed_in_key_order() {
        let table = orders();
        let writer = RowWriter::new(&table);
        let mut chunk = String::from("before");
        let rows: [[Option<&str>; 5]; 3] = [
            [
                Some("7"),
                Some("eu \"west\""),
                Some("12.50"),
                Some("2024-01-02 03:04:05+00"),
                Some("t"),
            ],
            [
                Some("8"),
                Some("us"),
                None,
                Some("2024-01-02 03:04:05.5+05:30"),
                Some("f"),
            ],
            [Some("9"), Some(""), Some("NaN"), None, None],
        ];
        for texts in rows {
            let (key, range) = writer.write(&mut chunk, |i| texts[i]);
            let json = &chunk[range];
            let mut map = Row::new();
            for (i, column) in table.relation.columns.iter().enumerate() {
                let value = texts[i].map_or(serde_json::Value::Null, |text| {
                    types::render(&table.kinds[i], text).unwrap()
                });
                map.insert(column.name.clone(), value);
            }
            assert_eq!(json, serde_json::to_string(&map).unwrap());
            assert_eq!(key, table.relation.key_of(&map), "{texts:?}");
        }
    }
}
