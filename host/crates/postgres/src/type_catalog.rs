//! Resolving column types that are not built in (domains, enums, arrays of
//! them, composites, ranges, user-defined base types) from the catalog.
//!
//! One recursive query reads every type reachable from a relation's columns
//! (domain → base type, array → element type, composite → attribute types)
//! from `pg_type` and `pg_attribute`; the kinds are then built in memory.
//!
//! Definitions are read afresh for each Relation message rather than cached
//! across them: pgoutput sends a Relation message (preceded by Type messages
//! for user types) on every new connection and after every change to the
//! table, and never announces `ALTER TYPE … ADD/DROP ATTRIBUTE` on a
//! composite type at all, so a long-lived cache could only be wrong. Between
//! Relation messages the kinds live in the relation (`relation.rs`), and a
//! composite value whose field count does not fit its known definition
//! ([`StaleComposite`]) triggers one more read.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::PgError;
use super::types::{
    ArrayType, CompositeField, CompositeType, StaleComposite, TypeKind, builtin_kind,
};

/// Reads type definitions from the catalog; see the module docs.
#[derive(Debug, Default)]
pub struct TypeCatalog {
    /// Stale composite shapes that a fresh catalog read did not explain
    /// (values written under an older definition): not worth another read.
    /// A later change of the type changes the known field count, hence the
    /// shape, so this never hides a newer definition.
    unexplained: HashSet<StaleComposite>,
}

/// The `pg_type` facts one type's rendering depends on.
#[derive(Debug, Clone)]
struct CatalogType {
    typtype: u8,
    base: u32,
    element: u32,
    element_delimiter: char,
    attributes: Vec<(String, u32)>,
    /// `schema.type` and the function of a cast to jsonb (else json) that
    /// `to_jsonb()` would call, for user types that have one.
    json_cast: Option<(String, String)>,
}

/// Nesting deeper than this (impossible in a sane catalog) renders as text.
const MAX_DEPTH: usize = 64;

const CLOSURE_QUERY: &str = "
WITH RECURSIVE closure(oid) AS (
    SELECT unnest($1::pg_catalog.oid[])
  UNION
    SELECT dep.oid
    FROM closure c
    JOIN pg_catalog.pg_type t ON t.oid = c.oid
    CROSS JOIN LATERAL (
        SELECT t.typbasetype WHERE t.typtype = 'd'
        UNION ALL
        SELECT t.typelem WHERE t.typelem <> 0 AND t.typlen = -1
        UNION ALL
        SELECT a.atttypid FROM pg_catalog.pg_attribute a
        WHERE t.typtype = 'c' AND a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
    ) AS dep(oid)
)
SELECT t.oid,
       t.typtype::text,
       t.typbasetype,
       CASE WHEN t.typelem <> 0 AND t.typlen = -1 THEN t.typelem ELSE 0 END,
       coalesce((SELECT e.typdelim::text FROM pg_catalog.pg_type e WHERE e.oid = t.typelem), ','),
       ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
             WHERE t.typtype = 'c' AND a.attrelid = t.typrelid AND a.attnum > 0
               AND NOT a.attisdropped ORDER BY a.attnum),
       ARRAY(SELECT a.atttypid FROM pg_catalog.pg_attribute a
             WHERE t.typtype = 'c' AND a.attrelid = t.typrelid AND a.attnum > 0
               AND NOT a.attisdropped ORDER BY a.attnum),
       t.typnamespace::pg_catalog.regnamespace::text || '.' || t.typname::text,
       (SELECT p.proname::text
        FROM pg_catalog.pg_cast k JOIN pg_catalog.pg_proc p ON p.oid = k.castfunc
        WHERE k.castsource = t.oid AND t.oid >= 16384 AND k.castmethod = 'f'
          AND k.casttarget IN ('pg_catalog.jsonb'::pg_catalog.regtype, 'pg_catalog.json'::pg_catalog.regtype)
        ORDER BY k.casttarget = 'pg_catalog.jsonb'::pg_catalog.regtype DESC LIMIT 1)
FROM closure c
JOIN pg_catalog.pg_type t ON t.oid = c.oid";

