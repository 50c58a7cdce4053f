//! The [`Sink`] trait: everything weft knows of one sink type, implemented
//! in that type's folder, so that no other place matches on its name.
//!
//! A type is registered by one line in the crate's `sink_types!` list,
//! which builds [`DestinationConfig`](crate::DestinationConfig) (the
//! `destination:` of a sink, one variant per type) and the table of
//! [`SinkKind`]s from it.

use std::fmt;
use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::destination::{DeliveryConfig, DestinationProblem, Entries, Reference};
use weft_config::hosts::{AllowedHost, HostError};
use weft_config::path::DocPath;
use weft_core::message::Metadata;
use weft_core::route::Route;

use super::config::{Config, SinkConfig};
use super::delivery::{Destination, RetryPolicy};
use super::pull::SequinStreamSettings;

/// One sink type (`destination.type`): how its settings are read and
/// checked, which routing keys it takes and what they default to, and how
/// its delivery is built.
pub trait Sink: 'static {
    /// Its `destination.type`.
    const TYPE: &'static str;

    /// The routing keys a routing function may set for it (see
    /// [`Route`]); empty when it takes no routing.
    const ROUTING_KEYS: &'static [&'static str];

    /// The routing keys a message gets when no routing function sets them;
    /// `None` when the type has none, so that no empty route is built per
    /// message.
    const DEFAULT_ROUTE: Option<DefaultRoute> = None;

    /// Whether it delivers a transform's bytes payload byte-exact. A type
    /// that can only store JSON says no, and the pipeline dead-letters such
    /// a message with that reason.
    const CARRIES_BYTES: bool = true;

    /// Its `destination:` settings.
    type Config: Clone + fmt::Debug + PartialEq + Send + Sync + 'static;

    /// Reads its settings: everything under `destination:` but `type`.
    fn read(settings: Value) -> Result<Self::Config, DestinationProblem>;

    /// The shared delivery fields of a push sink; `None` for a pull sink.
    fn delivery(config: &Self::Config) -> Option<&DeliveryConfig>;

    /// Where it connects, by the field that names it, for the account's
    /// `allow_hosts` check.
    fn egress_targets(
        _config: &Self::Config,
    ) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        Vec::new()
    }

    /// The config entries (databases, HTTP endpoints) it uses.
    fn references(_config: &Self::Config) -> Vec<Reference> {
        Vec::new()
    }

    /// Its rules that span the sink's entry or other entries: each as
    /// (path below the sink's entry, what is wrong and what to do).
    fn problems(
        _config: &Self::Config,
        _sink: &SinkConfig,
        _entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        Vec::new()
    }

    /// Builds how `sink` delivers (`config` is its whole config); starts
    /// nothing, so that a failure refuses the config with nothing changed.
    fn build(config: &Self::Config, sink: &SinkConfig, whole: &Config)
    -> Result<Built, BuildError>;
}

