//! The relations the stream has described, and turning tuples into rows.
//!
//! pgoutput sends a Relation message before a table's first change on a
//! connection and again after its schema changes. Each one becomes a new
//! `Arc<Relation>`, so changes keep the schema they were decoded under, and
//! the cache is keyed by OID: a table dropped and recreated under the same
//! name is a new OID with its own Relation message.
//!
//! Primary keys: the message flags the replica identity columns, as of the
//! change (pgoutput reads the historic catalog). The catalog weft can query
//! is the current one, which may already be past a later key change or the
//! table's drop. So under the default replica identity (the primary key)
//! the message's flags decide which columns form the key, and the catalog
//! only supplies their order when it still agrees; when it no longer does,
//! the flagged columns are the key in table order. Under FULL, INDEX or
//! NOTHING the flags do not describe the primary key and the current catalog
//! is used, restricted to columns the message has.
//!
//! Non-builtin column types (domains, enums, arrays, composites) are
//! resolved through the catalog (`type_catalog.rs`) on each Relation
//! message, and again when a composite value no longer fits its known
//! definition.
//!
//! Unchanged TOAST values that no full old row fills in are shown as
//! [`UNCHANGED_TOAST`] and reported (see [`super::unchanged_toast`]).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::SourceError;
use super::pgoutput::{RelationColumn, Tuple, TupleValue};
use super::unchanged_toast::UnchangedToastReport;
use weft_core::change::{Column, Relation, Row};
use weft_postgres::PgError;
use weft_postgres::type_catalog::TypeCatalog;
use weft_postgres::types::{self, StaleComposite, TypeKind};

/// What sequin shows for an unchanged TOAST value the server did not send.
pub const UNCHANGED_TOAST: &str = "unchanged_toast";

/// A relation with the rendering of each of its columns.
#[derive(Debug, Clone)]
pub struct TrackedRelation {
    /// The relation shared with every change decoded under this version.
    pub relation: Arc<Relation>,
    /// How each column renders, in column order.
    pub kinds: Vec<TypeKind>,
}

impl TrackedRelation {
    /// Renders a tuple as a row. Unchanged TOAST values are taken from
    /// `fallback` (the old row, when the server sent a full one) or shown
    /// as `"unchanged_toast"`. A composite value that does not fit its known
    /// definition is shown as its text (see [`Relations::row`], which
    /// re-reads the catalog first).
    pub fn row(&self, tuple: &Tuple, fallback: Option<&Row>) -> Result<Row, SourceError> {
        match self.render_row(tuple, fallback, false)? {
            Ok(row) => Ok(row),
            // Lenient rendering shows stale composites as text instead.
            Err(stale) => Err(SourceError::Protocol(format!(
                "lenient rendering of {} reported {stale}",
                self.relation.qualified_name()
            ))),
        }
    }

    /// Renders a tuple; with `strict`, the first composite value that does
    /// not fit its definition stops rendering with that value's shape.
    fn render_row(
        &self,
        tuple: &Tuple,
        fallback: Option<&Row>,
        strict: bool,
    ) -> Result<Result<Row, StaleComposite>, SourceError> {
        let columns = &self.relation.columns;
        if tuple.len() != columns.len() {
            return Err(SourceError::Protocol(format!(
                "a tuple of {} has {} values but the relation has {} columns",
                self.relation.qualified_name(),
                tuple.len(),
                columns.len()
            )));
        }
        let mut row = Row::new();
        for ((column, kind), value) in columns.iter().zip(&self.kinds).zip(tuple) {
            let json = match value {
                TupleValue::Null => Value::Null,
                TupleValue::UnchangedToast => from_old_row(&column.name, fallback)
                    .unwrap_or_else(|| Value::String(UNCHANGED_TOAST.into())),
                TupleValue::Text(bytes) | TupleValue::Binary(bytes) => {
                    let text = String::from_utf8_lossy(bytes);
                    match types::render(kind, &text) {
                        Ok(json) => json,
                        Err(stale) if strict => return Ok(Err(stale)),
                        Err(stale) => types::stale_text(
                            &stale,
                            &text,
                            &self.relation.qualified_name(),
                            &column.name,
                        ),
                    }
                }
            };
            row.insert(column.name.clone(), json);
        }
        Ok(Ok(row))
    }
}

/// The value of an unchanged TOAST column `column`, from the old row when
/// the server sent a full one; `None` when only the placeholder is left.
fn from_old_row(column: &str, fallback: Option<&Row>) -> Option<Value> {
    fallback.and_then(|old| old.get(column).cloned())
}

/// The relations known on this replication connection, by OID.
pub struct Relations {
    by_oid: HashMap<u32, TrackedRelation>,
    types: TypeCatalog,
    unchanged_toast: UnchangedToastReport,
}

impl Relations {
    /// No relations yet, on the database configured as `database` (the
    /// name its placeholder reports carry).
    pub fn new(database: &str) -> Self {
        Relations {
            by_oid: HashMap::new(),
            types: TypeCatalog::default(),
            unchanged_toast: UnchangedToastReport::new(database),
        }
    }

    /// The relation with this OID, if a Relation message described it.
    pub fn get(&self, oid: u32) -> Option<&TrackedRelation> {
        self.by_oid.get(&oid)
    }

