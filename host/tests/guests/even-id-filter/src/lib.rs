//! A filter that keeps rows whose integer `id` is even; a row without an
//! integer `id` is a permanent error.

use weft_sdk_guest::{Change, Config, Error, Filter, export_filter};

struct EvenId;

impl Filter for EvenId {
    fn init(_config: Config) -> Result<Self, String> {
        Ok(EvenId)
    }

    fn filter(&mut self, change: Change) -> Result<bool, Error> {
        let id: i64 = change
            .get("id")?
            .ok_or_else(|| Error::permanent("row has no `id`"))?;
        Ok(id % 2 == 0)
    }
}

export_filter!(EvenId);
