//! The routing kind: sink-specific destination keys per change.

use std::any::Any;
use std::cell::RefCell;

use crate::{Change, Config, Error};

crate::wit_conversions!(crate::bindings::routing::weft::plugin::types);

use crate::bindings::routing as world;

/// What a Redis string sink does with the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAction {
    /// `SET` the key to the message.
    Set,
    /// `DEL` the key.
    Del,
}

/// The keys a routing function sets for one change. Leave a field `None`
/// to keep the sink's default. The host rejects (fails the change with a
/// permanent error naming the key) a key the sink does not use:
///
/// | sink | keys |
/// |---|---|
/// | kafka | `topic`, `message_key` |
/// | nats | `subject`, `headers` |
/// | redis_string | `key`, `action`, `expire_ms` |
/// | redis_stream | `stream_key` |
/// | webhook | `method`, `endpoint_path` (starts with `/`, ≤ 2000 chars), `headers` |
/// | rabbitmq | `exchange`, `routing_key`, `headers`, `message_id` |
/// | postgres | `table` (`schema.table`) |
/// | sequin_stream | none (a routing function cannot be configured) |
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// Kafka: the topic.
    pub topic: Option<String>,
    /// Kafka: the message key.
    pub message_key: Option<String>,
    /// NATS: the subject.
    pub subject: Option<String>,
    /// NATS, webhook and RabbitMQ: extra headers.
    pub headers: Option<Vec<(String, String)>>,
    /// Redis string: the key.
    pub key: Option<String>,
    /// Redis string: set or delete the key.
    pub action: Option<KeyAction>,
    /// Redis string: expiry in milliseconds.
    pub expire_ms: Option<u64>,
    /// Redis stream: the stream key.
    pub stream_key: Option<String>,
    /// Webhook: the HTTP method.
    pub method: Option<String>,
    /// Webhook: the path appended to the endpoint's base URL.
    pub endpoint_path: Option<String>,
    /// RabbitMQ: the exchange.
    pub exchange: Option<String>,
    /// RabbitMQ: the routing key.
    pub routing_key: Option<String>,
    /// RabbitMQ: the message id.
    pub message_id: Option<String>,
    /// Postgres: the target table, `schema.table`.
    pub table: Option<String>,
}

impl From<Route> for world::Route {
    fn from(route: Route) -> Self {
        world::Route {
            topic: route.topic,
            message_key: route.message_key,
            subject: route.subject,
            headers: route.headers,
            key: route.key,
            action: route.action.map(|action| match action {
                KeyAction::Set => world::KeyAction::Set,
                KeyAction::Del => world::KeyAction::Del,
            }),
            expire_ms: route.expire_ms,
            stream_key: route.stream_key,
            method: route.method,
            endpoint_path: route.endpoint_path,
            exchange: route.exchange,
            routing_key: route.routing_key,
            message_id: route.message_id,
            table: route.table,
        }
    }
}

/// A routing function: chooses where its sink sends each change.
///
/// ```ignore
/// use weft_sdk_guest::{export_routing, Change, Config, Error, Route, Routing};
///
/// /// Sends each table to its own Kafka topic, keyed by the primary key.
/// struct TopicPerTable { prefix: String }
///
/// impl Routing for TopicPerTable {
///     fn init(config: Config) -> Result<Self, String> {
///         Ok(TopicPerTable { prefix: config.get("prefix").unwrap_or("cdc").to_string() })
///     }
///
///     fn route(&mut self, change: Change) -> Result<Route, Error> {
///         let m = change.metadata();
///         Ok(Route {
///             topic: Some(format!("{}.{}", self.prefix, m.table_name)),
///             message_key: Some(m.record_pks.join(":")),
///             ..Route::default()
///         })
///     }
/// }
///
/// export_routing!(TopicPerTable);
/// ```
pub trait Routing: Sized + 'static {
    /// Builds the routing function from its configuration.
    fn init(config: Config) -> Result<Self, String>;

    /// The keys for one change.
    fn route(&mut self, change: Change) -> Result<Route, Error>;
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub fn __init<T: Routing>(config: wit::Config) -> Result<(), String> {
    let routing = T::init(Config::from(config))?;
    INSTANCE.with_borrow_mut(|slot| *slot = Some(Box::new(routing)));
    Ok(())
}

#[doc(hidden)]
pub fn __route<T: Routing>(
    context: wit::BatchContext,
    batch: Vec<wit::Change>,
) -> Vec<Result<world::Route, wit::FunctionError>> {
    INSTANCE.with_borrow_mut(
        |slot| match slot.as_mut().and_then(|b| b.downcast_mut::<T>()) {
            Some(routing) => changes_of(context, batch)
                .map(|change| routing.route(change).map(Into::into).map_err(Into::into))
                .collect(),
            None => batch
                .iter()
                .map(|_| {
                    Err(wit::FunctionError::Transient(
                        "route called before init".into(),
                    ))
                })
                .collect(),
        },
    )
}

/// Exports a type implementing [`Routing`] as the component's `routing`
/// world.
///
/// ```ignore
/// weft_sdk_guest::export_routing!(MyRouting);
/// ```
#[macro_export]
macro_rules! export_routing {
    ($ty:ty) => {
        const _: () = {
            struct __WeftRoutingExport;

            impl $crate::bindings::routing::Guest for __WeftRoutingExport {
                fn init(
                    config: $crate::bindings::routing::weft::plugin::types::Config,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::routing::__init::<$ty>(config)
                }

                fn route(
                    context: $crate::bindings::routing::weft::plugin::types::BatchContext,
                    batch: ::std::vec::Vec<$crate::bindings::routing::weft::plugin::types::Change>,
                ) -> ::std::vec::Vec<
                    ::core::result::Result<
                        $crate::bindings::routing::Route,
                        $crate::bindings::routing::weft::plugin::types::FunctionError,
                    >,
                > {
                    $crate::routing::__route::<$ty>(context, batch)
                }
            }

            $crate::bindings::routing::export_routing_world!(
                __WeftRoutingExport with_types_in $crate::bindings::routing
            );
        };
    };
}
