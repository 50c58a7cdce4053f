//! {{name}}: a weft routing function. It sends each change to the NATS
//! subject `<table>.<action>`; change `route` to choose the destination.
//!
//! Set only the keys of your sink's kind (the host refuses the others):
//! Kafka `topic`/`message_key`, NATS `subject`/`headers`, Redis string
//! `key`/`action`/`expire_ms`, Redis stream `stream_key`, webhook
//! `method`/`endpoint_path`/`headers`, RabbitMQ
//! `exchange`/`routing_key`/`headers`/`message_id`, Postgres `table`.

use weft_sdk_guest::{Change, Config, Error, Route, Routing, export_routing};

struct Plugin;

impl Routing for Plugin {
    /// Called once per instance with the function's `config` from the
    /// weft config; return `Err` to refuse it.
    fn init(_config: Config) -> Result<Self, String> {
        Ok(Plugin)
    }

    /// Where this change goes; fields left `None` keep the sink's default.
    fn route(&mut self, change: Change) -> Result<Route, Error> {
        let table = &change.metadata().table_name;
        Ok(Route {
            subject: Some(format!("{table}.{}", change.action().as_str())),
            ..Route::default()
        })
    }
}

export_routing!(Plugin);
