//! Write weft functions in Rust.
//!
//! A weft function is a WebAssembly component that exports one world of the
//! `weft:plugin` WIT package (see `wit/` at the root of the weft repository).
//! This crate hides the generated bindings: you implement a small trait for
//! your own type and export it with one macro. The host calls your component
//! with batches of changes; the SDK loops over the batch and keeps outcomes
//! aligned with the input.
//!
//! # A transform
//!
//! ```ignore
//! use weft_sdk_guest::{export_transform, Change, Config, Error, Payload, Transform};
//!
//! struct Tag { label: String }
//!
//! impl Transform for Tag {
//!     fn init(config: Config) -> Result<Self, String> {
//!         Ok(Tag { label: config.require("label")?.to_string() })
//!     }
//!
//!     fn transform(&mut self, mut change: Change) -> Result<Payload, Error> {
//!         change.record_mut()?.insert("label".into(), self.label.clone().into());
//!         Ok(Payload::Json(change.into_message()?))
//!     }
//! }
//!
//! export_transform!(Tag);
//! ```
//!
//! Build it as a `cdylib` for `wasm32-wasip2` (`cargo build --target
//! wasm32-wasip2 --release`); the output `.wasm` file is the component.
//!
//! Enable the cargo feature of the kind you write (`transform`, `filter`,
//! `routing` or `enrichment`); see [`Routing`](crate::routing::Routing) and
//! [`Enrichment`](crate::enrichment::Enrichment) for their examples.

// The generated bindings name this crate by path, also from inside it.
extern crate self as weft_sdk_guest;

mod change;
mod config;
mod error;
pub mod path;
mod payload;

#[cfg(feature = "enrichment")]
pub mod enrichment;
#[cfg(feature = "filter")]
pub mod filter;
#[cfg(feature = "routing")]
pub mod routing;
#[cfg(feature = "transform")]
pub mod transform;

pub use change::{Action, Change, Metadata};
pub use config::Config;
pub use error::Error;
pub use path::MessagePath;
pub use payload::Payload;
pub use serde_json;

#[cfg(feature = "enrichment")]
pub use enrichment::Enrichment;
#[cfg(feature = "filter")]
pub use filter::Filter;
#[cfg(feature = "routing")]
pub use routing::{KeyAction, Route, Routing};
#[cfg(feature = "transform")]
pub use transform::Transform;

/// The bindings generated from the `weft:plugin` WIT package, one module per
/// world. Most plugins never need them directly.
// Generated code: a batch export lowers to more than seven core parameters.
#[allow(clippy::too_many_arguments)]
pub mod bindings {
    /// Bindings of the `transform` world.
    #[cfg(feature = "transform")]
    pub mod transform {
        wit_bindgen::generate!({
            world: "weft:plugin/transform@0.2.0",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "export_transform_world",
            default_bindings_module: "weft_sdk_guest::bindings::transform",
            runtime_path: "weft_sdk_guest::__private::wit_bindgen::rt",
        });
    }

    /// Bindings of the `routing` world.
    #[cfg(feature = "routing")]
    pub mod routing {
        wit_bindgen::generate!({
            world: "weft:plugin/routing@0.2.0",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "export_routing_world",
            default_bindings_module: "weft_sdk_guest::bindings::routing",
            runtime_path: "weft_sdk_guest::__private::wit_bindgen::rt",
        });
    }

    /// Bindings of the `enrichment` world, with its capability imports.
    #[cfg(feature = "enrichment")]
    pub mod enrichment {
        wit_bindgen::generate!({
            world: "weft:plugin/enrichment@0.2.0",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "export_enrichment_world",
            default_bindings_module: "weft_sdk_guest::bindings::enrichment",
            runtime_path: "weft_sdk_guest::__private::wit_bindgen::rt",
        });
    }

    /// Bindings of the `filter` world.
    #[cfg(feature = "filter")]
    pub mod filter {
        wit_bindgen::generate!({
            world: "weft:plugin/filter@0.2.0",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "export_filter_world",
            default_bindings_module: "weft_sdk_guest::bindings::filter",
            runtime_path: "weft_sdk_guest::__private::wit_bindgen::rt",
        });
    }
}

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;
}

/// Converts the generated WIT types of one world into the SDK's own types.
/// Every world generates its own copy of `weft:plugin/types`.
#[allow(unused_macros)]
macro_rules! wit_conversions {
    ($types:path) => {
        use $types as wit;

        /// The SDK's changes for one call: the shared context is kept once
        /// and joined with a change's own metadata only when it is read.
        pub(crate) fn changes_of(
            context: wit::BatchContext,
            batch: Vec<wit::Change>,
        ) -> impl Iterator<Item = $crate::Change> {
            let shared = ::std::rc::Rc::new($crate::change::BatchShared {
                consumer_id: context.consumer_id,
                consumer_name: context.consumer_name,
                relations: context
                    .relations
                    .into_iter()
                    .map(|r| (r.database_name, r.table_schema, r.table_name))
                    .collect(),
            });
            batch.into_iter().map(move |change| {
                let m = change.metadata;
                $crate::Change::from_host(
                    match change.action {
                        wit::Action::Insert => $crate::Action::Insert,
                        wit::Action::Update => $crate::Action::Update,
                        wit::Action::Delete => $crate::Action::Delete,
                        wit::Action::Read => $crate::Action::Read,
                    },
                    change.record,
                    change.changes,
                    $crate::change::PendingMetadata {
                        shared: shared.clone(),
                        relation: m.relation,
                        commit_timestamp: m.commit_timestamp,
                        commit_lsn: m.commit_lsn,
                        commit_idx: m.commit_idx,
                        idempotency_key: m.idempotency_key,
                        record_pks: m.record_pks,
                        transaction_annotations: m.transaction_annotations,
                        enrichment: m.enrichment,
                    },
                )
            })
        }

        impl From<$crate::Error> for wit::FunctionError {
            fn from(error: $crate::Error) -> Self {
                match error {
                    $crate::Error::Permanent(reason) => wit::FunctionError::Permanent(reason),
                    $crate::Error::Transient(reason) => wit::FunctionError::Transient(reason),
                }
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use wit_conversions;
