use std::path::PathBuf;

/// Why a plugin project could not be created or built. Every message names
/// the thing at fault and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// The project name is not usable as a crate, file and function name.
    #[error(
        "invalid plugin name `{0}`: use 1 to 64 lowercase ASCII letters, digits and single dashes, starting with a letter (e.g. `orders-filter`)"
    )]
    BadName(String),
    /// The language is not one weft can scaffold.
    #[error("unknown language `{0}`: choose one of rust, js, python, c")]
    UnknownLang(String),
    /// The function kind is unknown, or has no template in this language.
    #[error("unknown or unsupported kind `{kind}` for {lang}: choose one of {supported}")]
    UnknownKind {
        /// The kind asked for.
        kind: String,
        /// The language asked for.
        lang: String,
        /// The kinds this language has templates for.
        supported: String,
    },
    /// The target folder exists and has files in it.
    #[error(
        "{0} already exists and is not empty: choose another name or --dir, or remove it first"
    )]
    NotEmpty(PathBuf),
    /// No weft-sdk-guest crate to point a Rust project at.
    #[error(
        "no weft-sdk-guest crate found for the Rust project: pass --sdk-path <weft checkout>/sdk-guest (looked in the folders above {0} and in the checkout weft was built from)"
    )]
    NoSdk(PathBuf),
    /// The folder is not a plugin project.
    #[error("{0} has no weft-plugin.toml: is it a project made by `weft plugin new`?")]
    NoMarker(PathBuf),
    /// The marker file is malformed.
    #[error("{path}: {reason}")]
    BadMarker {
        /// The marker file.
        path: PathBuf,
        /// What is wrong, with the line.
        reason: String,
    },
    /// A tool the build needs is not installed.
    #[error("{tool} not found ({looked}): {fix}")]
    MissingTool {
        /// The missing tool.
        tool: String,
        /// Where weft looked.
        looked: String,
        /// What to install or run.
        fix: String,
    },
    /// A build command failed.
    #[error("`{command}` failed ({status}); its output is above")]
    CommandFailed {
        /// The command line, for the user to rerun.
        command: String,
        /// Its exit status.
        status: String,
    },
    /// The build finished but did not produce a component.
    #[error("{0} is not a WebAssembly component")]
    NotAComponent(PathBuf),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Wraps an I/O error with the path it happened on.
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ProjectError {
    let path = path.into();
    move |source| ProjectError::Io { path, source }
}
