//! The trivial filter of the benchmarks: keeps inserts, drops the rest,
//! without parsing the row.

use weft_sdk_guest::{Action, Change, Config, Error, Filter, export_filter};

struct InsertsOnly;

impl Filter for InsertsOnly {
    fn init(_config: Config) -> Result<Self, String> {
        Ok(InsertsOnly)
    }

    fn filter(&mut self, change: Change) -> Result<bool, Error> {
        Ok(change.action() == Action::Insert)
    }
}

export_filter!(InsertsOnly);
