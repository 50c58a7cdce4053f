//! Which failures of a Postgres sink a retry can fix.
//!
//! Permanent (the message is dead-lettered with Postgres's message): a data
//! exception (SQLSTATE class 22) or an integrity violation (class 23) other
//! than a foreign key, whose referenced row may arrive later. Everything
//! else is retried with backoff: a lost connection, a missing table that
//! the operator can create, a refused row that names what to fix.

use crate::delivery::DeliveryOutcome;

/// Why a batch (or message) was not written.
pub(super) enum WriteError {
    /// These messages cannot be written as they are.
    Refused(Vec<(usize, String)>),
    /// Postgres refused the transaction.
    Sql(tokio_postgres::Error),
    /// A target table is missing or cannot be created.
    Setup(String),
}

impl From<tokio_postgres::Error> for WriteError {
    fn from(error: tokio_postgres::Error) -> Self {
        WriteError::Sql(error)
    }
}

/// The outcome of a message written alone that failed with `error`.
pub(super) fn outcome(error: WriteError) -> DeliveryOutcome {
    match error {
        WriteError::Refused(refused) => {
            let reason = refused
                .into_iter()
                .map(|(_, reason)| reason)
                .collect::<Vec<_>>()
                .join("; ");
            DeliveryOutcome::retry(reason)
        }
        WriteError::Setup(reason) => DeliveryOutcome::retry(reason),
        WriteError::Sql(error) => {
            let text = describe(&error);
            if is_data_error(&error) {
                DeliveryOutcome::permanent(text)
            } else {
                DeliveryOutcome::retry(text)
            }
        }
    }
}

/// Postgres's message with its SQLSTATE and detail.
pub(super) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(": {detail}"));
            }
            text
        }
        None => error.to_string(),
    }
}

/// Whether no retry can make Postgres accept the message: a data exception
/// (class 22) or an integrity violation (class 23) other than a foreign key,
/// whose referenced row may arrive later.
fn is_data_error(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some_and(|db| {
        let code = db.code().code();
        code.starts_with("22") || (code.starts_with("23") && code != "23503")
    })
}
