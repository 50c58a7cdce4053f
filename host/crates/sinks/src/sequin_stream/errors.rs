//! What fails when consumers pull: a receive, ack or nack the sink could not
//! serve. The API answers each with its own status (see `api::pull`).

use weft_store::StoreError;

/// A receive, ack or nack could not be served.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// `max_waiting` receive requests are already open for the sink.
    #[error(
        "sink {sink:?} already has {max_waiting} receive requests open (max_waiting = {max_waiting}); retry when one returns, or raise max_waiting in the sink's settings"
    )]
    TooManyWaiting {
        /// The sink's name.
        sink: String,
        /// Its `max_waiting` setting.
        max_waiting: u32,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A store call panicked; the store rolled its transaction back.
    #[error("a store call for sink {sink:?} panicked: {detail}")]
    Panicked {
        /// The sink's name.
        sink: String,
        /// The panic.
        detail: String,
    },
}
