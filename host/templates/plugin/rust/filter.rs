//! {{name}}: a weft filter. It keeps every change but deletes; change
//! `filter` to decide what the sink receives.

use weft_sdk_guest::{Action, Change, Config, Error, Filter, export_filter};

struct Plugin;

impl Filter for Plugin {
    /// Called once per instance with the function's `config` from the
    /// weft config; return `Err` to refuse it.
    fn init(_config: Config) -> Result<Self, String> {
        Ok(Plugin)
    }

    /// `true` keeps the change, `false` drops it; `Err` dead-letters it
    /// (permanent) or retries it later (transient).
    fn filter(&mut self, change: Change) -> Result<bool, Error> {
        // Read columns with e.g. `change.get::<i64>("id")?` or
        // `change.get_str("status")?`.
        Ok(change.action() != Action::Delete)
    }
}

export_filter!(Plugin);
