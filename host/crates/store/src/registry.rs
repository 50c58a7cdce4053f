//! The plugin registry's records: one row per uploaded `name@version`,
//! naming its component by SHA-256 (see `weft_wasm::registry`).

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::{Store, StoreError, now_ms};

/// A registered plugin version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegisteredPlugin {
    /// The account that uploaded it; empty for the operator's.
    pub account: String,
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The function kind (world) it implements.
    pub kind: String,
    /// SHA-256 of the component's bytes, hex: its file's name in the
    /// registry directory.
    pub sha256: String,
    /// The component's size in bytes.
    pub bytes: u64,
    /// The capability imports it declares (full WIT names).
    pub imports: Vec<String>,
    /// When it was registered, ms since the Unix epoch.
    pub registered_at: i64,
}

/// What registering a version did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// It is new.
    Created(RegisteredPlugin),
    /// The same name, version, kind and bytes were registered already.
    Unchanged(RegisteredPlugin),
    /// The name and version are registered with other bytes or another
    /// kind: versions are immutable.
    Conflict(RegisteredPlugin),
}

const COLUMNS: &str = "name, version, kind, sha256, bytes, imports, registered_at, account";

fn read_row(row: &Row<'_>) -> rusqlite::Result<RegisteredPlugin> {
    let imports: String = row.get(5)?;
    Ok(RegisteredPlugin {
        name: row.get(0)?,
        version: row.get(1)?,
        kind: row.get(2)?,
        sha256: row.get(3)?,
        bytes: row.get::<_, i64>(4)? as u64,
        imports: serde_json::from_str(&imports).unwrap_or_default(),
        registered_at: row.get(6)?,
        account: row.get(7)?,
    })
}

impl Store {
    /// Registers `plugin` (its `registered_at` is set now) unless its name
    /// and version exist.
    pub fn register_plugin(&self, plugin: &RegisteredPlugin) -> Result<Registration, StoreError> {
        let conn = self.lock();
        let existing = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM registered_plugins WHERE account = ?1 AND name = ?2 AND version = ?3"
            ))?
            .query_row(params![plugin.account, plugin.name, plugin.version], read_row)
            .optional()?;
        if let Some(existing) = existing {
            return Ok(
                if existing.sha256 == plugin.sha256 && existing.kind == plugin.kind {
                    Registration::Unchanged(existing)
                } else {
                    Registration::Conflict(existing)
                },
            );
        }
        let mut created = plugin.clone();
        created.registered_at = now_ms();
        conn.prepare_cached(&format!(
            "INSERT INTO registered_plugins ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
        ))?
        .execute(params![
            created.name,
            created.version,
            created.kind,
            created.sha256,
            created.bytes as i64,
            serde_json::to_string(&created.imports).expect("a list of strings serializes"),
            created.registered_at,
            created.account,
        ])?;
        Ok(Registration::Created(created))
    }

    /// Every version `account` registered (`None`: every account's), by
    /// name then registration order.
    pub fn registered_plugins(
        &self,
        account: Option<&str>,
    ) -> Result<Vec<RegisteredPlugin>, StoreError> {
        let conn = self.lock();
        let rows = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM registered_plugins WHERE ?1 IS NULL OR account = ?1
                 ORDER BY account, name, registered_at, version"
            ))?
            .query_map(params![account], read_row)?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// The version `name@version` of `account`, if registered.
    pub fn registered_plugin(
        &self,
        account: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<RegisteredPlugin>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM registered_plugins WHERE account = ?1 AND name = ?2 AND version = ?3"
            ))?
            .query_row(params![account, name, version], read_row)
            .optional()?)
    }

    /// Removes `account`'s `name@version`; answers whether another version
    /// (of any account) still has the same component bytes (so the file
    /// must stay).
    pub fn unregister_plugin(
        &self,
        account: &str,
        name: &str,
        version: &str,
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        let sha256: Option<String> = conn
            .prepare_cached(
                "DELETE FROM registered_plugins WHERE account = ?1 AND name = ?2 AND version = ?3 RETURNING sha256",
            )?
            .query_row(params![account, name, version], |row| row.get(0))
            .optional()?;
        let Some(sha256) = sha256 else {
            return Ok(false);
        };
        let shared: i64 = conn
            .prepare_cached("SELECT count(*) FROM registered_plugins WHERE sha256 = ?1")?
            .query_row(params![sha256], |row| row.get(0))?;
        Ok(shared > 0)
    }
}
