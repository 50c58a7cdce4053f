//! A weft filter that keeps a change when its record's integer `id` is even
//! and drops it when odd. A record whose `id` is absent, null or not an
//! integer (a string, a fraction, out of the 64-bit range) is a permanent
//! error, dead-lettered with the reason `record has no integer id`.
//!
//! The same filter exists in JavaScript, Python and C under `examples/`;
//! `tests/e2e/languages.rs` checks that all four agree.

use weft_sdk_guest::{Change, Config, Error, Filter, export_filter};

/// The reason every language's filter gives for a record without an
/// integer `id`.
const NO_ID: &str = "record has no integer id";

struct EvenFilter;

impl Filter for EvenFilter {
    fn init(_config: Config) -> Result<Self, String> {
        Ok(EvenFilter)
    }

    fn filter(&mut self, change: Change) -> Result<bool, Error> {
        let id = change
            .record()?
            .get("id")
            .and_then(|value| value.as_i64())
            .ok_or_else(|| Error::permanent(NO_ID))?;
        Ok(id % 2 == 0)
    }
}

export_filter!(EvenFilter);
