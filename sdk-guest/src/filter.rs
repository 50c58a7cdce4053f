//! The filter kind: keep or drop each change.

use std::any::Any;
use std::cell::RefCell;

use crate::{Change, Config, Error};

crate::wit_conversions!(crate::bindings::filter::weft::plugin::types);

/// A filter: decides which changes its sink receives.
///
/// Implement it for your type and export the type with
/// [`export_filter!`](crate::export_filter).
pub trait Filter: Sized + 'static {
    /// Builds the filter from its configuration.
    fn init(config: Config) -> Result<Self, String>;

    /// `true` keeps the change, `false` drops it.
    fn filter(&mut self, change: Change) -> Result<bool, Error>;
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub fn __init<T: Filter>(config: wit::Config) -> Result<(), String> {
    let filter = T::init(Config::from(config))?;
    INSTANCE.with_borrow_mut(|slot| *slot = Some(Box::new(filter)));
    Ok(())
}

#[doc(hidden)]
pub fn __filter<T: Filter>(
    context: wit::BatchContext,
    batch: Vec<wit::Change>,
) -> Vec<Result<bool, wit::FunctionError>> {
    INSTANCE.with_borrow_mut(
        |slot| match slot.as_mut().and_then(|b| b.downcast_mut::<T>()) {
            Some(filter) => changes_of(context, batch)
                .map(|change| filter.filter(change).map_err(Into::into))
                .collect(),
            None => batch
                .iter()
                .map(|_| {
                    Err(wit::FunctionError::Transient(
                        "filter called before init".into(),
                    ))
                })
                .collect(),
        },
    )
}

/// Exports a type implementing [`Filter`] as the component's `filter` world.
///
/// ```ignore
/// weft_sdk_guest::export_filter!(MyFilter);
/// ```
#[macro_export]
macro_rules! export_filter {
    ($ty:ty) => {
        const _: () = {
            struct __WeftFilterExport;

            impl $crate::bindings::filter::Guest for __WeftFilterExport {
                fn init(
                    config: $crate::bindings::filter::weft::plugin::types::Config,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::filter::__init::<$ty>(config)
                }

                fn filter(
                    context: $crate::bindings::filter::weft::plugin::types::BatchContext,
                    batch: ::std::vec::Vec<$crate::bindings::filter::weft::plugin::types::Change>,
                ) -> ::std::vec::Vec<
                    ::core::result::Result<
                        bool,
                        $crate::bindings::filter::weft::plugin::types::FunctionError,
                    >,
                > {
                    $crate::filter::__filter::<$ty>(context, batch)
                }
            }

            $crate::bindings::filter::export_filter_world!(
                __WeftFilterExport with_types_in $crate::bindings::filter
            );
        };
    };
}
