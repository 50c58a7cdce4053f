//! A transform written on the raw generated bindings, to break the contract
//! the SDK keeps: config `mode` = `short` returns one outcome too few,
//! `bad-json` returns a JSON payload that does not parse, `init-loop` spins
//! in `init`.

use std::cell::RefCell;

use weft_sdk_guest::bindings::transform::Guest;
use weft_sdk_guest::bindings::transform::weft::plugin::types::{
    BatchContext, Change, Config, FunctionError, Payload,
};

thread_local! {
    static MODE: RefCell<String> = const { RefCell::new(String::new()) };
}

struct Raw;

impl Guest for Raw {
    fn init(config: Config) -> Result<(), String> {
        let mode = config
            .into_iter()
            .find(|(k, _)| k == "mode")
            .map(|(_, v)| v)
            .unwrap_or_default();
        if mode == "init-loop" {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        MODE.with_borrow_mut(|m| *m = mode);
        Ok(())
    }

    fn transform(
        _context: BatchContext,
        batch: Vec<Change>,
    ) -> Vec<Result<Payload, FunctionError>> {
        let mode = MODE.with_borrow(|m| m.clone());
        let mut outcomes: Vec<_> = batch
            .iter()
            .map(|_| {
                Ok(Payload::Json(if mode == "bad-json" {
                    "{not json".into()
                } else {
                    "{}".into()
                }))
            })
            .collect();
        if mode == "short" {
            outcomes.pop();
        }
        outcomes
    }
}

weft_sdk_guest::bindings::transform::export_transform_world!(Raw with_types_in weft_sdk_guest::bindings::transform);
