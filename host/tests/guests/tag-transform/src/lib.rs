//! Labels each change with the `tag` of its config: the payload is
//! `{"id": <record id>, "tag": "<tag>"}`, so a test can tell which version
//! of a function processed which change.

use weft_sdk_guest::serde_json::json;
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

struct Tag {
    tag: String,
}

impl Transform for Tag {
    fn init(config: Config) -> Result<Self, String> {
        let tag = config
            .get("tag")
            .ok_or("config `tag` is required")?
            .to_string();
        Ok(Tag { tag })
    }

    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        Ok(Payload::Json(json!({
            "id": change.get::<i64>("id")?,
            "tag": self.tag,
        })))
    }
}

export_transform!(Tag);
