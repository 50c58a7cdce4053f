//! Labels each change with the `tag` of its config: the payload is
//! `{"id": <record id>, "tag": "<tag>"}`, so a test can tell which version
//! of a function processed which change. With `alter_every: N`, a change
//! whose id is a multiple of N gets `"<tag>-altered"` instead: a version
//! that changes one message in N.

use weft_sdk_guest::serde_json::json;
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

struct Tag {
    tag: String,
    alter_every: Option<i64>,
}

impl Transform for Tag {
    fn init(config: Config) -> Result<Self, String> {
        let tag = config
            .get("tag")
            .ok_or("config `tag` is required")?
            .to_string();
        let alter_every = config
            .get("alter_every")
            .map(|n| n.parse::<i64>().map_err(|e| format!("alter_every: {e}")))
            .transpose()?
            .filter(|n| *n > 0);
        Ok(Tag { tag, alter_every })
    }

    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        let id = change.get::<i64>("id")?;
        let altered = matches!((id, self.alter_every), (Some(id), Some(n)) if id % n == 0);
        let tag = if altered {
            format!("{}-altered", self.tag)
        } else {
            self.tag.clone()
        };
        Ok(Payload::Json(json!({ "id": id, "tag": tag })))
    }
}

export_transform!(Tag);
