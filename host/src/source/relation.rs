//! The relations the stream has described, and turning tuples into rows.
//!
//! pgoutput sends a Relation message before a table's first change on a
//! connection and again after its schema changes. Each one becomes a new
//! `Arc<Relation>`, so changes keep the schema they were decoded under.
//! Primary keys are not in the message; they come from the catalog
//! (`pg_index.indisprimary`), looked up once per Relation message, i.e. once
//! per schema version. Non-builtin column types (domains, arrays of them,
//! enums) are resolved through `pg_type` once per type.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::SourceError;
use super::pgoutput::{RelationColumn, Tuple, TupleValue};
use super::types::{self, CatalogType, TypeKind};
use crate::change::{Column, Relation, Row};

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
    /// as `"unchanged_toast"`.
    pub fn row(&self, tuple: &Tuple, fallback: Option<&Row>) -> Result<Row, SourceError> {
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
                TupleValue::UnchangedToast => fallback
                    .and_then(|old| old.get(&column.name).cloned())
                    .unwrap_or_else(|| Value::String(UNCHANGED_TOAST.into())),
                TupleValue::Text(bytes) | TupleValue::Binary(bytes) => {
                    types::render(*kind, &String::from_utf8_lossy(bytes))
                }
            };
            row.insert(column.name.clone(), json);
        }
        Ok(row)
    }
}

/// The relations known on this replication connection, by OID.
#[derive(Default)]
pub struct Relations {
    by_oid: HashMap<u32, TrackedRelation>,
    type_kinds: HashMap<u32, TypeKind>,
}

impl Relations {
    /// The relation with this OID, if a Relation message described it.
    pub fn get(&self, oid: u32) -> Option<&TrackedRelation> {
        self.by_oid.get(&oid)
    }

    /// Records a Relation message, looking up its primary key and column
    /// types in the catalog.
    pub async fn apply(
        &mut self,
        client: &tokio_postgres::Client,
        oid: u32,
        schema: String,
        name: String,
        columns: Vec<RelationColumn>,
    ) -> Result<&TrackedRelation, SourceError> {
        let primary_key = primary_key(client, oid).await?;
        let mut kinds = Vec::with_capacity(columns.len());
        for column in &columns {
            kinds.push(self.kind(client, column.type_oid).await?);
        }
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
        let tracked = TrackedRelation {
            relation: Arc::new(relation),
            kinds,
        };
        self.by_oid.insert(oid, tracked);
        Ok(&self.by_oid[&oid])
    }

    async fn kind(
        &mut self,
        client: &tokio_postgres::Client,
        oid: u32,
    ) -> Result<TypeKind, SourceError> {
        if let Some(kind) = types::builtin_kind(oid) {
            return Ok(kind);
        }
        if let Some(kind) = self.type_kinds.get(&oid) {
            return Ok(*kind);
        }
        // Load the chain (domain → base, array → element) up front; the
        // resolution itself is synchronous.
        let mut rows: HashMap<u32, CatalogType> = HashMap::new();
        let mut pending = vec![oid];
        while let Some(next) = pending.pop() {
            if rows.contains_key(&next) || types::builtin_kind(next).is_some() || rows.len() > 16 {
                continue;
            }
            let row = client
                .query_opt(
                    "SELECT typtype::text, typbasetype, typelem, typcategory::text \
                     FROM pg_catalog.pg_type WHERE oid = $1",
                    &[&next],
                )
                .await
                .map_err(|e| SourceError::Query {
                    context: format!("looking up type {next} in pg_type"),
                    source: e,
                })?;
            let Some(row) = row else { continue };
            let first_byte = |s: String| s.bytes().next().unwrap_or(0);
            let catalog = CatalogType {
                typtype: first_byte(row.get(0)),
                base: row.get(1),
                element: row.get(2),
                category: first_byte(row.get(3)),
            };
            pending.extend(
                [catalog.base, catalog.element]
                    .into_iter()
                    .filter(|&o| o != 0),
            );
            rows.insert(next, catalog);
        }
        let kind = types::kind_from_catalog(oid, |o| rows.get(&o).copied());
        self.type_kinds.insert(oid, kind);
        Ok(kind)
    }
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
        .map_err(|e| SourceError::Query {
            context: format!("looking up the primary key of relation {oid}"),
            source: e,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
