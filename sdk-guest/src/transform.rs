//! The transform kind: one payload per change.

use std::any::Any;
use std::cell::RefCell;

use crate::{Change, Config, Error, Payload};

crate::wit_conversions!(crate::bindings::transform::weft::plugin::types);

/// A transform: turns each change into the payload its sink sends.
///
/// Implement it for your type and export the type with
/// [`export_transform!`](crate::export_transform). The host creates one
/// instance of your type per component instance, through `init`, and may
/// re-create it at any time (after a trap or a timeout).
pub trait Transform: Sized + 'static {
    /// Builds the transform from its configuration. Return an error naming
    /// the bad key to reject the configuration.
    fn init(config: Config) -> Result<Self, String>;

    /// The payload for one change.
    fn transform(&mut self, change: Change) -> Result<Payload, Error>;
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub fn __init<T: Transform>(config: wit::Config) -> Result<(), String> {
    let transform = T::init(Config::from(config))?;
    INSTANCE.with_borrow_mut(|slot| *slot = Some(Box::new(transform)));
    Ok(())
}

#[doc(hidden)]
pub fn __transform<T: Transform>(
    context: wit::BatchContext,
    batch: Vec<wit::Change>,
) -> Vec<Result<wit::Payload, wit::FunctionError>> {
    INSTANCE.with_borrow_mut(
        |slot| match slot.as_mut().and_then(|b| b.downcast_mut::<T>()) {
            Some(transform) => changes_of(context, batch)
                .map(|change| {
                    transform
                        .transform(change)
                        .and_then(into_wit_payload)
                        .map_err(Into::into)
                })
                .collect(),
            None => batch
                .iter()
                .map(|_| {
                    Err(wit::FunctionError::Transient(
                        "transform called before init".into(),
                    ))
                })
                .collect(),
        },
    )
}

fn into_wit_payload(payload: Payload) -> Result<wit::Payload, Error> {
    Ok(match payload {
        Payload::Json(value) => wit::Payload::Json(serde_json::to_string(&value)?),
        Payload::Bytes { content_type, data } => {
            wit::Payload::Bytes(wit::BytesPayload { content_type, data })
        }
    })
}

/// Exports a type implementing [`Transform`] as the component's `transform`
/// world.
///
/// ```ignore
/// weft_sdk_guest::export_transform!(MyTransform);
/// ```
#[macro_export]
macro_rules! export_transform {
    ($ty:ty) => {
        const _: () = {
            struct __WeftTransformExport;

            impl $crate::bindings::transform::Guest for __WeftTransformExport {
                fn init(
                    config: $crate::bindings::transform::weft::plugin::types::Config,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::transform::__init::<$ty>(config)
                }

                fn transform(
                    context: $crate::bindings::transform::weft::plugin::types::BatchContext,
                    batch: ::std::vec::Vec<
                        $crate::bindings::transform::weft::plugin::types::Change,
                    >,
                ) -> ::std::vec::Vec<
                    ::core::result::Result<
                        $crate::bindings::transform::weft::plugin::types::Payload,
                        $crate::bindings::transform::weft::plugin::types::FunctionError,
                    >,
                > {
                    $crate::transform::__transform::<$ty>(context, batch)
                }
            }

            $crate::bindings::transform::export_transform_world!(
                __WeftTransformExport with_types_in $crate::bindings::transform
            );
        };
    };
}
