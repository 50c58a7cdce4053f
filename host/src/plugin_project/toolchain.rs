//! Where the non-Rust toolchains are: the ones `scripts/build-examples.sh`
//! installs and pins. That script writes their paths to `toolchain.env`
//! (`key=path` lines) in its cache; weft reads that file, so the versions
//! and locations live in the script alone.
//!
//! The file is `$WEFT_PLUGIN_TOOLCHAIN` when set, else
//! `${CARGO_TARGET_DIR:-$HOME/.cache/weft/target}/examples/toolchain.env`,
//! the script's own default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ProjectError;

/// What to do when the toolchain is missing.
const INSTALL_HINT: &str = "run scripts/build-examples.sh from a weft checkout once (it installs the pinned componentize-js, componentize-py, wit-bindgen, wasm-tools and the WASI adapter), with the same CARGO_TARGET_DIR, or set WEFT_PLUGIN_TOOLCHAIN to the toolchain.env it wrote";

/// The toolchain paths written by `scripts/build-examples.sh`.
#[derive(Debug, Clone)]
pub struct Toolchain {
    file: PathBuf,
    paths: BTreeMap<String, PathBuf>,
}

impl Toolchain {
    /// The file weft reads the toolchain from (it may not exist).
    pub fn file() -> PathBuf {
        if let Some(file) = std::env::var_os("WEFT_PLUGIN_TOOLCHAIN") {
            return PathBuf::from(file);
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/weft/target"))
            })
            .unwrap_or_else(|| PathBuf::from("target"));
        target.join("examples/toolchain.env")
    }

    /// Reads the toolchain file; a missing file is an error saying how to
    /// install the toolchains.
    pub fn load() -> Result<Toolchain, ProjectError> {
        let file = Toolchain::file();
        let text = std::fs::read_to_string(&file).map_err(|_| ProjectError::MissingTool {
            tool: "the plugin toolchain".into(),
            looked: file.display().to_string(),
            fix: INSTALL_HINT.into(),
        })?;
        let paths = text
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, path)| (key.trim().to_string(), PathBuf::from(path.trim())))
            .collect();
        Ok(Toolchain { file, paths })
    }

    /// The path of `tool` (a key of the file, e.g. `componentize_js`),
    /// checked to exist.
    pub fn tool(&self, tool: &str) -> Result<&Path, ProjectError> {
        match self.paths.get(tool) {
            Some(path) if path.exists() => Ok(path),
            other => Err(ProjectError::MissingTool {
                tool: tool.replace('_', "-"),
                looked: match other {
                    Some(path) => path.display().to_string(),
                    None => format!("no `{tool}=` line in {}", self.file.display()),
                },
                fix: INSTALL_HINT.into(),
            }),
        }
    }
}

/// Checks that `command` is on `PATH`; the error says which package to
/// install.
pub fn require_command(command: &str, package: &str) -> Result<(), ProjectError> {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()));
    if found {
        Ok(())
    } else {
        Err(ProjectError::MissingTool {
            tool: command.into(),
            looked: "PATH".into(),
            fix: format!("install {package} (scripts/build-examples.sh installs it on Debian)"),
        })
    }
}

/// Checks that `file` (a system library or header) exists.
pub fn require_file(file: &str, package: &str) -> Result<(), ProjectError> {
    if Path::new(file).exists() {
        Ok(())
    } else {
        Err(ProjectError::MissingTool {
            tool: package.into(),
            looked: file.into(),
            fix: format!("install {package} (scripts/build-examples.sh installs it on Debian)"),
        })
    }
}
