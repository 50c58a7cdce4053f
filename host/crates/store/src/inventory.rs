//! What weft ran with: each config it was started with (its YAML as
//! written, before `${VAR}` interpolation, so secrets passed through the
//! environment stay out of the store) and each function's component (file,
//! kind, SHA-256). An operator can see with `sqlite3` which config and
//! which plugin build produced the messages in the store. Also which sinks
//! are paused (see `weft_sinks::pause`).

use rusqlite::{OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::{Store, StoreError, now_ms};

/// A function's component as weft loaded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRecord {
    /// The function's name in the config.
    pub function: String,
    /// `transform`, `filter`, `routing` or `enrichment`.
    pub kind: String,
    /// The component file.
    pub file: String,
    /// SHA-256 of the component's bytes, hex.
    pub sha256: String,
    /// The component's size in bytes.
    pub bytes: u64,
}

impl PluginRecord {
    /// The record of the component bytes `component` loaded from `file`.
    pub fn of(function: &str, kind: &str, file: &str, component: &[u8]) -> PluginRecord {
        PluginRecord {
            function: function.to_string(),
            kind: kind.to_string(),
            file: file.to_string(),
            sha256: hex::encode(Sha256::digest(component)),
            bytes: component.len() as u64,
        }
    }
}

impl Store {
    /// Records that weft starts with the config `yaml` (as written);
    /// returns false when it is the same as the last one recorded.
    pub fn record_config(&self, yaml: &str) -> Result<bool, StoreError> {
        let sha256 = hex::encode(Sha256::digest(yaml.as_bytes()));
        let conn = self.lock();
        let last: Option<String> = conn
            .prepare_cached("SELECT sha256 FROM configs ORDER BY id DESC LIMIT 1")?
            .query_row([], |row| row.get(0))
            .optional()?;
        if last.as_deref() == Some(sha256.as_str()) {
            return Ok(false);
        }
        conn.prepare_cached("INSERT INTO configs (sha256, yaml, started_at) VALUES (?1, ?2, ?3)")?
            .execute(params![sha256, yaml, now_ms()])?;
        Ok(true)
    }

    /// Records that `plugin` was loaded now; its `first_loaded_at` stays
    /// while its bytes stay the same.
    pub fn record_plugin(&self, plugin: &PluginRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.prepare_cached(
            "INSERT INTO plugins (function, kind, file, sha256, bytes, first_loaded_at, loaded_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
             ON CONFLICT (function) DO UPDATE SET
                 kind = excluded.kind, file = excluded.file, bytes = excluded.bytes,
                 first_loaded_at = CASE WHEN sha256 = excluded.sha256 THEN first_loaded_at
                                        ELSE excluded.first_loaded_at END,
                 sha256 = excluded.sha256, loaded_at = excluded.loaded_at",
        )?
        .execute(params![
            plugin.function,
            plugin.kind,
            plugin.file,
            plugin.sha256,
            plugin.bytes as i64,
            now_ms()
        ])?;
        Ok(())
    }

    /// The plugins recorded, by function name.
    pub fn plugins(&self) -> Result<Vec<PluginRecord>, StoreError> {
        let conn = self.lock();
        let rows = conn
            .prepare_cached(
                "SELECT function, kind, file, sha256, bytes FROM plugins ORDER BY function",
            )?
            .query_map([], |row| {
                Ok(PluginRecord {
                    function: row.get(0)?,
                    kind: row.get(1)?,
                    file: row.get(2)?,
                    sha256: row.get(3)?,
                    bytes: row.get::<_, i64>(4)? as u64,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }
}

impl Store {
    /// Records that `sink` is paused (`true`) or not.
    pub fn set_paused(&self, sink: &str, paused: bool) -> Result<(), StoreError> {
        let conn = self.lock();
        if paused {
            conn.prepare_cached(
                "INSERT INTO sink_pauses (sink, paused_at) VALUES (?1, ?2) ON CONFLICT (sink) DO NOTHING",
            )?
            .execute(params![sink, now_ms()])?;
        } else {
            conn.prepare_cached("DELETE FROM sink_pauses WHERE sink = ?1")?
                .execute(params![sink])?;
        }
        Ok(())
    }

    /// Whether `sink` was paused.
    pub fn is_paused(&self, sink: &str) -> Result<bool, StoreError> {
        let conn = self.lock();
        let found: Option<i64> = conn
            .prepare_cached("SELECT paused_at FROM sink_pauses WHERE sink = ?1")?
            .query_row(params![sink], |row| row.get(0))
            .optional()?;
        Ok(found.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_recorded_when_they_change_and_plugins_by_function() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        assert!(store.record_config("a: 1\n").unwrap());
        assert!(!store.record_config("a: 1\n").unwrap(), "same config");
        assert!(store.record_config("a: 2\n").unwrap());
        assert!(store.record_config("a: 1\n").unwrap(), "back to the first");

        let v1 = PluginRecord::of("upcase", "transform", "/p/up.wasm", b"v1");
        store.record_plugin(&v1).unwrap();
        let v2 = PluginRecord::of("upcase", "transform", "/p/up.wasm", b"v2");
        store.record_plugin(&v2).unwrap();
        assert_eq!(store.plugins().unwrap(), vec![v2.clone()]);
        assert_eq!(
            v2.sha256,
            "fb04dcb6970e4c3d1873de51fd5a50d7bb46b3383113602665c350ec40b5f990"
        );
        assert_eq!(v2.bytes, 2);
    }
}