/// `problems` of a type's settings, each by its key under the sink's
/// `destination:`, as [`Sink::problems`] answers them.
pub fn under_destination(problems: Vec<(&'static str, String)>) -> Vec<(DocPath, String)> {
    let destination = DocPath::root().key("destination");
    problems
        .into_iter()
        .map(|(key, problem)| (destination.key(key), problem))
        .collect()
}

/// A sink type's default routing keys for a message: from the name of its
/// action (`truncate` included), its metadata and its message group.
pub type DefaultRoute = fn(action: &str, metadata: &Metadata, group_id: &str) -> Route;

/// How a sink delivers, built but not started.
pub enum Built {
    /// Consumers pull its messages over HTTP.
    Pull(SequinStreamSettings),
    /// A delivery worker pushes its messages to `destination`.
    Push {
        /// Where the messages go.
        destination: Arc<dyn Destination>,
        /// When a failed message is tried again.
        retry: RetryPolicy,
    },
}

/// Why a sink's delivery could not be built: what to fix, and the error
/// underneath when there is one.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct BuildError {
    reason: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl BuildError {
    /// A build that failed for `reason`, which says what to fix.
    pub fn new(reason: impl fmt::Display) -> BuildError {
        BuildError {
            reason: reason.to_string(),
            source: None,
        }
    }

    /// A build that failed on `source`, described as `reason`.
    pub fn caused_by(
        reason: impl fmt::Display,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> BuildError {
        BuildError {
            reason: reason.to_string(),
            source: Some(Box::new(source)),
        }
    }
}

/// What the pipeline needs of a sink type without its settings: its name,
/// its routing keys and their defaults, and whether it carries bytes.
#[derive(Debug, Clone, Copy)]
pub struct SinkKind {
    /// Its `destination.type`.
    pub name: &'static str,
    /// See [`Sink::ROUTING_KEYS`].
    pub routing_keys: &'static [&'static str],
    /// See [`Sink::CARRIES_BYTES`].
    pub carries_bytes: bool,
    /// See [`Sink::DEFAULT_ROUTE`].
    pub default_route: Option<DefaultRoute>,
}

impl SinkKind {
    /// The kind of the sink type `S`.
    pub const fn of<S: Sink>() -> SinkKind {
        SinkKind {
            name: S::TYPE,
            routing_keys: S::ROUTING_KEYS,
            carries_bytes: S::CARRIES_BYTES,
            default_route: S::DEFAULT_ROUTE,
        }
    }
}

/// Registers the sink types: declares each type's folder as a module, and
/// builds [`DestinationConfig`] with a variant per type, its
/// [`weft_config::Destination`] implementation, and the table of
/// [`SinkKind`]s ([`sink_kinds`]), from one `Variant => folder::TypeSink`
/// line per type, which may carry a `#[cfg]` (a sink type behind a cargo
/// feature). Each method answers by delegating
/// to the variant's [`Sink`] implementation. Expects `event_log` and
/// `PLANNED` in scope where it is used.
///
/// [`DestinationConfig`]: crate::DestinationConfig
/// [`sink_kinds`]: crate::sink_kinds
macro_rules! sink_types {
    ($($(#[$meta:meta])* $variant:ident => $module:ident :: $sink:ident),+ $(,)?) => {
        // Each type's folder, declared here so that its line is all a type
        // adds to lib.rs.
        $(
            $(#[$meta])*
            pub mod $module;
        )+

        /// A sink's `destination:`: one variant per sink type, holding that
        /// type's settings.
        #[derive(Debug, Clone, PartialEq)]
        pub enum DestinationConfig {
            $(
                $(#[$meta])*
                #[doc = concat!("`type: ", stringify!($module), "` (see [`", stringify!($module), "`]).")]
                $variant(<$module::$sink as $crate::sink::Sink>::Config),
            )+
        }

        // Pushed one by one: a type behind a disabled feature has no line,
        // and a vec![] element cannot carry a #[cfg].
        #[allow(clippy::vec_init_then_push)]
        static SINK_KINDS: std::sync::LazyLock<Vec<$crate::sink::SinkKind>> =
            std::sync::LazyLock::new(|| {
                let mut kinds = Vec::new();
                $(
                    $(#[$meta])*
                    kinds.push($crate::sink::SinkKind::of::<$module::$sink>());
                )+
                kinds
            });

        /// Every sink type this build of weft has, in the order messages
        /// list them.
        pub fn sink_kinds() -> &'static [$crate::sink::SinkKind] {
            &SINK_KINDS
        }

        impl weft_config::Destination for DestinationConfig {
            fn types() -> Vec<&'static str> {
                sink_kinds().iter().map(|kind| kind.name).collect()
            }

            fn planned() -> &'static [&'static str] {
                PLANNED
            }

            fn left_out() -> Vec<&'static str> {
                // A type's folder is named after it (checked below).
                let built = Self::types();
                [$(stringify!($module)),+]
                    .into_iter()
                    .filter(|name| !built.contains(name))
                    .collect()
            }

            fn read(
                type_name: &str,
                settings: serde_yaml_ng::Value,
            ) -> Option<Result<Self, weft_config::destination::DestinationProblem>> {
                $(
                    $(#[$meta])*
                    {
                        if type_name == <$module::$sink as $crate::sink::Sink>::TYPE {
                            return Some(
                                <$module::$sink as $crate::sink::Sink>::read(settings)
                                    .map(DestinationConfig::$variant),
                            );
                        }
                    }
                )+
                None
            }

            fn event_log(
                database: &str,
                table: weft_config::model::TableRef,
                create_table: bool,
            ) -> Option<Self> {
                event_log(database, table, create_table)
            }

            fn type_name(&self) -> &'static str {
                match self {
                    $($(#[$meta])* DestinationConfig::$variant(_) => <$module::$sink as $crate::sink::Sink>::TYPE,)+
                }
            }

            fn delivery(&self) -> Option<&weft_config::DeliveryConfig> {
                match self {
                    $($(#[$meta])* DestinationConfig::$variant(config) => <$module::$sink as $crate::sink::Sink>::delivery(config),)+
                }
            }

            fn routing_keys(&self) -> &'static [&'static str] {
                match self {
                    $($(#[$meta])* DestinationConfig::$variant(_) => <$module::$sink as $crate::sink::Sink>::ROUTING_KEYS,)+
                }
            }

            fn types_with_routing() -> Vec<&'static str> {
                sink_kinds()
                    .iter()
                    .filter(|kind| !kind.routing_keys.is_empty())
                    .map(|kind| kind.name)
                    .collect()
            }

            fn egress_targets(
                &self,
            ) -> Vec<(&'static str, Result<weft_config::hosts::AllowedHost, weft_config::hosts::HostError>)> {
                match self {
                    $($(#[$meta])* DestinationConfig::$variant(config) => <$module::$sink as $crate::sink::Sink>::egress_targets(config),)+
                }
            }

            fn references(&self) -> Vec<weft_config::destination::Reference> {
                match self {
                    $($(#[$meta])* DestinationConfig::$variant(config) => <$module::$sink as $crate::sink::Sink>::references(config),)+
                }
            }

            fn problems(
                &self,
                sink: &weft_config::SinkConfig<Self>,
                entries: &weft_config::destination::Entries<'_>,
            ) -> Vec<(weft_config::path::DocPath, String)> {
                match self {
                    $($(#[$meta])* DestinationConfig::$variant(config) => <$module::$sink as $crate::sink::Sink>::problems(config, sink, entries),)+
                }
            }
        }

        #[cfg(test)]
        #[test]
        fn each_sink_folder_is_named_after_its_type() {
            $(
                $(#[$meta])*
                assert_eq!(
                    <$module::$sink as $crate::sink::Sink>::TYPE,
                    stringify!($module)
                );
            )+
        }

        impl DestinationConfig {
            /// The `type` this destination was configured with.
            pub fn type_name(&self) -> &'static str {
                weft_config::Destination::type_name(self)
            }

            /// The shared delivery fields of a push destination; `None`
            /// for a pull sink.
            pub fn delivery(&self) -> Option<&weft_config::DeliveryConfig> {
                weft_config::Destination::delivery(self)
            }

            /// Its sink type.
            pub fn kind(&self) -> &'static $crate::sink::SinkKind {
                let name = self.type_name();
                sink_kinds()
                    .iter()
                    .find(|kind| kind.name == name)
                    .expect("every destination's type is in sink_kinds()")
            }

            /// Builds how `sink`, whose destination this is, delivers
            /// (`whole` is its whole config); starts nothing.
            pub fn build(
                &self,
                sink: &$crate::config::SinkConfig,
                whole: &$crate::config::Config,
            ) -> Result<$crate::sink::Built, $crate::sink::BuildError> {
                match self {
                    $($(#[$meta])* DestinationConfig::$variant(config) => <$module::$sink as $crate::sink::Sink>::build(config, sink, whole),)+
                }
            }
        }
    };
}

pub(crate) use sink_types;