impl TypeCatalog {
    /// The rendering of each type in `oids` (aligned with it), reading the
    /// current definitions of the non-built-in ones from the catalog. Types
    /// the catalog no longer knows render as text.
    pub async fn resolve(
        &mut self,
        client: &tokio_postgres::Client,
        oids: &[u32],
    ) -> Result<Vec<TypeKind>, PgError> {
        let unknown: Vec<u32> = oids
            .iter()
            .copied()
            .filter(|&oid| builtin_kind(oid).is_none())
            .collect();
        let rows = if unknown.is_empty() {
            HashMap::new()
        } else {
            load(client, &unknown).await?
        };
        let mut built = HashMap::new();
        Ok(oids
            .iter()
            .map(|&oid| kind(oid, &rows, &mut built, 0))
            .collect())
    }

    /// Whether `stale` is worth re-reading the catalog for: not when a read
    /// already failed to explain this shape (value fields, known fields).
    pub fn should_refresh(&mut self, stale: StaleComposite) -> bool {
        !self.unexplained.contains(&stale)
    }

    /// Records that a fresh read did not explain `stale`.
    pub fn unexplained(&mut self, stale: StaleComposite) {
        self.unexplained.insert(stale);
    }
}

async fn load(
    client: &tokio_postgres::Client,
    oids: &[u32],
) -> Result<HashMap<u32, CatalogType>, PgError> {
    let rows = client
        .query(CLOSURE_QUERY, &[&oids])
        .await
        .map_err(|e| PgError::Query {
            context: format!("reading the definitions of column types {oids:?} from pg_type"),
            source: e,
        })?;
    let first_char = |s: String| s.chars().next().unwrap_or(',');
    Ok(rows
        .into_iter()
        .map(|row| {
            let names: Vec<String> = row.get(5);
            let types: Vec<u32> = row.get(6);
            let typtype: String = row.get(1);
            let name: String = row.get(7);
            let cast: Option<String> = row.get(8);
            (
                row.get::<_, u32>(0),
                CatalogType {
                    typtype: typtype.bytes().next().unwrap_or(b'b'),
                    base: row.get(2),
                    element: row.get(3),
                    element_delimiter: first_char(row.get(4)),
                    attributes: names.into_iter().zip(types).collect(),
                    json_cast: cast.map(|function| (name, function)),
                },
            )
        })
        .collect())
}

/// How `oid` renders, given the catalog rows of its closure. `built`
/// memoises kinds already built in this resolution.
fn kind(
    oid: u32,
    rows: &HashMap<u32, CatalogType>,
    built: &mut HashMap<u32, TypeKind>,
    depth: usize,
) -> TypeKind {
    if let Some(kind) = builtin_kind(oid) {
        return kind;
    }
    if let Some(kind) = built.get(&oid) {
        return kind.clone();
    }
    let Some(row) = rows.get(&oid).filter(|_| depth < MAX_DEPTH) else {
        return TypeKind::Text;
    };
    let kind = match row.typtype {
        // Domains render as their base type (to_jsonb looks through them).
        b'd' if row.base != 0 => kind(row.base, rows, built, depth + 1),
        _ if row.element != 0 => TypeKind::Array(Arc::new(ArrayType {
            element: kind(row.element, rows, built, depth + 1),
            delimiter: row.element_delimiter,
        })),
        b'c' => TypeKind::Composite(Arc::new(CompositeType::new(
            oid,
            row.attributes
                .iter()
                .map(|(name, type_oid)| CompositeField {
                    name: name.clone(),
                    kind: kind(*type_oid, rows, built, depth + 1),
                })
                .collect(),
        ))),
        // to_jsonb() renders user types with a cast to jsonb/json through
        // that cast. hstore's is known; other functions weft cannot run.
        _ => match &row.json_cast {
            Some((_, function))
                if function == "hstore_to_jsonb" || function == "hstore_to_json" =>
            {
                TypeKind::Hstore
            }
            Some((name, function)) => {
                tracing::warn!(r#type = %name, cast = %function,
                    "to_jsonb() renders this type through its cast to json, which weft cannot run; \
                     weft delivers the type's text form");
                TypeKind::Text
            }
            // Enums, ranges, multiranges and base types: their text.
            None => TypeKind::Text,
        },
    };
    built.insert(oid, kind.clone());
    kind
}
