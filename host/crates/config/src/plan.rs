//! `config plan`: what applying a proposed config would change, resource by
//! resource (created, updated, deleted), compared by name within each
//! section of the configs as written. Only names and actions are reported,
//! so a plan never shows a secret, though a changed secret counts as an
//! update.

use serde::Serialize;
use serde_yaml_ng::Value;

/// The sections compared, with the resource type each entry is.
const SECTIONS: &[(&str, &str)] = &[
    ("databases", "postgres_database"),
    ("functions", "function"),
    ("http_endpoints", "http_endpoint"),
    ("webhook_sources", "webhook_source"),
    ("sinks", "sink"),
    ("change_retentions", "change_retention"),
    ("api_tokens", "api_token"),
    ("accounts", "account"),
];

/// What happens to one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanAction {
    /// It is new.
    Create,
    /// It exists and differs.
    Update,
    /// It goes away.
    Delete,
}

/// One resource's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedChange {
    /// `postgres_database`, `sink`, `function`, ...
    pub resource_type: &'static str,
    /// The entry's `name`.
    pub name: String,
    /// What happens to it.
    pub action: PlanAction,
}

/// Why two configs could not be compared: one of them does not read as a
/// YAML document; it says which and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// The changes from config text `current` to `proposed` (both as written):
/// per section, deletions in the current order, then creations and updates
/// in the proposed order.
pub fn plan(current: &str, proposed: &str) -> Result<Vec<PlannedChange>, PlanError> {
    changes(current, proposed).map_err(PlanError)
}

fn changes(current: &str, proposed: &str) -> Result<Vec<PlannedChange>, String> {
    let current = document(current).map_err(|e| format!("the running config: {e}"))?;
    let proposed = document(proposed)?;
    let mut changes = Vec::new();
    for &(section, resource_type) in SECTIONS {
        let before = entries(&current, section);
        let after = entries(&proposed, section);
        for (name, _) in &before {
            if !after.iter().any(|(n, _)| n == name) {
                changes.push(PlannedChange {
                    resource_type,
                    name: name.clone(),
                    action: PlanAction::Delete,
                });
            }
        }
        for (name, entry) in &after {
            let action = match before.iter().find(|(n, _)| n == name) {
                None => PlanAction::Create,
                Some((_, old)) if old != entry => PlanAction::Update,
                Some(_) => continue,
            };
            changes.push(PlannedChange {
                resource_type,
                name: name.clone(),
                action,
            });
        }
    }
    Ok(changes)
}

fn document(text: &str) -> Result<Value, String> {
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
    Ok(value)
}

/// The named entries of `section`, in order.
fn entries<'a>(document: &'a Value, section: &str) -> Vec<(String, &'a Value)> {
    document
        .get(section)
        .and_then(Value::as_sequence)
        .map(|list| {
            list.iter()
                .filter_map(|entry| {
                    let name = entry.get("name")?.as_str()?.to_string();
                    Some((name, entry))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CURRENT: &str = "databases:\n  - {name: main, hostname: h, password: old}\n\
        sinks:\n  - {name: a, database: main}\n  - {name: b, database: main}\n";

    #[test]
    fn changes_are_named_per_resource_and_secrets_count_as_updates() {
        let proposed = "databases:\n  - {name: main, hostname: h, password: new}\n\
            sinks:\n  - {name: b, database: main}\n  - {name: c, database: main}\n";
        let changes = plan(CURRENT, proposed).unwrap();
        let listed: Vec<(&str, &str, PlanAction)> = changes
            .iter()
            .map(|c| (c.resource_type, c.name.as_str(), c.action))
            .collect();
        assert_eq!(
            listed,
            [
                ("postgres_database", "main", PlanAction::Update),
                ("sink", "a", PlanAction::Delete),
                ("sink", "c", PlanAction::Create),
            ]
        );
        let shown = serde_json::to_string(&changes).unwrap();
        assert!(
            !shown.contains("new") || !shown.contains("password"),
            "{shown}"
        );
    }

    #[test]
    fn the_same_config_differently_written_plans_nothing() {
        let reordered = "sinks:\n  - name: a\n    database: main\n  - {database: main, name: b}\n\
            databases: [{hostname: h, name: main, password: old}]\n";
        assert_eq!(plan(CURRENT, reordered).unwrap(), []);
        assert!(plan(CURRENT, "sinks: [").is_err());
    }
}
