//! What goes wrong when loading a config, said precisely: the path of the
//! node in the document, what is wrong with it, and where it is in the text.

use std::fmt;
use std::path::PathBuf;

use super::path::DocPath;

/// A position in the config text, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column (in characters), from 1.
    pub column: usize,
}

/// One problem in a config document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Where the problem is, like `sinks[0].destination.type`; empty when it
    /// concerns the document as a whole (a YAML syntax error, an unset
    /// environment variable).
    pub path: String,
    /// What is wrong and, where there is a set, the allowed values.
    pub message: String,
    /// The line and column in the text, when known.
    pub location: Option<Location>,
}

impl ConfigIssue {
    pub(crate) fn at(path: &DocPath, message: impl Into<String>) -> Self {
        ConfigIssue {
            path: path.to_string(),
            message: message.into(),
            location: None,
        }
    }

    pub(crate) fn with_location(mut self, location: Option<Location>) -> Self {
        self.location = self.location.or(location);
        self
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some(Location { line, column }) = self.location {
            write!(f, " (line {line}, column {column})")?;
        }
        Ok(())
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file weft tried to read.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid config. Display prints one issue per line.
    #[error("{}", render_issues(file.as_ref(), issues))]
    Invalid {
        /// The file the text came from, when it came from a file.
        file: Option<PathBuf>,
        /// Every problem found, in document order. Never empty.
        issues: Vec<ConfigIssue>,
    },
}

impl ConfigError {
    /// The problems found; empty for [`ConfigError::Read`].
    pub fn issues(&self) -> &[ConfigIssue] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { issues, .. } => issues,
        }
    }

    pub(crate) fn invalid(issues: Vec<ConfigIssue>) -> Self {
        debug_assert!(!issues.is_empty());
        ConfigError::Invalid { file: None, issues }
    }

    pub(crate) fn in_file(self, path: PathBuf) -> Self {
        match self {
            ConfigError::Invalid { issues, .. } => ConfigError::Invalid {
                file: Some(path),
                issues,
            },
            read => read,
        }
    }
}

fn render_issues(file: Option<&PathBuf>, issues: &[ConfigIssue]) -> String {
    let mut out = String::new();
    for (i, issue) in issues.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if let Some(file) = file {
            out.push_str(&format!("{}: ", file.display()));
        }
        out.push_str(&issue.to_string());
    }
    out
}
