//! The delivery fields every push destination shares (`batch_size`,
//! `max_in_flight`, `request_timeout_ms`, `retry_backoff_base_ms`,
//! `retry_backoff_max_ms`), read next to each kind's own fields. Only the
//! defaults of the first three differ between kinds.

use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

use super::{DestinationProblem, settings_of};
use crate::bounds;

/// How a push sink batches, parallelises, times out and backs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeliveryConfig {
    /// `batch_size`: most messages handed to one delivery (1 to 10000).
    pub batch_size: u32,
    /// `max_in_flight`: most deliveries in flight at once (1 to 1000).
    pub max_in_flight: u32,
    /// `request_timeout_ms`: how long one delivery may take before its
    /// messages count as failed and are retried (100 to 600000).
    pub request_timeout_ms: u64,
    /// `retry_backoff_base_ms`: delay before the first retry (1 to
    /// 3600000); it doubles with each failure, with jitter. Default 1000.
    pub retry_backoff_base_ms: u64,
    /// `retry_backoff_max_ms`: the longest delay between two attempts (1 to
    /// 86400000). Default 600000 (10 minutes).
    pub retry_backoff_max_ms: u64,
}

/// One destination kind's defaults for the fields whose default differs
/// between kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryDefaults {
    /// Default `batch_size`.
    pub batch_size: u32,
    /// Default `max_in_flight`.
    pub max_in_flight: u32,
    /// Default `request_timeout_ms`.
    pub request_timeout_ms: u64,
}

/// A destination kind's settings struct that carries a [`DeliveryConfig`].
/// Its own fields are deserialized with `delivery` skipped; the shared
/// fields are read separately and put in by [`push_settings_of`].
pub trait PushSettings: DeserializeOwned {
    /// This kind's defaults.
    const DELIVERY_DEFAULTS: DeliveryDefaults;

    /// Where the shared fields go.
    fn delivery_mut(&mut self) -> &mut DeliveryConfig;
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveryFields {
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u32, 1, 10_000>"
    )]
    batch_size: Option<u32>,
    #[serde(default, deserialize_with = "bounds::opt_in_range::<_, u32, 1, 1000>")]
    max_in_flight: Option<u32>,
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 100, 600_000>"
    )]
    request_timeout_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 1, 3_600_000>"
    )]
    retry_backoff_base_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 1, 86_400_000>"
    )]
    retry_backoff_max_ms: Option<u64>,
}

impl DeliveryConfig {
    /// The shared field names.
    pub const FIELDS: [&'static str; 5] = [
        "batch_size",
        "max_in_flight",
        "request_timeout_ms",
        "retry_backoff_base_ms",
        "retry_backoff_max_ms",
    ];
    /// Default `retry_backoff_base_ms` (Sequin's 1 s).
    pub const DEFAULT_RETRY_BACKOFF_BASE_MS: u64 = 1_000;
    /// Default `retry_backoff_max_ms` (Sequin's 10 min).
    pub const DEFAULT_RETRY_BACKOFF_MAX_MS: u64 = 600_000;

    /// Every field at `defaults` and the common retry defaults.
    pub fn with_defaults(defaults: DeliveryDefaults) -> DeliveryConfig {
        DeliveryConfig {
            batch_size: defaults.batch_size,
            max_in_flight: defaults.max_in_flight,
            request_timeout_ms: defaults.request_timeout_ms,
            retry_backoff_base_ms: Self::DEFAULT_RETRY_BACKOFF_BASE_MS,
            retry_backoff_max_ms: Self::DEFAULT_RETRY_BACKOFF_MAX_MS,
        }
    }

    /// The request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Rules between fields: (field, what is wrong and what to do).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.retry_backoff_max_ms < self.retry_backoff_base_ms {
            problems.push((
                "retry_backoff_max_ms",
                format!(
                    "{} is below retry_backoff_base_ms ({}); the cap must be at least the first delay",
                    self.retry_backoff_max_ms, self.retry_backoff_base_ms
                ),
            ));
        }
        problems
    }
}

/// Reads a push destination's settings (everything but `type`): the shared
/// delivery fields, then the kind's own fields from the rest.
pub fn push_settings_of<T: PushSettings>(settings: Value) -> Result<T, DestinationProblem> {
    let (shared, own) = split_off(settings, &DeliveryConfig::FIELDS);
    let fields: DeliveryFields = settings_of(shared)?;
    let mut config: T = settings_of(own).map_err(|mut problem| {
        if problem.message.starts_with("unknown field") {
            problem.message = format!(
                "{}, or a delivery field: `{}`",
                problem.message,
                DeliveryConfig::FIELDS.join("`, `")
            );
        }
        problem
    })?;
    let defaults = DeliveryConfig::with_defaults(T::DELIVERY_DEFAULTS);
    *config.delivery_mut() = DeliveryConfig {
        batch_size: fields.batch_size.unwrap_or(defaults.batch_size),
        max_in_flight: fields.max_in_flight.unwrap_or(defaults.max_in_flight),
        request_timeout_ms: fields
            .request_timeout_ms
            .unwrap_or(defaults.request_timeout_ms),
        retry_backoff_base_ms: fields
            .retry_backoff_base_ms
            .unwrap_or(defaults.retry_backoff_base_ms),
        retry_backoff_max_ms: fields
            .retry_backoff_max_ms
            .unwrap_or(defaults.retry_backoff_max_ms),
    };
    Ok(config)
}

/// Moves the `keys` of a settings mapping into a mapping of their own:
/// `(those keys, the rest)`. A value that is not a mapping stays in the
/// rest, where deserializing reports it.
pub fn split_off(settings: Value, keys: &[&str]) -> (Value, Value) {
    let Value::Mapping(mut rest) = settings else {
        return (Value::Mapping(Mapping::new()), settings);
    };
    let mut taken = Mapping::new();
    for key in keys {
        if let Some(value) = rest.remove(*key) {
            taken.insert(Value::String((*key).to_string()), value);
        }
    }
    (Value::Mapping(taken), Value::Mapping(rest))
}
