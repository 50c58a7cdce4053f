use std::fmt;

/// Why a function could not handle one change. The host dead-letters a
/// change that failed permanently and retries one that failed transiently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The change itself is bad; retrying will not help.
    Permanent(String),
    /// Something outside the change went wrong; retry later.
    Transient(String),
}

impl Error {
    /// A permanent error with `reason`.
    pub fn permanent(reason: impl Into<String>) -> Self {
        Error::Permanent(reason.into())
    }

    /// A transient error with `reason`.
    pub fn transient(reason: impl Into<String>) -> Self {
        Error::Transient(reason.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Permanent(reason) => write!(f, "permanent: {reason}"),
            Error::Transient(reason) => write!(f, "transient: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// Bad JSON in a change is bad data: permanent.
impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Error::Permanent(error.to_string())
    }
}
