//! A weft transform that encodes each change's record as one Avro binary
//! datum with the record schema given in config, and emits it as bytes with
//! an Avro content type. Config keys, the type mapping and errors:
//! `docs/plugins.md`, "avro-encode".

mod convert;
mod time;

use apache_avro::Schema;
use weft_sdk_guest::serde_json::Value;
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

/// The media type the Avro specification gives binary-encoded data.
const DEFAULT_CONTENT_TYPE: &str = "avro/binary";

struct AvroEncode {
    schema: Schema,
    names: convert::Names,
    content_type: String,
}

impl Transform for AvroEncode {
    fn init(config: Config) -> Result<Self, String> {
        config.refuse_unknown_keys(
            |key| matches!(key, "schema" | "content_type"),
            "`schema` and `content_type`",
        )?;
        let text = config.require("schema")?;
        let schema = Schema::parse_str(text)
            .map_err(|e| format!("`schema` is not a valid Avro schema: {e}"))?;
        if !matches!(schema, Schema::Record(_)) {
            return Err(
                "`schema` must be an Avro record (`{\"type\": \"record\", \"name\": ..., \"fields\": [...]}`) whose fields are the table's columns"
                    .into(),
            );
        }
        let content_type = config
            .get("content_type")
            .unwrap_or(DEFAULT_CONTENT_TYPE)
            .trim()
            .to_string();
        if content_type.is_empty() || content_type.contains(char::is_whitespace) {
            return Err(format!(
                "`content_type` `{content_type}` is not a media type: leave it out for `{DEFAULT_CONTENT_TYPE}`, or write e.g. `application/vnd.apache.avro`"
            ));
        }
        Ok(AvroEncode {
            names: convert::Names::of(&schema),
            schema,
            content_type,
        })
    }

    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        let record = Value::Object(change.record()?.clone());
        let value = convert::to_avro(&record, &self.schema, "record", &self.names)
            .map_err(Error::permanent)?;
        let data = apache_avro::to_avro_datum(&self.schema, value)
            .map_err(|e| Error::permanent(format!("the record does not fit the schema: {e}")))?;
        Ok(Payload::Bytes {
            content_type: self.content_type.clone(),
            data,
        })
    }
}

export_transform!(AvroEncode);
