//! `weft plugin new`: writes a new project from the embedded templates.
//!
//! A Rust project depends on `weft-sdk-guest` by path. The path is, in this
//! order: `--sdk-path`; the `sdk-guest/` of a weft checkout the project is
//! created inside (written relative, so the checkout can move); the
//! `sdk-guest/` of the checkout this weft binary was built from. The SDK is
//! not on crates.io yet; when none of these exists the error says to pass
//! `--sdk-path`. The checkout's `Cargo.lock` is copied too, so the project
//! builds with the versions weft is tested with, and offline.

use std::path::{Component, Path, PathBuf};

use super::error::io;
use super::{Kind, Lang, Marker, ProjectError, templates};

/// What `weft plugin new` was asked for.
#[derive(Debug, Clone)]
pub struct NewProject {
    /// The project's name (also the component's file name).
    pub name: String,
    /// The language.
    pub lang: Lang,
    /// The function kind.
    pub kind: Kind,
    /// The folder to create; `./<name>` when `None`.
    pub dir: Option<PathBuf>,
    /// The `sdk-guest` folder of a weft checkout, for Rust projects.
    pub sdk_path: Option<PathBuf>,
}

/// Where a Rust project's `weft-sdk-guest` dependency points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkSource {
    /// A path as written into Cargo.toml, and the checkout root holding it.
    Path {
        /// The path written into Cargo.toml.
        written: String,
        /// The weft checkout the SDK belongs to.
        checkout: PathBuf,
    },
}

/// Checks that `name` is usable as a crate, file and function name:
/// lowercase ASCII letters, digits and single dashes, starting with a
/// letter, at most 64 characters.
pub fn check_name(name: &str) -> Result<(), ProjectError> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ProjectError::BadName(name.to_string()))
    }
}

/// Creates the project and returns its folder.
pub fn scaffold(request: &NewProject) -> Result<PathBuf, ProjectError> {
    check_name(&request.name)?;
    let marker = Marker {
        name: request.name.clone(),
        lang: request.lang,
        kind: request.kind,
    };
    let dir = request
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&request.name));
    if dir.exists() {
        let mut entries = std::fs::read_dir(&dir).map_err(io(&dir))?;
        if entries.next().is_some() {
            return Err(ProjectError::NotEmpty(dir));
        }
    }
    let sdk = match request.lang {
        Lang::Rust => Some(find_sdk(&dir, request.sdk_path.as_deref())?),
        _ => None,
    };
    let dependency = match &sdk {
        Some(SdkSource::Path { written, .. }) => format!(
            "weft-sdk-guest = {{ path = {written:?}, features = [\"{}\"] }}",
            request.kind
        ),
        None => String::new(),
    };
    // Check the template exists before creating anything.
    let files = templates::project_files(&marker, &dependency)?;
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    if let Some(SdkSource::Path { checkout, .. }) = &sdk {
        let lock = checkout.join("Cargo.lock");
        if lock.is_file() {
            let to = dir.join("Cargo.lock");
            std::fs::copy(&lock, &to).map_err(io(&to))?;
        }
    }
    Ok(dir)
}

/// Finds `weft-sdk-guest` for a project to be created in `dir`.
fn find_sdk(dir: &Path, explicit: Option<&Path>) -> Result<SdkSource, ProjectError> {
    if let Some(sdk) = explicit {
        let sdk = std::path::absolute(sdk).map_err(io(sdk))?;
        if !is_sdk(&sdk) {
            return Err(ProjectError::NoSdk(sdk));
        }
        return Ok(SdkSource::Path {
            written: sdk.display().to_string(),
            checkout: sdk.parent().unwrap_or(&sdk).to_path_buf(),
        });
    }
    let dir = std::path::absolute(dir).map_err(io(dir))?;
    let dir = normalize(&dir);
    for ancestor in dir.ancestors().skip(1) {
        if is_sdk(&ancestor.join("sdk-guest")) {
            let depth = dir
                .strip_prefix(ancestor)
                .expect("an ancestor")
                .components()
                .count();
            return Ok(SdkSource::Path {
                written: format!("{}sdk-guest", "../".repeat(depth)),
                checkout: ancestor.to_path_buf(),
            });
        }
    }
    let built_from = normalize(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    if is_sdk(&built_from.join("sdk-guest")) {
        return Ok(SdkSource::Path {
            written: built_from.join("sdk-guest").display().to_string(),
            checkout: built_from,
        });
    }
    Err(ProjectError::NoSdk(dir))
}

/// Whether `dir` holds the weft-sdk-guest crate.
fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .is_ok_and(|text| text.contains("name = \"weft-sdk-guest\""))
}

/// `path` without `.` and `..` components (lexically).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_lowercase_words_joined_by_dashes() {
        for good in ["a", "orders-filter", "f2", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Orders",
            "2fast",
            "-a",
            "a-",
            "a--b",
            "a_b",
            "a b",
            "../x",
            &"x".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn inside_a_checkout_the_sdk_path_is_relative() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("sdk-guest")).unwrap();
        std::fs::write(
            root.path().join("sdk-guest/Cargo.toml"),
            "[package]\nname = \"weft-sdk-guest\"\n",
        )
        .unwrap();
        let found = find_sdk(&root.path().join("plugins/mine"), None).unwrap();
        let SdkSource::Path { written, .. } = found;
        assert_eq!(written, "../../sdk-guest");
    }
}
