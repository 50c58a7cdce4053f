//! Health of weft's entities (databases, slots, sinks, plugins, backfills,
//! webhook sources), shown by
//! `GET /api/health`.
//!
//! Components report named *checks* on an entity: a warning or an error
//! with a message, or a success that clears the check. An entity's status
//! is its worst check. Like the metrics recorder, the registry is one per
//! process ([`global`]), so any module can report without plumbing; tests
//! that share a process use distinct entity names.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Utc};
use serde::Serialize;

/// The kind of thing a health entry describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    /// A configured Postgres database.
    Database,
    /// A replication slot.
    Slot,
    /// A sink.
    Sink,
    /// A function (WASM plugin) of a sink.
    Plugin,
    /// The latest backfill of a table into a sink (`<sink>/<schema.table>`).
    Backfill,
    /// A webhook source.
    WebhookSource,
}

/// How healthy an entity or a check is; ordered from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Working.
    Healthy,
    /// Working, but something needs an operator's attention.
    Warning,
    /// Not working.
    Error,
}

/// One named check of an entity that is not healthy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// The check's id, e.g. `unchanged_toast` or `quarantined`.
    pub id: String,
    /// Warning or error.
    pub status: Status,
    /// What is wrong and what to do about it.
    pub message: String,
    /// When the check first failed (it stays while it keeps failing).
    pub since: DateTime<Utc>,
}

/// The health of one entity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntityHealth {
    /// What it is.
    pub kind: EntityKind,
    /// Its name in the config (a plugin's is `<sink>/<function>`).
    pub name: String,
    /// Its worst check's status, or healthy.
    pub status: Status,
    /// Its failing checks, by id.
    pub checks: Vec<Check>,
    /// When a component last reported this entity working.
    pub last_success_at: Option<DateTime<Utc>>,
}

#[derive(Default)]
struct Entry {
    checks: BTreeMap<String, Check>,
    last_success_at: Option<DateTime<Utc>>,
}

/// The registry of entity health. Cheap to share: use [`global`].
#[derive(Default)]
pub struct Registry {
    entries: Mutex<BTreeMap<(EntityKind, String), Entry>>,
}

impl Registry {
    fn with_entry<T>(&self, kind: EntityKind, name: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(entries.entry((kind, name.to_string())).or_default())
    }

    /// Records that check `id` of the entity fails with `status` (warning
    /// or error) and `message`. Repeating it keeps the first `since`.
    pub fn fail(&self, kind: EntityKind, name: &str, id: &str, status: Status, message: String) {
        self.with_entry(kind, name, |entry| {
            let since = entry.checks.get(id).map_or_else(Utc::now, |c| c.since);
            entry.checks.insert(
                id.to_string(),
                Check {
                    id: id.to_string(),
                    status,
                    message,
                    since,
                },
            );
        });
    }

    /// Clears check `id` of the entity: it passes again.
    pub fn clear(&self, kind: EntityKind, name: &str, id: &str) {
        self.with_entry(kind, name, |entry| {
            entry.checks.remove(id);
        });
    }

    /// Records that the entity just worked (e.g. a delivery succeeded).
    pub fn succeeded(&self, kind: EntityKind, name: &str) {
        self.with_entry(kind, name, |entry| entry.last_success_at = Some(Utc::now()));
    }

    /// Every known entity's health, by kind and name.
    pub fn snapshot(&self) -> Vec<EntityHealth> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries
            .iter()
            .map(|((kind, name), entry)| EntityHealth {
                kind: *kind,
                name: name.clone(),
                status: entry
                    .checks
                    .values()
                    .map(|c| c.status)
                    .max()
                    .unwrap_or(Status::Healthy),
                checks: entry.checks.values().cloned().collect(),
                last_success_at: entry.last_success_at,
            })
            .collect()
    }

    /// The current checks of one entity.
    pub fn checks(&self, kind: EntityKind, name: &str) -> Vec<Check> {
        self.with_entry(kind, name, |entry| entry.checks.values().cloned().collect())
    }

    /// Forgets the entity `name` of `kind` (one removed while weft runs).
    pub fn forget(&self, kind: EntityKind, name: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&(kind, name.to_string()));
    }

    /// Forgets the sink `sink` and, with it, its plugins and backfills
    /// (a sink deleted while weft runs); with `plugins_only`, only its
    /// plugins (a sink updated, whose functions may have changed).
    pub fn forget_sink(&self, sink: &str, plugins_only: bool) {
        let owned = |name: &str| {
            name.strip_prefix(sink)
                .is_some_and(|rest| rest.starts_with('/'))
        };
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|(kind, name), _| match kind {
                EntityKind::Plugin => !owned(name),
                EntityKind::Sink => plugins_only || name != sink,
                EntityKind::Backfill => plugins_only || !owned(name),
                EntityKind::Database | EntityKind::Slot | EntityKind::WebhookSource => true,
            });
    }

    /// Forgets every entity: a run of the server (also one restarted by an
    /// applied config, which may have removed sinks) starts from nothing.
    pub fn reset(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}

/// The process's registry.
pub fn global() -> &'static Registry {
    static GLOBAL: OnceLock<Registry> = OnceLock::new();
    GLOBAL.get_or_init(Registry::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_a_sink_forgets_what_it_owns_and_nothing_else() {
        let registry = Registry::default();
        for (kind, name) in [
            (EntityKind::Sink, "s"),
            (EntityKind::Sink, "s2"),
            (EntityKind::Plugin, "s/f"),
            (EntityKind::Plugin, "s2/f"),
            (EntityKind::Backfill, "s/public.t"),
            (EntityKind::Database, "s"),
        ] {
            registry.succeeded(kind, name);
        }
        let names = |registry: &Registry| {
            registry
                .snapshot()
                .into_iter()
                .map(|e| format!("{:?}:{}", e.kind, e.name))
                .collect::<Vec<_>>()
        };
        registry.forget_sink("s", true);
        assert_eq!(
            names(&registry),
            [
                "Database:s",
                "Sink:s",
                "Sink:s2",
                "Plugin:s2/f",
                "Backfill:s/public.t"
            ]
        );
        registry.forget_sink("s", false);
        assert_eq!(names(&registry), ["Database:s", "Sink:s2", "Plugin:s2/f"]);
        registry.forget(EntityKind::Database, "s");
        assert_eq!(names(&registry), ["Sink:s2", "Plugin:s2/f"]);
    }

    #[test]
    fn the_worst_check_sets_the_status_and_clearing_restores_it() {
        let registry = Registry::default();
        registry.fail(EntityKind::Sink, "s", "a", Status::Warning, "look".into());
        let first_since = registry.checks(EntityKind::Sink, "s")[0].since;
        registry.fail(EntityKind::Sink, "s", "b", Status::Error, "broken".into());
        registry.fail(EntityKind::Sink, "s", "a", Status::Warning, "still".into());
        let health = registry.snapshot();
        assert_eq!(health.len(), 1);
        assert_eq!(health[0].status, Status::Error);
        assert_eq!(health[0].checks[0].message, "still");
        assert_eq!(health[0].checks[0].since, first_since, "since is kept");
        registry.clear(EntityKind::Sink, "s", "b");
        assert_eq!(registry.snapshot()[0].status, Status::Warning);
        registry.clear(EntityKind::Sink, "s", "a");
        registry.succeeded(EntityKind::Sink, "s");
        let health = registry.snapshot();
        assert_eq!(health[0].status, Status::Healthy);
        assert!(health[0].last_success_at.is_some());
    }
}
