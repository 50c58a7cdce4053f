//! {{name}}: a weft enrichment function. It adds
//! `{"enriched_by": "{{name}}", "columns": <number of columns>}` to each
//! change's `metadata.enrichment`; change `enrich` to add your data.
//!
//! The sandbox grants nothing by default. With `grants: {source_query:
//! true}` or `grants: {http: {allow_hosts: [...]}}` on the function in the
//! weft config, `weft_sdk_guest::enrichment::source_query` and
//! `http_fetch` can look data up (see docs/plugins.md, "Enrichment and
//! capabilities").

use weft_sdk_guest::serde_json::{Value, json};
use weft_sdk_guest::{Change, Config, Enrichment, Error, export_enrichment};

struct Plugin;

impl Enrichment for Plugin {
    /// Called once per instance with the function's `config` from the
    /// weft config; return `Err` to refuse it.
    fn init(_config: Config) -> Result<Self, String> {
        Ok(Plugin)
    }

    /// The JSON for this change's `metadata.enrichment`, or `None` for
    /// none.
    fn enrich(&mut self, change: Change) -> Result<Option<Value>, Error> {
        Ok(Some(json!({
            "enriched_by": "{{name}}",
            "columns": change.record()?.len(),
        })))
    }
}

export_enrichment!(Plugin);
