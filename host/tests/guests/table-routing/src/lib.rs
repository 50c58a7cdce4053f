//! Sets the routing keys named in config `keys` (comma-separated, e.g.
//! `topic,message_key`), each derived from the change: names from the
//! table, keys from the primary key. Lets tests produce valid and invalid
//! routes for any sink type. Config `exchange` names the RabbitMQ exchange
//! (default `cdc`).

use weft_sdk_guest::{Change, Config, Error, KeyAction, Route, Routing, export_routing};

struct TableRouting {
    keys: Vec<String>,
    exchange: String,
}

impl Routing for TableRouting {
    fn init(config: Config) -> Result<Self, String> {
        let keys = config.require("keys")?;
        Ok(TableRouting {
            keys: keys.split(',').map(|k| k.trim().to_string()).collect(),
            exchange: config.get("exchange").unwrap_or("cdc").to_string(),
        })
    }

    fn route(&mut self, change: Change) -> Result<Route, Error> {
        let m = change.metadata();
        let table = format!("{}.{}", m.table_schema, m.table_name);
        let pk = m.record_pks.join(":");
        let mut route = Route::default();
        for key in &self.keys {
            match key.as_str() {
                "topic" => route.topic = Some(table.clone()),
                "message_key" => route.message_key = Some(pk.clone()),
                "subject" => {
                    route.subject = Some(format!("cdc.{table}.{}", change.action().as_str()))
                }
                "headers" => route.headers = Some(vec![("X-Table".into(), table.clone())]),
                "key" => route.key = Some(format!("{table}:{pk}")),
                "action" => route.action = Some(KeyAction::Set),
                "expire_ms" => route.expire_ms = Some(60_000),
                "stream_key" => route.stream_key = Some(table.clone()),
                "method" => route.method = Some("PUT".into()),
                "endpoint_path" => route.endpoint_path = Some(format!("/{}/{pk}", m.table_name)),
                "bad_endpoint_path" => route.endpoint_path = Some(m.table_name.clone()),
                "exchange" => route.exchange = Some(self.exchange.clone()),
                "routing_key" => route.routing_key = Some(table.clone()),
                "message_id" => route.message_id = Some(format!("routed-{}", m.idempotency_key)),
                "table" => route.table = Some(format!("routed.{}", m.table_name)),
                other => return Err(Error::permanent(format!("unknown key {other}"))),
            }
        }
        Ok(route)
    }
}

export_routing!(TableRouting);
