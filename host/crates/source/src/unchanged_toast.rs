//! Reporting unchanged TOAST values that weft cannot fill in.
//!
//! When an UPDATE leaves a TOASTed (large, out-of-line) value unchanged,
//! pgoutput does not send it. Under REPLICA IDENTITY FULL the old row holds
//! it and weft fills it in; under any other identity the column shows the
//! placeholder `"unchanged_toast"` (Sequin's convention). Consumers that
//! treat the message as the row then see a wrong value, so each such value
//! counts in [`weft_core::metrics::UNCHANGED_TOAST_VALUES`] and the first one
//! of a table raises a health warning on the database, naming the fix.
//! The warning clears when a Relation message shows the table under
//! REPLICA IDENTITY FULL.

use std::collections::HashMap;

use weft_core::change::Relation;
use weft_core::health::{self, EntityKind, Status};

/// The health check id of a table's placeholders, on its database.
pub fn check_id(relation: &Relation) -> String {
    format!("unchanged_toast:{}", relation.qualified_name())
}

/// Counts and reports one database's placeholders.
#[derive(Debug, Default)]
pub struct UnchangedToastReport {
    /// The database's name in the config (metric label, health entity).
    database: String,
    /// Per table (`schema.table`): its counter; present once warned.
    tables: HashMap<String, metrics::Counter>,
}

impl UnchangedToastReport {
    /// A report for the database configured as `database`.
    pub fn new(database: &str) -> Self {
        UnchangedToastReport {
            database: database.to_string(),
            tables: HashMap::new(),
        }
    }

    /// Records that a row of `relation` showed the placeholder for
    /// `columns` (at least one).
    pub fn placeholders(&mut self, relation: &Relation, columns: &[&str]) {
        let table = relation.qualified_name();
        if let Some(counter) = self.tables.get(&table) {
            counter.increment(columns.len() as u64);
            return;
        }
        let counter = metrics::counter!(
            weft_core::metrics::UNCHANGED_TOAST_VALUES,
            "database" => self.database.clone(),
            "table" => table.clone(),
        );
        counter.increment(columns.len() as u64);
        let message = format!(
            "UPDATEs of {table} leave large (TOASTed) values unchanged (column {}), and the \
             table's replica identity is not FULL, so Postgres does not send them: their \
             messages show \"unchanged_toast\" instead of the value. Fix: ALTER TABLE {} \
             REPLICA IDENTITY FULL; (the old row then carries every value, at the cost of \
             more WAL), or have consumers keep the previous value when they see the placeholder",
            columns.join(", "),
            qualified_sql_name(relation),
        );
        tracing::warn!(database = %self.database, %table, "{message}");
        health::global().fail(
            EntityKind::Database,
            &self.database,
            &check_id(relation),
            Status::Warning,
            message,
        );
        self.tables.insert(table, counter);
    }

    /// Records a Relation message: under REPLICA IDENTITY FULL
    /// (`replica_identity` `f`) the table's placeholders are gone, and so is
    /// its warning.
    pub fn identity(&mut self, relation: &Relation, replica_identity: u8) {
        if replica_identity == b'f' {
            self.tables.remove(&relation.qualified_name());
            health::global().clear(EntityKind::Database, &self.database, &check_id(relation));
        }
    }
}

/// `schema.table` as SQL, quoting only the parts that need it.
fn qualified_sql_name(relation: &Relation) -> String {
    fn part(name: &str) -> String {
        let plain = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if plain {
            name.to_string()
        } else {
            weft_postgres::protocol::quote_ident(name)
        }
    }
    format!("{}.{}", part(&relation.schema), part(&relation.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(schema: &str, name: &str) -> Relation {
        Relation {
            oid: 1,
            schema: schema.into(),
            name: name.into(),
            columns: vec![],
            primary_key: vec![],
        }
    }

    #[test]
    fn a_table_warns_once_and_full_identity_clears_it() {
        let database = "unit_unchanged_toast";
        let docs = relation("public", "docs");
        let mut report = UnchangedToastReport::new(database);
        report.placeholders(&docs, &["body"]);
        report.placeholders(&docs, &["body", "summary"]);
        let checks = health::global().checks(EntityKind::Database, database);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].id, "unchanged_toast:public.docs");
        assert_eq!(checks[0].status, Status::Warning);
        assert!(
            checks[0]
                .message
                .contains("ALTER TABLE public.docs REPLICA IDENTITY FULL"),
            "{}",
            checks[0].message
        );
        // Another identity than FULL changes nothing.
        report.identity(&docs, b'd');
        assert_eq!(
            health::global()
                .checks(EntityKind::Database, database)
                .len(),
            1
        );
        report.identity(&docs, b'f');
        assert!(
            health::global()
                .checks(EntityKind::Database, database)
                .is_empty()
        );
    }

    #[test]
    fn the_fix_quotes_names_that_need_it() {
        assert_eq!(
            qualified_sql_name(&relation("Sales", "big docs")),
            "\"Sales\".\"big docs\""
        );
        assert_eq!(qualified_sql_name(&relation("s_1", "t2")), "s_1.t2");
    }
}
