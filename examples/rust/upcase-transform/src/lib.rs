//! A weft transform that upper-cases one string column and stamps the record.
//!
//! Config:
//! - `column` (required): the column to upper-case. Absent or null values are
//!   left alone; a non-string value is a permanent error.
//!
//! Output: the Sequin message `{record, changes, action, metadata}` with the
//! edited record, which also gains `"transformed_by": "weft-upcase"`.

use weft_sdk_guest::serde_json::Value;
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

struct Upcase {
    column: String,
}

impl Transform for Upcase {
    fn init(config: Config) -> Result<Self, String> {
        Ok(Upcase {
            column: config.require("column")?.to_string(),
        })
    }

    fn transform(&mut self, mut change: Change) -> Result<Payload, Error> {
        let record = change.record_mut()?;
        match record.get_mut(&self.column) {
            Some(Value::String(text)) => *text = text.to_uppercase(),
            None | Some(Value::Null) => {}
            Some(other) => {
                return Err(Error::permanent(format!(
                    "column `{}` is not a string: {other}",
                    self.column
                )));
            }
        }
        record.insert("transformed_by".into(), "weft-upcase".into());
        Ok(Payload::Json(change.into_message()?))
    }
}

export_transform!(Upcase);
