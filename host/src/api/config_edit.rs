//! Edits of the running config's text, entry by entry, for the routes that
//! change one resource (`POST /api/sinks`, `PUT /api/functions/{name}`,
//! promote, rollback...). The text is parsed, changed and written back, so
//! `${VAR}` references stay as written but YAML comments are lost; the
//! result then goes through `config apply`.

use axum::http::StatusCode;
use serde_yaml_ng::Value as Yaml;

use super::ApiError;

/// The config text `text` with its `section` list changed by `change`.
pub(super) fn edit_section(
    text: &str,
    section: &str,
    change: impl FnOnce(&mut Vec<Yaml>) -> Result<(), ApiError>,
) -> Result<String, ApiError> {
    let mut document: Yaml = if text.trim().is_empty() {
        Yaml::Mapping(Default::default())
    } else {
        serde_yaml_ng::from_str(text).map_err(|error| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the running config does not parse: {error}"),
            )
        })?
    };
    let fields = document.as_mapping_mut().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the running config is not a mapping",
        )
    })?;
    let list = fields
        .entry(section.into())
        .or_insert_with(|| Yaml::Sequence(Vec::new()));
    if list.is_null() {
        *list = Yaml::Sequence(Vec::new());
    }
    let entries = list.as_sequence_mut().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("`{section}` of the running config is not a list"),
        )
    })?;
    change(entries)?;
    serde_yaml_ng::to_string(&document).map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write the edited config: {error}"),
        )
    })
}

/// The index of the entry named `name` in `entries`.
pub(super) fn position(entries: &[Yaml], name: &str) -> Option<usize> {
    entries
        .iter()
        .position(|entry| entry.get("name").and_then(Yaml::as_str) == Some(name))
}

/// The config text `text` with the `section` entry `name` changed by
/// `change`; 404 when there is none.
pub(super) fn edit_entry(
    text: &str,
    section: &str,
    name: &str,
    change: impl FnOnce(&mut Yaml),
) -> Result<String, ApiError> {
    edit_section(text, section, |entries| {
        let at = position(entries, name)
            .filter(|at| entries[*at].is_mapping())
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no entry named {name:?} in `{section}` of the running config"),
                )
            })?;
        change(&mut entries[at]);
        Ok(())
    })
}
