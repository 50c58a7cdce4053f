//! Adds `{"customer_name": ...}` to each change whose row has a
//! `customer_id`, looked up in the source's `customers` table with one
//! source query per batch. A change whose customer is missing gets
//! `{"customer_name": null}`; a row without `customer_id` gets no
//! enrichment.

use std::collections::BTreeMap;

use weft_sdk_guest::enrichment::source_query;
use weft_sdk_guest::serde_json::{Value, json};
use weft_sdk_guest::{Change, Config, Enrichment, Error, export_enrichment};

struct CustomerName {
    table: String,
}

impl Enrichment for CustomerName {
    fn init(config: Config) -> Result<Self, String> {
        Ok(CustomerName {
            table: config.get("table").unwrap_or("customers").to_string(),
        })
    }

    fn enrich(&mut self, change: Change) -> Result<Option<Value>, Error> {
        let mut outcomes = self.enrich_batch(vec![change]);
        outcomes.pop().expect("one outcome")
    }

    fn enrich_batch(&mut self, batch: Vec<Change>) -> Vec<Result<Option<Value>, Error>> {
        let ids: Vec<Result<Option<i64>, Error>> =
            batch.iter().map(|c| c.get::<i64>("customer_id")).collect();
        let wanted: Vec<String> = ids
            .iter()
            .filter_map(|id| id.as_ref().ok().copied().flatten())
            .map(|id| id.to_string())
            .collect();
        let names: Result<BTreeMap<i64, Value>, Error> = if wanted.is_empty() {
            Ok(BTreeMap::new())
        } else {
            source_query(
                &format!(
                    "SELECT id, name FROM {} WHERE id = ANY($1::bigint[])",
                    self.table
                ),
                &[Some(format!("{{{}}}", wanted.join(",")))],
            )
            .map(|rows| {
                rows.into_iter()
                    .filter_map(|row| Some((row["id"].as_i64()?, row["name"].clone())))
                    .collect()
            })
        };
        ids.into_iter()
            .map(|id| match (id?, &names) {
                (None, _) => Ok(None),
                (Some(id), Ok(names)) => Ok(Some(
                    json!({"customer_name": names.get(&id).cloned().unwrap_or(Value::Null)}),
                )),
                (Some(_), Err(error)) => Err(error.clone()),
            })
            .collect()
    }
}

export_enrichment!(CustomerName);
