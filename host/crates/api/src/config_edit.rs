//! Edits of the running config's text, entry by entry, for the routes that
//! change one resource (`POST /api/sinks`, `PUT /api/functions/{name}`,
//! promote, rollback...). The text is parsed and changed; the changed list
//! is then spliced into the text entry by entry ([`super::config_splice`]),
//! so comments, `${VAR}` references and the layout of everything else stay
//! as written. Where the list's layout cannot be spliced the whole document
//! is written from its parsed form (`${VAR}` references stay, YAML
//! comments go). The result then goes through `config apply`.

use axum::http::StatusCode;
use serde_yaml_ng::Value as Yaml;

use super::ApiError;
use super::config_splice::splice_section;

/// The config text `text` with its `section` list changed by `change`.
pub(super) fn edit_section(
    text: &str,
    section: &str,
    change: impl FnOnce(&mut Vec<Yaml>) -> Result<(), ApiError>,
) -> Result<String, ApiError> {
    // An empty or comments-only file is an empty config.
    let mut document: Yaml = match serde_yaml_ng::from_str(text) {
        Ok(Yaml::Null) => Yaml::Mapping(Default::default()),
        Ok(document) => document,
        Err(error) if text.trim().is_empty() => {
            tracing::debug!(%error, "an empty config file");
            Yaml::Mapping(Default::default())
        }
        Err(error) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the running config does not parse: {error}"),
            ));
        }
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
    let before = entries.clone();
    change(entries)?;
    let after = &document[section];
    if let Some(after) = after.as_sequence()
        && let Some(spliced) = splice_section(text, section, &before, after)
        && serde_yaml_ng::from_str::<Yaml>(&spliced).ok().as_ref() == Some(&document)
    {
        return Ok(spliced);
    }
    tracing::info!(
        section,
        "the config's `{section}` list could not be edited in place; the config file is written from its parsed form, without its comments"
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn add_sink(text: &str) -> String {
        edit_section(text, "sinks", |entries| {
            entries.push(serde_yaml_ng::from_str("{name: s, table: t}").unwrap());
            Ok(())
        })
        .expect("edits")
    }

    #[test]
    fn an_empty_or_comments_only_file_is_edited_as_an_empty_config() {
        for text in ["", "\n", "# nothing yet\n"] {
            let edited = add_sink(text);
            let document: Yaml = serde_yaml_ng::from_str(&edited).unwrap();
            assert_eq!(document["sinks"][0]["name"].as_str(), Some("s"), "{edited}");
        }
        assert!(add_sink("# nothing yet\n").contains("# nothing yet"));
    }

    #[test]
    fn a_file_that_does_not_parse_is_an_error_not_an_overwrite() {
        let error = edit_section("sinks: [\n", "sinks", |_| Ok(())).unwrap_err();
        assert!(format!("{error:?}").contains("does not parse"), "{error:?}");
    }
}
