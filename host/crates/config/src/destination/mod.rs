//! `destination:` of a sink, as far as the config layer knows it.
//!
//! The destination types themselves (their settings, checks and delivery)
//! belong to the sinks layer, one folder per type. This layer knows only
//! what every type shares, and reads destinations through the
//! [`Destination`] trait that the sinks layer implements once for all of
//! its types. So a config is a `Config<D>`: the layer above names `D` (see
//! `weft_sinks::config`), and nothing here names a sink type.
//!
//! `type` picks the kind; the kind's settings are read only after `type`
//! is known, so that unknown keys and bad values are reported with their
//! exact path.

mod delivery;
pub mod rules;

pub use delivery::{DeliveryConfig, DeliveryDefaults, PushSettings, push_settings_of, split_off};

use std::fmt;

use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use crate::hosts::{AllowedHost, HostError};
use crate::model::{SinkConfig, TableRef};
use crate::path::DocPath;

/// What loading and checking a config needs of a sink's destination. The
/// sinks layer implements it for the enum of every destination type it
/// has; each method answers for the type the value holds.
pub trait Destination: Sized + Clone + fmt::Debug + PartialEq {
    /// The `type` values that can be read, in the order messages list them.
    fn types() -> Vec<&'static str>;

    /// Sequin's destination types that weft does not have yet: named in the
    /// error, so that users know a type is not a typo.
    fn planned() -> &'static [&'static str];

    /// The types weft has that this build was compiled without (their
    /// cargo feature off): named in the error, so that users know to use
    /// another build.
    fn left_out() -> Vec<&'static str>;

    /// Reads a destination of `type_name` from its settings (everything but
    /// `type`); `None` when no type has that name.
    fn read(type_name: &str, settings: Value) -> Option<Result<Self, DestinationProblem>>;

    /// The destination a change retention writes through: append one event
    /// row per change to `table` in the database `database`, creating the
    /// table when `create_table` (see `change_retention`); `None` when this
    /// build has no sink type that can.
    fn event_log(database: &str, table: TableRef, create_table: bool) -> Option<Self>;

    /// The `type` this destination was configured with.
    fn type_name(&self) -> &'static str;

    /// The shared delivery fields of a push destination; `None` for a pull
    /// sink.
    fn delivery(&self) -> Option<&DeliveryConfig>;

    /// The routing keys a routing function may set for this type; empty
    /// when it takes no routing.
    fn routing_keys(&self) -> &'static [&'static str];

    /// The types whose destinations take routing keys, in the order
    /// messages list them.
    fn types_with_routing() -> Vec<&'static str>;

    /// Where this destination connects, by the field that names it, for
    /// the account's `allow_hosts` check. An HTTP endpoint or a database
    /// it names is a resource checked on its own (see
    /// [`Destination::references`]).
    fn egress_targets(&self) -> Vec<(&'static str, Result<AllowedHost, HostError>)>;

    /// The other config entries this destination uses, so that the
    /// account check sees them.
    fn references(&self) -> Vec<Reference>;

    /// Rules of this type that span the sink or other entries: each as
    /// (path below the sink's entry, what is wrong and what to do).
    fn problems(&self, sink: &SinkConfig<Self>, entries: &Entries<'_>) -> Vec<(DocPath, String)>;
}

/// A config entry a destination uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// The `databases` entry of this name.
    Database(String),
    /// The `http_endpoints` entry of this name.
    HttpEndpoint(String),
}

/// The names of the entries a destination may refer to, for its checks.
#[derive(Debug, Clone, Copy)]
pub struct Entries<'a> {
    /// Every `databases` entry's name.
    pub databases: &'a [String],
    /// Every `http_endpoints` entry's name.
    pub http_endpoints: &'a [&'a str],
}

/// A problem inside `destination:`, with its path relative to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationProblem {
    /// Where, below `destination`.
    pub path: DocPath,
    /// What is wrong and what to do.
    pub message: String,
}

/// Reads a destination from its YAML mapping: its `type`, then that type's
/// settings.
pub fn read<D: Destination>(value: Value) -> Result<D, DestinationProblem> {
    let here = DocPath::root();
    let types = D::types().join(", ");
    let Value::Mapping(mut fields) = value else {
        return Err(DestinationProblem {
            path: here,
            message: format!(
                "expected a mapping with a `type` key, e.g. `type: sequin_stream`; allowed types: {types}"
            ),
        });
    };
    let type_path = here.key("type");
    let kind = match fields.remove("type") {
        None => {
            return Err(DestinationProblem {
                path: here,
                message: format!("missing field `type`; allowed types: {types}"),
            });
        }
        Some(Value::String(kind)) => kind,
        Some(_) => {
            return Err(DestinationProblem {
                path: type_path,
                message: format!("expected a string; allowed types: {types}"),
            });
        }
    };
    match D::read(&kind, Value::Mapping(fields)) {
        Some(read) => read,
        None if D::left_out().contains(&kind.as_str()) => Err(DestinationProblem {
            path: type_path,
            message: format!(
                "destination type `{kind}` is left out of this build of weft (its cargo feature is off); use a build with weft's default features, or one of: {types}"
            ),
        }),
        None if D::planned().contains(&kind.as_str()) => Err(DestinationProblem {
            path: type_path,
            message: format!(
                "destination type `{kind}` is not supported yet; supported types: {types}"
            ),
        }),
        None => Err(DestinationProblem {
            path: type_path,
            message: format!("unknown destination type `{kind}`; allowed types: {types}"),
        }),
    }
}

/// Reads one kind's settings (everything but `type`), keeping the path of
/// the offending key.
pub fn settings_of<T: DeserializeOwned>(settings: Value) -> Result<T, DestinationProblem> {
    serde_path_to_error::deserialize(settings).map_err(|error| DestinationProblem {
        path: DocPath::from_tracked(error.path()),
        message: error.into_inner().to_string(),
    })
}
