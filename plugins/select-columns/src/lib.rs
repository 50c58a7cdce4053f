//! A weft transform that selects, renames and drops columns of `record` and
//! `changes`, or extracts a single value by path like Sequin's built-in path
//! transform. Config keys and errors: `docs/plugins.md`, "select-columns".

mod columns;

use weft_sdk_guest::serde_json::Value;
use weft_sdk_guest::{Change, Config, Error, MessagePath, Payload, Transform, export_transform};

use columns::Columns;

const KNOWN: &str = "`path`, `include`, `exclude` and `rename`";

/// What the transform does with each change.
enum SelectColumns {
    /// Emit only the value at this path (`null` when absent).
    Path(MessagePath),
    /// Emit the Sequin message with its columns edited.
    Columns(Columns),
}

impl Transform for SelectColumns {
    fn init(config: Config) -> Result<Self, String> {
        config.refuse_unknown_keys(
            |key| matches!(key, "path" | "include" | "exclude" | "rename"),
            KNOWN,
        )?;
        if let Some(path) = config.get("path") {
            if ["include", "exclude", "rename"]
                .iter()
                .any(|key| config.get(key).is_some())
            {
                return Err(
                    "`path` emits one value and cannot be combined with `include`, `exclude` or `rename`: use one or the other"
                        .into(),
                );
            }
            return MessagePath::parse(path.trim()).map(SelectColumns::Path);
        }
        Columns::from_config(&config).map(SelectColumns::Columns)
    }

    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        let mut message = change.into_message()?;
        match self {
            SelectColumns::Path(path) => Ok(Payload::Json(
                path.resolve(&message)?.cloned().unwrap_or(Value::Null),
            )),
            SelectColumns::Columns(columns) => {
                for part in ["record", "changes"] {
                    if let Some(Value::Object(row)) = message.get_mut(part) {
                        *row = columns.apply(std::mem::take(row), part)?;
                    }
                }
                Ok(Payload::Json(message))
            }
        }
    }
}

export_transform!(SelectColumns);
