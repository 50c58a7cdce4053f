//! A weft routing function that builds its sink's routing keys from
//! templates such as `orders.{record.region}`. Config keys and errors:
//! `docs/plugins.md`, "route-template".

mod template;

use std::collections::BTreeMap;

use weft_sdk_guest::{Change, Config, Error, Route, Routing, export_routing};

use template::Template;

/// The route fields a template may fill, by config key.
const FIELDS: [&str; 11] = [
    "topic",
    "message_key",
    "subject",
    "key",
    "stream_key",
    "method",
    "endpoint_path",
    "exchange",
    "routing_key",
    "message_id",
    "table",
];
const HEADER: &str = "header.";
const DEFAULT: &str = "default.";

struct RouteTemplate {
    /// Route field name to its template.
    fields: BTreeMap<String, Template>,
    /// Header name to its template.
    headers: Vec<(String, Template)>,
    /// Redis string expiry, a constant.
    expire_ms: Option<u64>,
    /// Placeholder path to the text used when the change lacks it.
    defaults: BTreeMap<String, String>,
}

impl Routing for RouteTemplate {
    fn init(config: Config) -> Result<Self, String> {
        config.refuse_unknown_keys(
            |key| {
                FIELDS.contains(&key)
                    || key == "expire_ms"
                    || key.starts_with(HEADER)
                    || key.starts_with(DEFAULT)
            },
            "the route fields (`topic`, `message_key`, `subject`, `key`, `stream_key`, `method`, `endpoint_path`, `exchange`, `routing_key`, `message_id`, `table`), `header.<name>`, `expire_ms` and `default.<path>`",
        )?;
        let mut fields = BTreeMap::new();
        let mut headers = Vec::new();
        let mut defaults = BTreeMap::new();
        for (key, value) in config.iter() {
            let parse = |value| Template::parse(value).map_err(|e| format!("`{key}`: {e}"));
            if FIELDS.contains(&key) {
                fields.insert(key.to_string(), parse(value)?);
            } else if let Some(name) = key.strip_prefix(HEADER) {
                headers.push((name.to_string(), parse(value)?));
            } else if let Some(path) = key.strip_prefix(DEFAULT) {
                weft_sdk_guest::MessagePath::parse(path).map_err(|e| format!("`{key}`: {e}"))?;
                defaults.insert(path.to_string(), value.to_string());
            }
        }
        let expire_ms = config
            .get("expire_ms")
            .map(|text| {
                text.trim().parse::<u64>().map_err(|_| {
                    format!("`expire_ms` is `{text}`, not a whole number of milliseconds")
                })
            })
            .transpose()?;
        if fields.is_empty() && headers.is_empty() && expire_ms.is_none() {
            return Err(
                "no route field to set: add a template such as `topic: \"orders.{record.region}\"` (the keys your sink takes: `topic`, `subject`, `key`, `stream_key`, `routing_key`, ...)"
                    .into(),
            );
        }
        let used: Vec<&str> = fields
            .values()
            .chain(headers.iter().map(|(_, t)| t))
            .flat_map(Template::paths)
            .collect();
        if let Some(unused) = defaults.keys().find(|path| !used.contains(&path.as_str())) {
            return Err(format!(
                "`{DEFAULT}{unused}` gives a default for `{{{unused}}}`, which no template uses: remove it or fix the path"
            ));
        }
        Ok(RouteTemplate {
            fields,
            headers,
            expire_ms,
            defaults,
        })
    }

    fn route(&mut self, change: Change) -> Result<Route, Error> {
        let message = change.into_message()?;
        let render = |template: &Template| template.render(&message, &self.defaults);
        let mut route = Route {
            expire_ms: self.expire_ms,
            ..Route::default()
        };
        for (field, template) in &self.fields {
            let value = Some(render(template)?);
            match field.as_str() {
                "topic" => route.topic = value,
                "message_key" => route.message_key = value,
                "subject" => route.subject = value,
                "key" => route.key = value,
                "stream_key" => route.stream_key = value,
                "method" => route.method = value,
                "endpoint_path" => route.endpoint_path = value,
                "exchange" => route.exchange = value,
                "routing_key" => route.routing_key = value,
                "message_id" => route.message_id = value,
                "table" => route.table = value,
                _ => unreachable!("init admits only FIELDS"),
            }
        }
        if !self.headers.is_empty() {
            route.headers = Some(
                self.headers
                    .iter()
                    .map(|(name, template)| Ok((name.clone(), render(template)?)))
                    .collect::<Result<_, Error>>()?,
            );
        }
        Ok(route)
    }
}

export_routing!(RouteTemplate);

#[cfg(test)]
mod tests {
    use super::*;
    use weft_sdk_guest::{Action, Metadata};

    fn change(record: &str) -> Change {
        let metadata = Metadata {
            table_name: "orders".into(),
            ..Metadata::default()
        };
        Change::new(Action::Insert, record.into(), None, metadata)
    }

    fn routing(pairs: &[(&str, &str)]) -> Result<RouteTemplate, String> {
        RouteTemplate::init(Config::from(pairs))
    }

    #[test]
    fn fills_every_configured_field_and_header() {
        let mut r = routing(&[
            ("subject", "cdc.{metadata.table_name}.{action}"),
            ("header.X-Region", "{record.region}"),
            ("expire_ms", "5000"),
            ("default.record.region", "none"),
        ])
        .unwrap();
        let route = r.route(change(r#"{"id": 7, "region": "eu"}"#)).unwrap();
        assert_eq!(
            route,
            Route {
                subject: Some("cdc.orders.insert".into()),
                headers: Some(vec![("X-Region".into(), "eu".into())]),
                expire_ms: Some(5000),
                ..Route::default()
            }
        );
        let route = r.route(change(r#"{"id": 8}"#)).unwrap();
        assert_eq!(
            route.headers,
            Some(vec![("X-Region".into(), "none".into())])
        );
    }

    #[test]
    fn bad_config_is_refused_with_the_reason() {
        let err = |pairs: &[(&str, &str)]| routing(pairs).err().unwrap();
        assert!(err(&[]).starts_with("no route field to set"));
        assert!(err(&[("topik", "x")]).starts_with("unknown config key `topik`"));
        assert_eq!(
            err(&[("key", "a"), ("expire_ms", "soon")]),
            "`expire_ms` is `soon`, not a whole number of milliseconds"
        );
        assert!(
            err(&[("key", "{record.id}"), ("default.record.region", "x")])
                .contains("which no template uses")
        );
    }
}
