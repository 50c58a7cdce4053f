//! A weft transform that masks personal data in the listed columns of
//! `record` and `changes`: hash (HMAC-SHA256 with a salt, hex), redact (a
//! fixed replacement) or truncate (keep the first N characters). Nulls stay
//! null. Config keys and errors: `docs/plugins.md`, "pii-mask".

mod mask;

use weft_sdk_guest::serde_json::Value;
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

use mask::Masks;

struct PiiMask(Masks);

impl Transform for PiiMask {
    fn init(config: Config) -> Result<Self, String> {
        Masks::from_config(&config).map(PiiMask)
    }

    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        let mut message = change.into_message()?;
        for part in ["record", "changes"] {
            if let Some(Value::Object(row)) = message.get_mut(part) {
                self.0.apply(row, part)?;
            }
        }
        Ok(Payload::Json(message))
    }
}

export_transform!(PiiMask);
