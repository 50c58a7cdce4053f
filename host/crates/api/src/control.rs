//! What the API asks of the running weft: the [`Controller`] trait, which
//! the server implements. The API plans and applies configs, and reads
//! the config and tokens weft runs with, only through it; the work of an
//! apply (loading functions, replacing sinks, restarting feeds) runs in the
//! server, never in an HTTP handler.

use std::path::PathBuf;

use async_trait::async_trait;
use axum::http::StatusCode;
use serde::Serialize;

use super::ApiError;
use super::auth::ApiTokens;
use weft_sinks::config::ConfigError;
use weft_sinks::config::plan::{PlanError, PlannedChange};

/// An edit of the running config's text (as written): the text of the
/// config to apply, or why the edit cannot be made.
pub type ConfigEdit<'a> = Box<dyn FnOnce(&str) -> Result<String, ApiError> + Send + 'a>;

/// The running weft, as the API sees it.
#[async_trait]
pub trait Controller: Send + Sync + 'static {
    /// The config file weft runs with and its text as written; `None` when
    /// it was started without a file.
    fn config_file(&self) -> Option<(PathBuf, String)>;

    /// The tokens the API accepts now (an apply may change them).
    fn api_tokens(&self) -> ApiTokens;

    /// The changes the config `yaml` would make to the running one, once
    /// it is valid as `weft run` would check it.
    async fn plan(&self, yaml: String) -> Result<Vec<PlannedChange>, ApplyError>;

    /// Applies the config `edit` makes of the running config's text: in
    /// place where it can be (functions swapped, sinks created, updated or
    /// deleted, changed database feeds restarted), else by restarting the
    /// pipelines with it. One apply runs at a time.
    async fn apply(&self, edit: ConfigEdit<'_>) -> Result<Applied, ApplyError>;
}

/// What an apply did.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    /// The changes the config makes.
    pub changes: Vec<PlannedChange>,
    /// Whether anything was applied: the running config makes no change.
    pub applied: bool,
    /// Whether the pipelines restarted with it; absent when nothing was
    /// applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarted: Option<bool>,
    /// The functions swapped in place, and the sinks using them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_swapped: Option<HotSwapped>,
    /// The sinks created, updated and deleted in place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sinks: Option<SinksChanged>,
    /// The database feeds stopped and started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub databases: Option<DatabasesChanged>,
}

impl Applied {
    /// An apply of a config that changes nothing.
    pub fn nothing(changes: Vec<PlannedChange>) -> Applied {
        Applied {
            changes,
            applied: false,
            restarted: None,
            hot_swapped: None,
            sinks: None,
            databases: None,
        }
    }

    /// An apply that restarts the pipelines with the config.
    pub fn by_restart(changes: Vec<PlannedChange>) -> Applied {
        Applied {
            restarted: Some(true),
            applied: true,
            ..Applied::nothing(changes)
        }
    }
}

/// The functions an apply swapped in place.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HotSwapped {
    /// The functions whose new version runs.
    pub functions: Vec<String>,
    /// The sinks that run them.
    pub sinks: Vec<String>,
}

/// The sinks an apply changed in place.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SinksChanged {
    /// Created sinks.
    pub created: Vec<String>,
    /// Updated sinks.
    pub updated: Vec<String>,
    /// Deleted sinks.
    pub deleted: Vec<String>,
}

/// The database feeds an apply stopped and started.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DatabasesChanged {
    /// Feeds stopped.
    pub stopped: Vec<String>,
    /// Feeds started.
    pub started: Vec<String>,
}

/// Why a config was not planned or applied. Each variant has its HTTP
/// status (see its `From` for [`ApiError`]).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Weft was started without a config file: 409.
    #[error(
        "this weft was started without a config file, so there is none to plan against or apply to"
    )]
    NoConfigFile,
    /// The config holds the placeholder `config export` writes for secrets: 400.
    #[error(
        "the config holds {0:?} in place of secrets (as `config export` writes it); put the secrets, or `${{VAR}}` references to them, back first"
    )]
    Redacted(&'static str),
    /// The config is not valid: 400, every problem under its path.
    #[error("the config is not valid; nothing was applied (see validation_errors)")]
    Invalid(#[source] ConfigError),
    /// Functions name registered plugins that cannot be used: 400, each
    /// problem under `functions[i].plugin`.
    #[error(
        "the config names plugins that cannot be used; nothing was applied (see validation_errors)"
    )]
    UnresolvedPlugins(Vec<(usize, String)>),
    /// The running and proposed configs could not be compared: 400.
    #[error("{0}")]
    Unplannable(#[source] PlanError),
    /// Something the config asks for cannot be loaded or built: 400.
    #[error("{0}; nothing was applied")]
    Refused(String),
    /// The config file could not be written: 500.
    #[error("cannot write the config file {path}: {source}; nothing was applied")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A task of the apply failed: 500.
    #[error("{0}")]
    Task(String),
    /// The edit of the running config could not be made (its own status).
    #[error("{0}")]
    Edit(ApiError),
}

impl From<ApplyError> for ApiError {
    fn from(error: ApplyError) -> ApiError {
        let summary = error.to_string();
        match error {
            ApplyError::NoConfigFile => ApiError::new(StatusCode::CONFLICT, summary),
            ApplyError::Redacted(_) | ApplyError::Unplannable(_) | ApplyError::Refused(_) => {
                ApiError::bad_param("yaml", summary)
            }
            ApplyError::Invalid(error) => error.issues().iter().fold(
                ApiError::new(StatusCode::BAD_REQUEST, summary),
                |api_error, issue| {
                    let at = issue
                        .location
                        .map(|l| format!(" (line {}, column {})", l.line, l.column))
                        .unwrap_or_default();
                    let key = if issue.path.is_empty() {
                        "yaml"
                    } else {
                        &issue.path
                    };
                    api_error.with_validation(key, vec![format!("{}{at}", issue.message)])
                },
            ),
            ApplyError::UnresolvedPlugins(problems) => problems.into_iter().fold(
                ApiError::new(StatusCode::BAD_REQUEST, summary),
                |api_error, (i, problem)| {
                    api_error.with_validation(&format!("functions[{i}].plugin"), vec![problem])
                },
            ),
            ApplyError::Write { .. } | ApplyError::Task(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, summary)
            }
            ApplyError::Edit(error) => error,
        }
    }
}