    /// Records a Relation message, replacing what was known about `oid`,
    /// and resolves its primary key (see the module docs) and column types.
    pub async fn apply(
        &mut self,
        client: &tokio_postgres::Client,
        oid: u32,
        schema: String,
        name: String,
        replica_identity: u8,
        columns: Vec<RelationColumn>,
    ) -> Result<&TrackedRelation, SourceError> {
        let catalog_key = primary_key(client, oid).await?;
        let primary_key = resolve_primary_key(catalog_key, &columns, replica_identity);
        let type_oids: Vec<u32> = columns.iter().map(|c| c.type_oid).collect();
        let kinds = self.types.resolve(client, &type_oids).await?;
        let relation = Relation {
            oid,
            schema,
            name,
            columns: columns
                .into_iter()
                .map(|c| Column {
                    name: c.name,
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                    is_identity_key: c.is_key,
                })
                .collect(),
            primary_key,
        };
        self.unchanged_toast.identity(&relation, replica_identity);
        let tracked = TrackedRelation {
            relation: Arc::new(relation),
            kinds,
        };
        self.by_oid.insert(oid, tracked);
        Ok(&self.by_oid[&oid])
    }

    /// Renders a tuple of relation `oid` as a row (see
    /// [`TrackedRelation::row`]) and reports the unchanged TOAST values it
    /// shows as placeholders. When a composite value does not fit its
    /// type's known definition (the type was altered; pgoutput does not say
    /// so), the relation's column types are read again and the tuple is
    /// rendered with them.
    pub async fn row(
        &mut self,
        client: &tokio_postgres::Client,
        oid: u32,
        tuple: &Tuple,
        fallback: Option<&Row>,
    ) -> Result<Row, SourceError> {
        let row = self.render(client, oid, tuple, fallback).await?;
        let tracked = &self.by_oid[&oid];
        let placeholders: Vec<&str> = tracked
            .relation
            .columns
            .iter()
            .zip(tuple)
            .filter(|(column, value)| {
                matches!(value, TupleValue::UnchangedToast)
                    && from_old_row(&column.name, fallback).is_none()
            })
            .map(|(column, _)| column.name.as_str())
            .collect();
        if !placeholders.is_empty() {
            self.unchanged_toast
                .placeholders(&tracked.relation, &placeholders);
        }
        Ok(row)
    }

    async fn render(
        &mut self,
        client: &tokio_postgres::Client,
        oid: u32,
        tuple: &Tuple,
        fallback: Option<&Row>,
    ) -> Result<Row, SourceError> {
        let tracked = self.by_oid.get(&oid).ok_or_else(|| {
            SourceError::Protocol(format!(
                "a change for relation {oid} came before its Relation message"
            ))
        })?;
        let stale = match tracked.render_row(tuple, fallback, true)? {
            Ok(row) => return Ok(row),
            Err(stale) => stale,
        };
        if !self.types.should_refresh(stale) {
            return tracked.row(tuple, fallback);
        }
        let type_oids: Vec<u32> = tracked
            .relation
            .columns
            .iter()
            .map(|c| c.type_oid)
            .collect();
        let kinds = self.types.resolve(client, &type_oids).await?;
        let tracked = self.by_oid.get_mut(&oid).expect("looked up above");
        tracked.kinds = kinds;
        match tracked.render_row(tuple, fallback, true)? {
            Ok(row) => Ok(row),
            Err(still) => {
                self.types.unexplained(still);
                tracked.row(tuple, fallback)
            }
        }
    }
}

/// The primary key of a relation as of its Relation message: see the
/// module docs. `replica_identity` is the message's `d`, `f`, `i` or `n`.
pub fn resolve_primary_key(
    catalog: Vec<String>,
    columns: &[RelationColumn],
    replica_identity: u8,
) -> Vec<String> {
    let has = |name: &String| columns.iter().any(|c| &c.name == name);
    if replica_identity != b'd' {
        return catalog.into_iter().filter(has).collect();
    }
    let flagged: Vec<String> = columns
        .iter()
        .filter(|c| c.is_key)
        .map(|c| c.name.clone())
        .collect();
    let same_set =
        catalog.len() == flagged.len() && catalog.iter().all(|name| flagged.contains(name));
    if same_set { catalog } else { flagged }
}

async fn primary_key(
    client: &tokio_postgres::Client,
    oid: u32,
) -> Result<Vec<String>, SourceError> {
    let rows = client
        .query(
            "SELECT a.attname::text \
             FROM pg_catalog.pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1 AND i.indisprimary \
             ORDER BY k.ord",
            &[&oid],
        )
        .await
        .map_err(|e| PgError::Query {
            context: format!("looking up the primary key of relation {oid}"),
            source: e,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(spec: &[(&str, bool)]) -> Vec<RelationColumn> {
        spec.iter()
            .map(|(name, is_key)| RelationColumn {
                is_key: *is_key,
                name: name.to_string(),
                type_oid: 23,
                type_modifier: -1,
            })
            .collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_message_decides_the_key_columns_and_the_catalog_their_order() {
        let cols = columns(&[("id", true), ("code", true), ("v", false)]);
        // The catalog agrees: its order (code, id) wins over table order.
        assert_eq!(
            resolve_primary_key(names(&["code", "id"]), &cols, b'd'),
            names(&["code", "id"])
        );
        // The key changed (or the table was dropped) since this change.
        assert_eq!(
            resolve_primary_key(names(&["uid"]), &cols, b'd'),
            names(&["id", "code"])
        );
        assert_eq!(
            resolve_primary_key(vec![], &cols, b'd'),
            names(&["id", "code"])
        );
        // No key at the time of the change.
        let none = columns(&[("id", false), ("v", false)]);
        assert!(resolve_primary_key(names(&["id"]), &none, b'd').is_empty());
        // FULL flags every column: the catalog's key, limited to known columns.
        let full = columns(&[("id", true), ("v", true)]);
        assert_eq!(
            resolve_primary_key(names(&["id"]), &full, b'f'),
            names(&["id"])
        );
        assert!(resolve_primary_key(names(&["renamed"]), &full, b'f').is_empty());
    }
}
