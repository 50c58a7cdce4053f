//! {{name}}: a weft transform. It turns each change into
//! `{"action": ..., "record": {...}}`; change `transform` to build the
//! payload the sink sends.

use weft_sdk_guest::serde_json::json;
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

struct Plugin;

impl Transform for Plugin {
    /// Called once per instance with the function's `config` from the
    /// weft config; return `Err` to refuse it.
    fn init(_config: Config) -> Result<Self, String> {
        Ok(Plugin)
    }

    /// The payload for one change; `Err` dead-letters it (permanent) or
    /// retries it later (transient).
    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        Ok(Payload::Json(json!({
            "action": change.action().as_str(),
            "record": change.record()?,
        })))
    }
}

export_transform!(Plugin);
