//! Looks up every change's `id` in an HTTP API, with one request per batch:
//! `GET <url>?ids=1,2,3` (config key `url`), which answers a JSON object
//! keyed by id. Each change gets `{"http": <the object's value for its id>}`
//! (`null` when the API does not know the id); a row without `id` gets no
//! enrichment. A failed request or a non-2xx status fails every change of
//! the batch transiently, with the reason.

use weft_sdk_guest::enrichment::{HttpRequest, http_fetch};
use weft_sdk_guest::serde_json::{Value, json};
use weft_sdk_guest::{Change, Config, Enrichment, Error, export_enrichment};

struct HttpLookup {
    url: String,
}

impl HttpLookup {
    fn lookup(&self, ids: &[String]) -> Result<Value, Error> {
        let request = HttpRequest::get(format!("{}?ids={}", self.url, ids.join(",")))
            .header("accept", "application/json");
        let response = http_fetch(request)?;
        if !response.is_success() {
            return Err(Error::transient(format!(
                "lookup API answered status {}",
                response.status
            )));
        }
        response.json()
    }
}

impl Enrichment for HttpLookup {
    fn init(config: Config) -> Result<Self, String> {
        Ok(HttpLookup {
            url: config.require("url")?.to_string(),
        })
    }

    fn enrich(&mut self, change: Change) -> Result<Option<Value>, Error> {
        let mut outcomes = self.enrich_batch(vec![change]);
        outcomes.pop().expect("one outcome")
    }

    fn enrich_batch(&mut self, batch: Vec<Change>) -> Vec<Result<Option<Value>, Error>> {
        let ids: Vec<Result<Option<i64>, Error>> =
            batch.iter().map(|c| c.get::<i64>("id")).collect();
        let wanted: Vec<String> = ids
            .iter()
            .filter_map(|id| id.as_ref().ok().copied().flatten())
            .map(|id| id.to_string())
            .collect();
        let found = if wanted.is_empty() {
            Ok(Value::Null)
        } else {
            self.lookup(&wanted)
        };
        ids.into_iter()
            .map(|id| match (id?, &found) {
                (None, _) => Ok(None),
                (Some(id), Ok(found)) => Ok(Some(
                    json!({"http": found.get(id.to_string()).cloned().unwrap_or(Value::Null)}),
                )),
                (Some(_), Err(error)) => Err(error.clone()),
            })
            .collect()
    }
}

export_enrichment!(HttpLookup);
